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
)

func openLog(t *testing.T) *eventlog.Log {
	t.Helper()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	l, err := eventlog.Open(context.Background(), nc, eventlog.DefaultConfig())
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
	l, err := eventlog.Open(ctx, nc, eventlog.DefaultConfig())
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
