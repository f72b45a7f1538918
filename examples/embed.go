// Package examples embeds the files the xct binary ships: the bundled demo
// that `make run` plays through the cluster.
package examples

import _ "embed"

// DemoScript is the scripted model of the bundled demo.
//
//go:embed demo/script.yaml
var DemoScript []byte

// CrewDemo is the crew the bundled demo plays after the single-model run
// (docs/crews.md), and CrewDemoScript the scripted models its agents play.
//
//go:embed crews/demo/crew.yaml
var CrewDemo []byte

//go:embed crews/demo/script.yaml
var CrewDemoScript []byte
