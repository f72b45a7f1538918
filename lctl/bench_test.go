package lctl_test

import (
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// stepStartData is the payload the orchestrator records for a proposal.
func stepStartData() map[string]any {
	return map[string]any{
		"step": 3, "step_id": "39a8925527f36a20f6b1e5f92e242703", "intent": "Write the deployment configuration",
		"input_summary": "fs.write path=config/app.yaml", "tool": "fs.write", "model": "demo-agent",
		"arguments": map[string]any{"path": "config/app.yaml", "content": "service: checkout\nreplicas: 3\ndeployment: blue\n"},
		"labels":    map[string]string{"team": "platform"},
		"reasons":   []any{map[string]any{"rule_id": "allow-read", "message": "reads are allowed"}},
	}
}

// BenchmarkSealAndEncode is what an append costs in our code: normalize the
// payload, hash the event and encode the message body.
func BenchmarkSealAndEncode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		data, err := lctl.DataOf(stepStartData())
		if err != nil {
			b.Fatal(err)
		}
		e := lctl.Event{ChainID: "run-1", Seq: 7, Type: "step_start", Timestamp: "2026-11-21T13:42:23.401233911Z", Agent: "demo-agent", Data: data}
		if err := e.Seal("9f0c6a4b2d1e0f3a5b7c9d8e6f4a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"); err != nil {
			b.Fatal(err)
		}
		if _, err := e.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEvent is what every reader pays per event.
func BenchmarkDecodeEvent(b *testing.B) {
	data, _ := lctl.DataOf(stepStartData())
	e := lctl.Event{ChainID: "run-1", Seq: 7, Type: "step_start", Timestamp: "2026-11-21T13:42:23.401233911Z", Agent: "demo-agent", Data: data}
	_ = e.Seal("")
	raw, _ := e.MarshalJSON()
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := lctl.DecodeEvent(raw); err != nil {
			b.Fatal(err)
		}
	}
}
