package eventlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// TestAppendWithin: appends bounded by a duration make the same chain as
// appends bounded by a context, interleaved on one writer: the events
// returned are the events read back, in order, and the chain verifies.
// A second writer of the chain cannot fork it through either.
func TestAppendWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	w, err := l.NewChainWriter("within")
	if err != nil {
		t.Fatal(err)
	}
	var wrote []lctl.Event
	for i, typ := range []string{"run_started", "step_start", "verdict", "tool_call", "step_end"} {
		var e lctl.Event
		if i%2 == 0 {
			e, err = w.AppendWithin(5*time.Second, typ, "orchestrator", map[string]any{"i": float64(i)})
		} else {
			e, err = w.Append(ctx, typ, "orchestrator", map[string]any{"i": float64(i)})
		}
		if err != nil {
			t.Fatalf("append %s: %v", typ, err)
		}
		wrote = append(wrote, e)
	}
	events, err := l.ReadChain(ctx, "within")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != len(wrote) {
		t.Fatalf("read %d events, wrote %d", len(events), len(wrote))
	}
	for i := range events {
		if events[i].Seq != uint64(i+1) || events[i].Hash != wrote[i].Hash || events[i].Type != wrote[i].Type {
			t.Fatalf("event %d read %d %s %s, wrote %d %s %s", i, events[i].Seq, events[i].Type, events[i].Hash, wrote[i].Seq, wrote[i].Type, wrote[i].Hash)
		}
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// Another writer at the chain's start is refused, as with Append.
	fork, _ := l.NewChainWriter("within")
	if _, err := fork.AppendWithin(5*time.Second, "run_started", "o", nil); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("a second writer forked the chain: err = %v, want ErrConflict", err)
	}
	if _, err := fork.AppendWithin(5*time.Second, "step_start", "o", nil); err == nil {
		t.Fatal("writer went on after a conflict")
	}
}

// TestAppendWithinDuplicateOfAnotherEvent: a duplicate acknowledgement for
// another event's message id is a conflict, checked by reading the stored
// message back within the same bound.
func TestAppendWithinDuplicateOfAnotherEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	if _, err := l.JetStream().Publish(ctx, eventlog.Subject("other"), []byte(`{"not":"this event"}`), jetstream.WithMsgID("victim/1")); err != nil {
		t.Fatal(err)
	}
	w, _ := l.NewChainWriter("victim")
	if _, err := w.AppendWithin(5*time.Second, "run_started", "o", nil); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("append answered as a duplicate of another event: err = %v, want ErrConflict", err)
	}
}

// TestPublishWithinFailsAsPublish: a write nobody answers in time fails
// with context.DeadlineExceeded under either bound; one nobody listens to
// is retried and then fails with jetstream.ErrNoStreamResponse, or with
// the deadline when the bound ends first; a zero bound sends nothing.
func TestPublishWithinFailsAsPublish(t *testing.T) {
	t.Parallel()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	p := eventlog.NewPublisher(nc, "NONE")
	sub, err := nc.Subscribe("silent.x", func(*nats.Msg) {}) // listens, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = p.PublishWithin(100*time.Millisecond, "silent.x", []byte("{}"), "", 0)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("unanswered, within: err = %v, want context.DeadlineExceeded wrapping nats.ErrTimeout", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = p.Publish(ctx, "silent.x", []byte("{}"), "", 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered, context: err = %v, want context.DeadlineExceeded", err)
	}
	if _, err := p.PublishWithin(5*time.Second, "nobody.x", []byte("{}"), "", 0); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("nobody listening: err = %v, want jetstream.ErrNoStreamResponse", err)
	}
	if _, err := p.PublishWithin(100*time.Millisecond, "nobody.x", []byte("{}"), "", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nobody listening, bound shorter than the retries: err = %v, want context.DeadlineExceeded", err)
	}
	if _, err := p.PublishWithin(0, "silent.x", []byte("{}"), "", 0); !errors.Is(err, eventlog.ErrNotSent) {
		t.Fatalf("zero bound: err = %v, want ErrNotSent", err)
	}
}

// TestAppendWithinNotSentWhenTimeIsUp: an append whose bound has passed
// before its write goes out is not sent, as an append under an expired
// context is not (ErrNotSent: the orchestrator then knows the event did
// not land and releases a start's claim); nothing is stored and the writer
// goes no further.
func TestAppendWithinNotSentWhenTimeIsUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLog(t)
	w, _ := l.NewChainWriter("late")
	if _, err := w.AppendWithin(time.Nanosecond, "run_started", "o", nil); !errors.Is(err, eventlog.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotSent and context.DeadlineExceeded", err)
	}
	if events, err := l.ReadChain(ctx, "late"); !errors.Is(err, eventlog.ErrChainNotFound) {
		t.Fatalf("chain after an append not sent: %d events, %v (want ErrChainNotFound)", len(events), err)
	}
	if w.Seq() != 0 {
		t.Fatalf("seq advanced to %d", w.Seq())
	}
	if _, err := w.AppendWithin(5*time.Second, "run_started", "o", nil); err == nil {
		t.Fatal("writer went on after a failed append")
	}
}
