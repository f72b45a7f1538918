//go:build !amd64

package text

// hiddenIndexWide: no wide way outside amd64.
func hiddenIndexWide() (func(bool) bool, bool) { return nil, false }
