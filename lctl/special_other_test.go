//go:build !amd64

package lctl

// specialIndexWide: no wide way outside amd64.
func specialIndexWide() (func(bool) bool, bool) { return nil, false }
