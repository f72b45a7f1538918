package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// openLogJS is openLog with a JetStream client on the same connection
// (to write what a ChainWriter would not).
func openLogJS(t *testing.T) (*eventlog.Log, jetstream.JetStream) {
	t.Helper()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	l, err := eventlog.Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return l, js
}

// writeChains writes n events to each of chains on the stream, one chain's
// event after another's (so each chain's events are spread over the
// stream), sealed as a ChainWriter seals them, published without waiting
// for each acknowledgement: a long chain made quickly.
func writeChains(tb testing.TB, js jetstream.JetStream, n int, chains ...string) {
	tb.Helper()
	prev := make([]string, len(chains))
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for seq := 1; seq <= n; seq++ {
		for c, id := range chains {
			e := lctl.Event{ChainID: id, Seq: uint64(seq), Type: "step_end", Timestamp: lctl.FormatTime(at), Agent: "orchestrator",
				Data: map[string]any{"step": float64(seq), "step_id": fmt.Sprintf("s-%d", seq), "outcome": "success"}}
			raw, err := e.SealEncoded(prev[c])
			if err != nil {
				tb.Fatal(err)
			}
			prev[c] = e.Hash
			if _, err := js.PublishAsync(eventlog.Subject(id), raw); err != nil {
				tb.Fatal(err)
			}
		}
		if seq%4096 == 0 {
			waitPublished(tb, js)
		}
	}
	waitPublished(tb, js)
}

func waitPublished(tb testing.TB, js jetstream.JetStream) {
	tb.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("async publishes not acknowledged within a minute")
	}
}

// ReadChainFrom returns exactly the chain's events from the seq asked, for
// a chain whose events are spread among another's, checks the piece, and
// says which seq it does not have.
func TestReadChainFromFindsTheEventAmongOthers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, js := openLogJS(t)
	writeChains(t, js, 300, "run-a", "run-b", "run-c")
	// A stretch where only run-b is written: run-a's events are not
	// evenly spread.
	writeMore(t, l, "run-b", 200)
	writeMore(t, l, "run-a", 5)
	whole, err := l.ReadChain(ctx, "run-a")
	if err != nil || len(whole) != 305 {
		t.Fatalf("ReadChain: %d events, %v", len(whole), err)
	}
	for _, from := range []uint64{0, 1, 2, 150, 299, 300, 301, 304, 305} {
		got, err := l.ReadChainFrom(ctx, "run-a", from)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		start := max(from, 1)
		want := whole[start-1:]
		if len(got) != len(want) {
			t.Fatalf("from %d: %d events, want %d", from, len(got), len(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].Hash != want[i].Hash {
				t.Fatalf("from %d: event %d is %d/%s, want %d/%s", from, i, got[i].Seq, got[i].Hash, want[i].Seq, want[i].Hash)
			}
		}
	}
	if _, err := l.ReadChainFrom(ctx, "run-a", 306); !errors.Is(err, eventlog.ErrEventNotFound) {
		t.Errorf("from past the end: %v, want ErrEventNotFound", err)
	}
	if _, err := l.ReadChainFrom(ctx, "run-none", 3); !errors.Is(err, eventlog.ErrChainNotFound) {
		t.Errorf("a chain with no event: %v, want ErrChainNotFound", err)
	}
	if got, err := l.ReadChainByGets(ctx, "run-b"); err != nil || len(got) != 500 {
		t.Errorf("ReadChainByGets(run-b): %d events, %v", len(got), err)
	}
}

func writeMore(tb testing.TB, l *eventlog.Log, chainID string, n int) {
	tb.Helper()
	w, err := l.ResumeChainWriter(context.Background(), chainID)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if _, err := w.Append(context.Background(), "step_end", "orchestrator", map[string]any{"step": i, "outcome": "success"}); err != nil {
			tb.Fatal(err)
		}
	}
}

// A chain read while its writer appends: every read is a piece of the
// chain from the seq asked, checked, ending at an event that was stored
// when the read began or later, never one past what the writer was
// writing when the read ended.
func TestReadChainFromWhileTheChainGrows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, js := openLogJS(t)
	writeChains(t, js, 100, "run-a", "run-b")
	w, err := l.ResumeChainWriter(ctx, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.ResumeChainWriter(ctx, "run-b")
	if err != nil {
		t.Fatal(err)
	}
	// written is the last event the writer saw stored, writing the one
	// it is appending (stored, maybe, before Append returns).
	var (
		mu               sync.Mutex
		written, writing = uint64(100), uint64(100)
		done             = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := range 300 {
			if _, err := other.Append(ctx, "step_end", "orchestrator", map[string]any{"step": i}); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			writing = written + 1
			mu.Unlock()
			e, err := w.Append(ctx, "step_end", "orchestrator", map[string]any{"step": i})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			written = e.Seq
			mu.Unlock()
		}
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		mu.Lock()
		before := written
		mu.Unlock()
		from := before - 3
		got, err := l.ReadChainFrom(ctx, "run-a", from)
		if err != nil {
			t.Fatalf("read %d from %d: %v", reads, from, err)
		}
		mu.Lock()
		after := writing
		mu.Unlock()
		last := got[len(got)-1].Seq
		if got[0].Seq != from || last < before || last > after {
			t.Fatalf("read %d from %d: events %d..%d, the chain was at %d before the read and at most %d after", reads, from, got[0].Seq, last, before, after)
		}
	}
	if got, err := l.ReadChainFrom(ctx, "run-a", 1); err != nil || len(got) != 400 {
		t.Fatalf("the whole chain after: %d events, %v", len(got), err)
	}
	if reads < 2 {
		t.Fatalf("only %d reads while the chain grew", reads)
	}
}

// An event stored on the chain's subject that does not link to the one
// before (written by someone else than the chain's writer) fails the read
// of any piece that holds it.
func TestReadChainFromChecksThePiece(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, js := openLogJS(t)
	writeChains(t, js, 20, "run-a")
	forged := lctl.Event{ChainID: "run-a", Seq: 21, Type: "tool_call", Timestamp: lctl.FormatTime(time.Now()), Agent: "orchestrator",
		Data: map[string]any{"step": 20.0, "forged": true}}
	raw, err := forged.SealEncoded("not-the-hash-of-event-20")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, eventlog.Subject("run-a"), raw); err != nil {
		t.Fatal(err)
	}
	var bad *lctl.VerifyError
	for _, from := range []uint64{1, 15, 20} {
		if _, err := l.ReadChainFrom(ctx, "run-a", from); !errors.As(err, &bad) || bad.Seq != 21 {
			t.Errorf("from %d: %v, want a VerifyError at event 21", from, err)
		}
	}
	// The piece from the forged event on has nothing to link it to: the
	// reader that starts there trusts the stream's subject (only the
	// orchestrator may publish on it), as every reader of a chain does.
	if got, err := l.ReadChainFrom(ctx, "run-a", 21); err != nil || len(got) != 1 {
		t.Errorf("from 21: %d events, %v", len(got), err)
	}
}
