package eventlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/otlp"
)

func openLog(t *testing.T) *eventlog.Log {
	t.Helper()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	l, err := eventlog.Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAppendReadVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	w, err := l.NewChainWriter("run-1")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := l.NewChainWriter("run-2")
	for i, typ := range []string{"run_started", "step_start", "verdict", "tool_call", "step_end"} {
		if _, err := w.Append(ctx, typ, "orchestrator", map[string]any{"i": float64(i)}); err != nil {
			t.Fatalf("append %s: %v", typ, err)
		}
		// Interleave another chain so stream and chain sequences differ.
		if _, err := other.Append(ctx, "step_start", "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	events, err := l.ReadChain(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 5 {
		t.Fatalf("read %d events, want 5", len(events))
	}
	for i, e := range events {
		if e.Seq != uint64(i+1) || e.ChainID != "run-1" {
			t.Fatalf("event %d: seq %d chain %q", i, e.Seq, e.ChainID)
		}
	}
	if events[3].Type != "tool_call" || events[3].Data["i"] != float64(3) {
		t.Fatalf("event 4 = %+v", events[3])
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

func TestSecondWriterCannotFork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	a, _ := l.NewChainWriter("shared")
	b, _ := l.NewChainWriter("shared")
	if _, err := a.Append(ctx, "run_started", "a", nil); err != nil {
		t.Fatal(err)
	}
	// b believes the chain is empty: its append must fail, not fork.
	_, err := b.Append(ctx, "run_started", "b", nil)
	if !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("second writer: err = %v, want ErrConflict", err)
	}
	// A writer that failed refuses to go on.
	if _, err := b.Append(ctx, "step_start", "b", nil); err == nil {
		t.Fatal("writer appended after a failure")
	}
	// A resumed writer continues the chain correctly.
	r, err := l.ResumeChainWriter(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Append(ctx, "step_start", "r", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "step_start", "a", nil); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("stale writer: err = %v, want ErrConflict", err)
	}
	events, _ := l.ReadChain(ctx, "shared")
	if len(events) != 2 || events[1].Agent != "r" {
		t.Fatalf("chain = %+v", events)
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
}

func TestRetriedAppendIsDeduplicated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	w, _ := l.NewChainWriter("dedup")
	e, err := w.Append(ctx, "run_started", "o", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Publish the same message id again, as a retry after a lost ack would.
	ack, err := l.JetStream().Publish(ctx, eventlog.Subject("dedup"), []byte(`{}`), jetstream.WithMsgID("dedup/1"))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Fatal("retry with the same msg id was stored twice")
	}
	events, _ := l.ReadChain(ctx, "dedup")
	if len(events) != 1 || events[0].Hash != e.Hash {
		t.Fatalf("chain = %+v", events)
	}
}

func TestReadUnknownChain(t *testing.T) {
	t.Parallel()
	l := openLog(t)
	_, err := l.ReadChain(context.Background(), "nope")
	if !errors.Is(err, eventlog.ErrChainNotFound) {
		t.Fatalf("err = %v", err)
	}
	if _, err := l.ReadChain(context.Background(), "bad.id"); !errors.Is(err, lctl.ErrInvalidChainID) {
		t.Fatalf("err = %v", err)
	}
}

func TestFollowDeliversNewEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := openLog(t)
	w, _ := l.NewChainWriter("live")
	if _, err := w.Append(ctx, "run_started", "o", nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan lctl.Event, 10)
	done := make(chan error, 1)
	go func() {
		done <- l.Follow(ctx, "live", eventlog.FollowOptions{}, func(e lctl.Event) error {
			got <- e
			if e.Type == "run_finished" {
				return eventlog.ErrStop
			}
			return nil
		})
	}()
	if e := <-got; e.Seq != 1 {
		t.Fatalf("first = %d", e.Seq)
	}
	if _, err := w.Append(ctx, "run_finished", "o", nil); err != nil {
		t.Fatal(err)
	}
	if e := <-got; e.Seq != 2 || e.Type != "run_finished" {
		t.Fatalf("second = %+v", e)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestAppendFailsWhenNATSIsGone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	l, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := l.NewChainWriter("lost")
	if _, err := w.Append(ctx, "run_started", "o", nil); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := w.Append(short, "step_start", "o", nil); err == nil {
		t.Fatal("append succeeded with the server gone")
	}
	if w.Seq() != 1 {
		t.Fatalf("seq advanced to %d after a failed append", w.Seq())
	}
}

func TestChainsAndEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	for _, id := range []string{"a", "b"} {
		w, _ := l.NewChainWriter(id)
		for _, typ := range []string{"run_started", "step_start", "run_finished"}[:map[string]int{"a": 3, "b": 2}[id]] {
			if _, err := w.Append(ctx, typ, id, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	chains, err := l.Chains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(chains) != 2 || chains["a"] != 3 || chains["b"] != 2 {
		t.Fatalf("chains = %v", chains)
	}
	first, last, err := l.Ends(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if first.Seq != 1 || first.Type != "run_started" || last.Seq != 3 || last.Type != "run_finished" {
		t.Fatalf("ends = %+v / %+v", first, last)
	}
	if _, _, err := l.Ends(ctx, "nope"); !errors.Is(err, eventlog.ErrChainNotFound) {
		t.Fatalf("unknown chain: %v", err)
	}
}

// A replicated stream answers a message id it has seen with a duplicate
// acknowledgement before it checks the expected sequence, so a second
// writer's different event at a seq already stored comes back "stored".
// The writer must see that the stored message is not its event and stop
// (the chaos suite's R3 fork, seed 7319). On one node the id is made to
// collide through another subject, which reaches the same answer.
func TestDuplicateAckOfAnotherEventIsAConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	if _, err := l.JetStream().Publish(ctx, eventlog.Subject("other"), []byte(`{"not":"this event"}`), jetstream.WithMsgID("victim/1")); err != nil {
		t.Fatal(err)
	}
	w, _ := l.NewChainWriter("victim")
	_, err := w.Append(ctx, "run_started", "o", nil)
	if !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("append answered as a duplicate of another event: err = %v, want ErrConflict", err)
	}
	if _, err := w.Append(ctx, "step_start", "o", nil); err == nil {
		t.Fatal("writer went on after a conflict")
	}
}

// TestOTelChainsHaveTheirOwnStream: an otel- chain is written on
// LCTL_OTEL (lctl.otel.<trace id>), a run's on LCTL; an otel chain an
// older tracer wrote on LCTL (lctl.chain.otel-<trace id>) is still read
// on every path, and nothing appends to it any more. The events, their
// hashes and order are those written.
func TestOTelChainsHaveTheirOwnStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	write := func(w *eventlog.ChainWriter, n int) []lctl.Event {
		t.Helper()
		var out []lctl.Event
		for i := range n {
			e, err := w.Append(ctx, "step_start", "a", map[string]any{"i": float64(i)})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	run, _ := l.NewChainWriter("run-1")
	write(run, 2)
	otel, err := l.NewChainWriter("otel-new")
	if err != nil {
		t.Fatal(err)
	}
	newEvents := write(otel, 3)
	// The old chain as an older tracer stored it: sealed events on its
	// subject of LCTL.
	var oldEvents []lctl.Event
	prev := ""
	for i := range 2 {
		e := lctl.Event{ChainID: "otel-old", Seq: uint64(i + 1), Type: "step_start", Timestamp: "2026-01-01T00:00:00Z", Agent: "a", Data: map[string]any{}}
		raw, err := e.SealEncoded(prev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.JetStream().Publish(ctx, eventlog.LegacySubject("otel-old"), raw); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		oldEvents = append(oldEvents, e)
	}
	count := func(stream string) uint64 {
		s, err := l.JetStream().Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := count(eventlog.OTelStreamName); n != 3 {
		t.Errorf("LCTL_OTEL holds %d messages, want otel-new's 3", n)
	}
	if n := count(eventlog.StreamName); n != 4 {
		t.Errorf("LCTL holds %d messages, want run-1's 2 and otel-old's 2", n)
	}
	for id, want := range map[string][]lctl.Event{"otel-new": newEvents, "otel-old": oldEvents} {
		got, err := l.ReadChain(ctx, id)
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		if len(got) != len(want) || got[len(got)-1].Hash != want[len(want)-1].Hash || lctl.Verify(got) != nil {
			t.Errorf("read %s: %d events (%v), want %d", id, len(got), lctl.Verify(got), len(want))
		}
		first, last, err := l.Ends(ctx, id)
		if err != nil || first.Seq != 1 || last.Hash != want[len(want)-1].Hash {
			t.Errorf("ends of %s: %d..%d, %v", id, first.Seq, last.Seq, err)
		}
		if seq, err := l.LastSeq(ctx, id); err != nil || seq != uint64(len(want)) {
			t.Errorf("last seq of %s: %d, %v", id, seq, err)
		}
	}
	chains, err := l.Chains(ctx)
	if err != nil || len(chains) != 3 || chains["run-1"] != 2 || chains["otel-new"] != 3 || chains["otel-old"] != 2 {
		t.Errorf("chains: %v, %v", chains, err)
	}
	seen := map[string]int{}
	if err := l.Follow(ctx, "", eventlog.FollowOptions{StopAtEnd: true}, func(e lctl.Event) error { seen[e.ChainID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen["run-1"] != 2 || seen["otel-new"] != 3 || seen["otel-old"] != 2 {
		t.Errorf("following every chain: %v", seen)
	}
	// Following every chain stops where fn says, across both streams.
	n := 0
	if err := l.Follow(ctx, "", eventlog.FollowOptions{}, func(lctl.Event) error {
		if n++; n == 4 {
			return eventlog.ErrStop
		}
		return nil
	}); err != nil || n != 4 {
		t.Errorf("following every chain until stopped: %d events, %v", n, err)
	}
	if _, err := l.ResumeChainWriter(ctx, "otel-old"); !errors.Is(err, eventlog.ErrLegacyChain) {
		t.Errorf("resume otel-old: %v, want ErrLegacyChain", err)
	}
	w, err := l.ResumeChainWriter(ctx, "otel-new")
	if err != nil || w.Seq() != 3 {
		t.Fatalf("resume otel-new: %v", err)
	}
	if e, err := w.Append(ctx, "step_end", "a", nil); err != nil || e.PrevHash != newEvents[2].Hash {
		t.Fatalf("append to otel-new: %v", err)
	}
	for subject, want := range map[string]string{"lctl.chain.run-1": "run-1", "lctl.otel.abc": "otel-abc", "lctl.chain.otel-abc": "otel-abc", "other.x": ""} {
		if id, _ := eventlog.ChainOf(subject); id != want {
			t.Errorf("ChainOf(%s) = %q, want %q", subject, id, want)
		}
	}
	if eventlog.Subject("otel-abc") != "lctl.otel.abc" || eventlog.Subject("run-1") != "lctl.chain.run-1" {
		t.Errorf("subjects: %s, %s", eventlog.Subject("otel-abc"), eventlog.Subject("run-1"))
	}
	if eventlog.OTelChainPrefix != otlp.ChainPrefix {
		t.Errorf("eventlog's otel prefix %q is not lctl/otlp's %q", eventlog.OTelChainPrefix, otlp.ChainPrefix)
	}
}
