// Package lctltest generates LCTL chains for tests and benchmarks: XCT-shaped
// runs (run_started, then per step a proposal, a verdict, a tool call or an
// error and a step_end) interleaved with the spec's fact, checkpoint,
// contract and streaming events, so every reducer path is exercised.
package lctltest

import (
	"fmt"
	"time"

	"github.com/xct-dev/xct/lctl"
)

// Options tune Chain.
type Options struct {
	// Seal links the events with hashes (slow for millions of events).
	Seal bool
	// Start is the first timestamp; events are 10 ms apart.
	Start time.Time
	// Facts is how many distinct fact ids the chain cycles through
	// (default 500).
	Facts int
}

// Chain returns n events of one chain, deterministic for the same
// arguments.
func Chain(chainID string, n int, opts Options) []lctl.Event {
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	}
	if opts.Facts <= 0 {
		opts.Facts = 500
	}
	agents := [...]string{"planner", "coder", "reviewer"}
	tools := [...]string{"fs.read", "fs.write", "fs.list", "grep"}
	events := make([]lctl.Event, 0, n)
	add := func(typ, agent string, data map[string]any) {
		if len(events) >= n {
			return
		}
		events = append(events, lctl.Event{
			ChainID:   chainID,
			Seq:       uint64(len(events) + 1),
			Type:      typ,
			Timestamp: lctl.FormatTime(opts.Start.Add(time.Duration(len(events)) * 10 * time.Millisecond)),
			Agent:     agent,
			Data:      data,
		})
	}
	add("run_started", "orchestrator", map[string]any{"run_id": chainID, "goal": "benchmark", "model": "m1", "principal": "bench", "max_steps": 1e9})
	for step := 1; len(events) < n; step++ {
		agent := agents[step%len(agents)]
		tool := tools[step%len(tools)]
		id := fmt.Sprintf("%032x", step)
		s := float64(step)
		add("step_start", agent, map[string]any{"step": s, "step_id": id, "intent": "work on the task", "input_summary": tool + " path=src/main.go",
			"tool": tool, "arguments": map[string]any{"path": "src/main.go"}, "model": "model-" + agent})
		add("verdict", "validator", map[string]any{"step": s, "step_id": id, "tool": tool, "decision": "allow",
			"reasons": []any{map[string]any{"rule_id": "allow-read", "message": "reads are allowed"}}, "policy_version": "sha256:p1"})
		if step%10 == 0 {
			add("error", "executor", map[string]any{"step": s, "step_id": id, "code": "NOT_FOUND", "category": "execution_error",
				"type": "tool_failure", "message": "no such file", "recoverable": true, "suggested_action": "check_the_path"})
		} else {
			add("tool_call", "executor", map[string]any{"step": s, "step_id": id, "tool": tool, "input": map[string]any{"path": "src/main.go"},
				"output": map[string]any{"size": 1024.0}, "duration_ms": float64(step % 37), "status": "success"})
		}
		if step%3 == 0 {
			fid := fmt.Sprintf("F%d", step%opts.Facts)
			typ := "fact_added"
			if step%2 == 0 {
				typ = "fact_modified"
			}
			add(typ, agent, map[string]any{"id": fid, "text": "finding " + fid, "confidence": float64(50+step%50) / 100, "source": agent,
				"tags": []any{"auto"}, "reason": "observed"})
		}
		if step%97 == 0 {
			add("contract_validation", "system", map[string]any{"contract": agent, "direction": "output", "status": "passed", "warnings": []any{}})
		}
		if step%131 == 0 {
			add("stream_start", agent, map[string]any{"expected_chunks": "unknown"})
			add("stream_chunk", agent, map[string]any{"index": 0.0, "content": "partial", "tokens": 5.0})
			add("stream_end", agent, map[string]any{"total_chunks": 1.0, "total_tokens": 5.0, "duration_ms": 20.0})
		}
		add("step_end", agent, map[string]any{"step": s, "step_id": id, "outcome": "success", "output_summary": "done",
			"duration_ms": float64(20 + step%113), "tokens": map[string]any{"input": float64(100 + step%50), "output": float64(20 + step%30)}})
	}
	if opts.Seal {
		prev := ""
		for i := range events {
			if err := events[i].Seal(prev); err != nil {
				panic(err) // the generator only builds JSON values
			}
			prev = events[i].Hash
		}
	}
	return events
}
