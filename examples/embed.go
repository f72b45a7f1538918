// Package examples embeds the files the xct binary ships: the bundled demo
// that `make run` plays through the cluster.
package examples

import _ "embed"

// DemoScript is the scripted model of the bundled demo.
//
//go:embed demo/script.yaml
var DemoScript []byte
