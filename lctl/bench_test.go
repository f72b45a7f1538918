package lctl_test

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
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

// benchChainLen is the chain length of the replay benchmarks.
const benchChainLen = 1_000_000

// BenchmarkReplay1M replays a 1,000,000-event XCT-shaped chain (generated
// here, not read from disk) and reports events per second.
func BenchmarkReplay1M(b *testing.B) {
	events := lctltest.Chain("bench", benchChainLen, lctltest.Options{})
	runtime.GC() // do not charge the generator's garbage to the replay
	b.ResetTimer()
	b.ReportAllocs()
	for b.Loop() {
		s := lctl.Replay("bench", events, 0)
		if s.EventCount != benchChainLen {
			b.Fatalf("applied %d events", s.EventCount)
		}
	}
	b.ReportMetric(float64(benchChainLen)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReplayToSeq is replay to a seq near the end of a 1,000,000-event
// chain: from the first event (no snapshots) and from the nearest snapshot
// of a Timeline that snapshots every 1000 events.
func BenchmarkReplayToSeq(b *testing.B) {
	events := lctltest.Chain("bench", benchChainLen, lctltest.Options{})
	runtime.GC()
	target := uint64(benchChainLen - 123)
	b.Run("without-snapshots", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := lctl.Replay("bench", events, target); s.Seq != target {
				b.Fatal(s.Seq)
			}
		}
	})
	tl := lctl.NewTimeline("bench", lctl.DefaultSnapshotEvery)
	for _, e := range events {
		tl.Append(e)
	}
	b.Run("with-snapshots", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s := tl.StateAt(target); s.Seq != target {
				b.Fatal(s.Seq)
			}
		}
	})
	// The summary (every field but Steps): what `lctl replay --to-seq
	// --chain` and ReplayChain's summary view need.
	b.Run("summary-with-snapshots", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s, _ := tl.SummaryAt(target); s.Seq != target {
				b.Fatal(s.Seq)
			}
		}
	})
}

// BenchmarkTimelineAppend is what keeping snapshots costs per event.
func BenchmarkTimelineAppend(b *testing.B) {
	events := lctltest.Chain("bench", 200_000, lctltest.Options{})
	b.ResetTimer()
	for b.Loop() {
		tl := lctl.NewTimeline("bench", lctl.DefaultSnapshotEvery)
		for _, e := range events {
			tl.Append(e)
		}
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkStateHash hashes the state of a 100,000-event chain: v1 is
// what each checkpoint cost to record and to verify before session 5 (the
// whole state); v2-first is the first hash of version 2 of a state (its
// running hashes and trees built), what `replay --hash` and the tracer's
// ReplayChain pay once. Each next checkpoint of version 2 costs what
// changed since (BenchmarkCrewCheckpoint in internal/crew).
func BenchmarkStateHash(b *testing.B) {
	s := lctl.Replay("bench", lctltest.Chain("bench", 100_000, lctltest.Options{}), 0)
	b.Run("v1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.HashV1(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v2-first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			c := s.Clone() // starts without the hasher
			b.StartTimer()
			if _, err := c.Hash(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeFile reads a 100,000-event chain file, what every lctl
// command on a file pays first.
func BenchmarkDecodeFile(b *testing.B) {
	var buf bytes.Buffer
	if err := lctl.NewFile("bench", lctltest.Chain("bench", 100_000, lctltest.Options{Seal: true})).Encode(&buf, lctl.FormatJSON); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(100_000*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// workflowLines returns n events of a generated workflow chain as the
// lines lctltest.WriteWorkflow writes (canonical JSON), and their size.
func workflowLines(b *testing.B, n int) ([][]byte, int64) {
	var buf bytes.Buffer
	if err := lctltest.WriteWorkflow(&buf, "bench", n, lctltest.WorkflowOptions{Seal: true}); err != nil {
		b.Fatal(err)
	}
	var out [][]byte
	var size int64
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte(","))
		if len(line) == 0 || line[0] != '{' || bytes.HasPrefix(line, []byte(`{"lctl"`)) {
			continue
		}
		out = append(out, line)
		size += int64(len(line))
	}
	return out, size
}

// BenchmarkFastEvent is the stream's reader on one event at a time, to
// compare with the JSON libraries measured in tools/jsonbench (the same
// events, the same result: the event's fields and its data as
// map[string]any). BenchmarkFastEvent/stdlib is encoding/json.Unmarshal on
// them.
func BenchmarkFastEvent(b *testing.B) {
	events, size := workflowLines(b, 100_000)
	b.Run("lctl", func(b *testing.B) {
		read := lctl.FastEventReader()
		b.SetBytes(size / int64(len(events)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := read(events[i%len(events)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("stdlib", func(b *testing.B) {
		// encoding/json into the same fields (what decoding cost before).
		type event struct {
			ChainID   string         `json:"chain_id"`
			Seq       uint64         `json:"seq"`
			Type      string         `json:"type"`
			Timestamp string         `json:"timestamp"`
			Agent     string         `json:"agent"`
			Data      map[string]any `json:"data"`
			PrevHash  string         `json:"prev_hash"`
			Hash      string         `json:"hash"`
		}
		b.SetBytes(size / int64(len(events)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var e event
			if err := json.Unmarshal(events[i%len(events)], &e); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkStream reads a generated 100,000-event chain file with Stream
// (every core, events handed over in order, nothing kept): the decoding
// rate of every streamed command.
func BenchmarkStream(b *testing.B) {
	var buf bytes.Buffer
	if err := lctltest.WriteWorkflow(&buf, "bench", 100_000, lctltest.WorkflowOptions{Seal: true}); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	for _, c := range []struct {
		name string
		opts lctl.StreamOptions
	}{
		{"without-hashes", lctl.StreamOptions{SkipHashes: true}},
		{"all-fields", lctl.StreamOptions{}},
		{"data-as-fields", lctl.StreamOptions{SkipHashes: true, Fields: true}},
		{"one-core", lctl.StreamOptions{SkipHashes: true, Fields: true, Workers: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				err := lctl.Stream(bytes.NewReader(raw), c.opts, func(*lctl.StreamHeader) error { return nil },
					func(*lctl.StreamEvent) error { n++; return nil })
				if err != nil || n != 100_000 {
					b.Fatal(n, err)
				}
			}
			b.ReportMetric(100_000*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendEncode is what the chain writer does per append in our
// code: the payload handed over (DataShared), sealed and encoded once
// (SealEncoded).
func BenchmarkAppendEncode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		data, err := lctl.DataShared(stepStartData())
		if err != nil {
			b.Fatal(err)
		}
		e := lctl.Event{ChainID: "run-1", Seq: 7, Type: "step_start", Timestamp: "2026-11-21T13:42:23.401233911Z", Agent: "demo-agent", Data: data}
		if _, err := e.SealEncoded("9f0c6a4b2d1e0f3a5b7c9d8e6f4a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"); err != nil {
			b.Fatal(err)
		}
	}
}
