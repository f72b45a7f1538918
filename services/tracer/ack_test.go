package tracer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/tracer"
)

// consumerState returns the tracer's durable consumer of stream as the
// server has it now.
func consumerState(e *env, stream string) (*jetstream.ConsumerInfo, error) {
	cons, err := e.log.JetStream().Consumer(context.Background(), stream, tracer.ConsumerName)
	if err != nil {
		return nil, fmt.Errorf("consumer of %s: %w", stream, err)
	}
	return cons.CachedInfo(), nil
}

// allAcked waits until the tracer's consumer of each stream has
// acknowledged the stream's last message and has nothing pending.
func allAcked(t *testing.T, e *env) {
	t.Helper()
	js := e.log.JetStream()
	testutil.Eventually(t, waitTimeout, func() error {
		for _, stream := range []string{eventlog.StreamName, eventlog.OTelStreamName} {
			st, err := js.Stream(context.Background(), stream)
			if err != nil {
				return err
			}
			last := st.CachedInfo().State.LastSeq
			ci, err := consumerState(e, stream)
			if err != nil {
				return err
			}
			if ci.AckFloor.Stream != last || ci.NumAckPending != 0 {
				return fmt.Errorf("consumer of %s: acknowledged through %d with %d pending; the stream ends at %d",
					stream, ci.AckFloor.Stream, ci.NumAckPending, last)
			}
		}
		return nil
	})
}

// TestAckNeverPassesAnEventNotStored: the tracer acknowledges a stream's
// messages cumulatively (one ack covers every message through it), so an
// event it could not store must hold back the acknowledgement of the
// events after it, which it did store. A chain on each stream cannot be
// written (a directory where its file goes) while the chains after it are
// stored: each consumer's acknowledgements stop just before the blocked
// chain's first event, and the recorded position too. The tracer is then
// restarted cleanly, or killed, with those events written and not
// acknowledged; once the obstacle is gone the next tracer serves every
// chain as the stream has it, each event once in its file, and everything
// ends acknowledged.
func TestAckNeverPassesAnEventNotStored(t *testing.T) {
	for _, kill := range []bool{false, true} {
		name := "restarted"
		if kill {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) {
			ns := testutil.RunJetStream(t)
			nc := testutil.Connect(t, ns)
			l, err := eventlog.Open(context.Background(), nc)
			if err != nil {
				t.Fatal(err)
			}
			e := &env{nc: nc, log: l, dataDir: t.TempDir()}
			chainsDir := filepath.Join(e.dataDir, "chains")
			blocked := []string{"blocked", "otel-blocked"}
			for _, id := range blocked {
				if err := os.MkdirAll(filepath.Join(chainsDir, id+".jsonl"), 0o750); err != nil {
					t.Fatal(err)
				}
			}
			// LCTL: before at stream seqs 1-14, blocked 15-20, after
			// 21-30. LCTL_OTEL: otel-blocked 1-6, otel-after 7-16.
			writeRun(t, l, "before", 3)
			writeRun(t, l, "blocked", 1)
			writeRun(t, l, "after", 2)
			writeRun(t, l, "otel-blocked", 1)
			writeRun(t, l, "otel-after", 2)
			ids := []string{"before", "blocked", "after", "otel-blocked", "otel-after"}

			// held checks that the tracer stored the chains after the
			// blocked ones, tried the blocked ones again, and acknowledged
			// nothing from the blocked ones on.
			held := func() error {
				for _, c := range []struct {
					stream string
					floor  uint64
				}{{eventlog.StreamName, 14}, {eventlog.OTelStreamName, 0}} {
					ci, err := consumerState(e, c.stream)
					if err != nil {
						return err
					}
					if ci.AckFloor.Stream > c.floor {
						t.Fatalf("consumer of %s acknowledged through %d, past the events not stored from %d on",
							c.stream, ci.AckFloor.Stream, c.floor+1)
					}
					if ci.AckFloor.Stream != c.floor || ci.NumRedelivered == 0 {
						return fmt.Errorf("consumer of %s: acknowledged through %d, %d redelivered", c.stream, ci.AckFloor.Stream, ci.NumRedelivered)
					}
				}
				for id, n := range map[string]int{"after": 10, "otel-after": 10} {
					if got := linesIn(t, filepath.Join(chainsDir, id+".jsonl")); got != n {
						return fmt.Errorf("chain file %s holds %d events, want %d", id, got, n)
					}
				}
				return nil
			}
			if kill {
				child := e.startChildTracer(t, ns.ClientURL())
				testutil.Eventually(t, waitTimeout, held)
				if err := child.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = child.Wait()
			} else {
				first := e.startTracer(t)
				first.waitFor(t, "before", 14)
				first.waitFor(t, "after", 10)
				first.waitFor(t, "otel-after", 10)
				testutil.Eventually(t, waitTimeout, held)
				first.stop()
				if got := recordedPosition(t, e.dataDir); got != 14 {
					t.Fatalf("recorded position %d after a stop, want 14 (the event before the blocked chain's)", got)
				}
			}

			for _, id := range blocked {
				if err := os.Remove(filepath.Join(chainsDir, id+".jsonl")); err != nil {
					t.Fatal(err)
				}
			}
			tr := e.startTracer(t)
			sameAsStream(t, e, tr, ids)
			allAcked(t, e)
		})
	}
}

// linesIn counts the complete lines of a file a tracer may be writing
// (none when it is not made yet).
func linesIn(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(raw, []byte("\n"))
}

// TestUpgradeFromExplicitAcks: a tracer before session 9 made its durable
// consumers with explicit acks, and a consumer's ack policy cannot be
// changed. A tracer starting on such a consumer (with some of its messages
// acknowledged and some pending) makes it anew with cumulative acks and
// reads on from its recorded position; every event ends stored once and
// acknowledged.
func TestUpgradeFromExplicitAcks(t *testing.T) {
	e := newEnv(t)
	writeRun(t, e.log, "old", 2) // 10 events
	first := e.startTracer(t)
	first.waitFor(t, "old", 10)
	first.stop()

	ctx := context.Background()
	js := e.log.JetStream()
	for _, c := range []struct{ stream, filter string }{
		{eventlog.StreamName, eventlog.AllSubjects},
		{eventlog.OTelStreamName, eventlog.AllOTelSubjects},
	} {
		if err := js.DeleteConsumer(ctx, c.stream, tracer.ConsumerName); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, c.stream, jetstream.ConsumerConfig{
			Durable:       tracer.ConsumerName,
			FilterSubject: c.filter,
			AckPolicy:     jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The old consumer has delivered a message it never saw acknowledged.
	old, err := js.Consumer(ctx, eventlog.StreamName, tracer.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Fetch(3); err != nil {
		t.Fatal(err)
	}
	writeRun(t, e.log, "new", 1)      // 6 events
	writeRun(t, e.log, "otel-new", 1) // 6 events on LCTL_OTEL

	tr := e.startTracer(t)
	for _, stream := range []string{eventlog.StreamName, eventlog.OTelStreamName} {
		ci, err := consumerState(e, stream)
		if err != nil {
			t.Fatal(err)
		}
		if p := ci.Config.AckPolicy; p != jetstream.AckAllPolicy {
			t.Errorf("consumer of %s has ack policy %v after the upgrade", stream, p)
		}
	}
	sameAsStream(t, e, tr, []string{"old", "new", "otel-new"})
	allAcked(t, e)
}

// TestConsumerReplacedWhileRunning: a consumer with explicit acks put in
// place of the tracer's while it runs (as a tracer before session 9 would
// make it) is made anew with cumulative acks when the tracer sets its
// consumer up again, from after the last message it had done: nothing is
// lost or stored twice, and everything ends acknowledged.
func TestConsumerReplacedWhileRunning(t *testing.T) {
	e := newEnv(t)
	writeRun(t, e.log, "first", 2) // 10 events
	tr := e.startTracer(t)
	tr.waitFor(t, "first", 10)

	ctx := context.Background()
	js := e.log.JetStream()
	if err := js.DeleteConsumer(ctx, eventlog.StreamName, tracer.ConsumerName); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, eventlog.StreamName, jetstream.ConsumerConfig{
		Durable:       tracer.ConsumerName,
		FilterSubject: eventlog.AllSubjects,
		AckPolicy:     jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	writeRun(t, e.log, "second", 1) // 6 events
	tr.waitFor(t, "second", 6)
	testutil.Eventually(t, waitTimeout, func() error {
		ci, err := consumerState(e, eventlog.StreamName)
		if err != nil {
			return err
		}
		if p := ci.Config.AckPolicy; p != jetstream.AckAllPolicy {
			return fmt.Errorf("the consumer has ack policy %v", p)
		}
		return nil
	})
	sameAsStream(t, e, tr, []string{"first", "second"})
	allAcked(t, e)
}
