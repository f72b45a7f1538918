// Package examples embeds the files the xct binary ships: the bundled demo
// that `make run` plays through the cluster.
package examples

import _ "embed"

// DemoScript is the scripted model of the bundled demo.
//
//go:embed demo/script.yaml
var DemoScript []byte

// CrewDemo is the crew the bundled demo plays after the single-model run
// (docs/crews.md), and CrewDemoScripts the scripted models its agents
// play, one script per agent, by the name its model references give.
//
//go:embed crews/demo/crew.yaml
var CrewDemo []byte

var (
	//go:embed crews/demo/analyzer.yaml
	crewDemoAnalyzer []byte
	//go:embed crews/demo/reviewer.yaml
	crewDemoReviewer []byte
	//go:embed crews/demo/fixer.yaml
	crewDemoFixer []byte
)

// CrewDemoScripts are the crew demo's scripts by file name
// (scripted:crew-demo-analyzer.yaml, ...): each agent's own.
var CrewDemoScripts = map[string][]byte{
	"crew-demo-analyzer.yaml": crewDemoAnalyzer,
	"crew-demo-reviewer.yaml": crewDemoReviewer,
	"crew-demo-fixer.yaml":    crewDemoFixer,
}
