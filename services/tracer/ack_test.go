package tracer_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	testutil.Eventually(t, waitTimeout, func() error { return ackedAll(e) })
}

// ackedAll tells whether the tracer's consumer of each stream has
// acknowledged the stream's last message and has nothing pending.
func ackedAll(e *env) error {
	js := e.log.JetStream()
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
}

// positionIn reads the stream position recorded in a position file of the
// data dir (0 when there is none yet).
func positionIn(t *testing.T, dataDir, file string) uint64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "chains", file))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var pos struct{ Seq uint64 }
	if err := json.Unmarshal(raw, &pos); err != nil {
		t.Fatalf("position file %s %q: %v", file, raw, err)
	}
	return pos.Seq
}

// TestEventNotStoredIsReadBack: the tracer acknowledges a stream's messages
// cumulatively, one ack per batch covering every message through it, the
// events it could not store too: their chains fall behind and the tracer
// reads them back from the stream until it can store them, while the
// recorded position stays before them. A chain on each stream cannot be
// written (a directory where its file goes) while the chains after it,
// more events than the consumer lets wait for an ack, are stored and
// everything is acknowledged; the position stops before the blocked
// chain's first event. Then the obstacle goes while the tracer runs (it
// reads the chains back), or the tracer is restarted cleanly, or killed,
// with the blocked events acknowledged and not stored and the later ones
// written and not synced; the tracer afterwards serves every chain as the
// stream has it, each event once in its file.
func TestEventNotStoredIsReadBack(t *testing.T) {
	t.Parallel()
	// The consumers let ackPending events wait for an ack (the default is
	// 4,096): the bulk chain, after the blocked one, is more than that.
	const ackPending, bulkEvents = 64, 300
	cfg := tracer.Config{MaxAckPending: ackPending}
	for _, how := range []string{"read back while running", "restarted", "killed"} {
		t.Run(how, func(t *testing.T) {
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
			// 21-30, bulk-00 31-330 (more than ackPending).
			// LCTL_OTEL: otel-blocked 1-6, otel-after 7-16.
			writeRun(t, l, "before", 3)
			writeRun(t, l, "blocked", 1)
			writeRun(t, l, "after", 2)
			bulk := publishBacklog(t, e, "bulk", 1, bulkEvents)
			writeRun(t, l, "otel-blocked", 1)
			writeRun(t, l, "otel-after", 2)
			ids := append([]string{"before", "blocked", "after", "otel-blocked", "otel-after"}, bulk...)

			// held checks that the tracer stored the chains after the
			// blocked ones and acknowledged everything, and (in process)
			// that the position it recorded stops before the blocked
			// chain.
			held := func(position bool) func() error {
				return func() error {
					if err := ackedAll(e); err != nil {
						return err
					}
					for _, stream := range []string{eventlog.StreamName, eventlog.OTelStreamName} {
						ci, err := consumerState(e, stream)
						if err != nil {
							return err
						}
						if ci.Config.MaxAckPending != ackPending {
							t.Fatalf("consumer of %s lets %d events wait for an ack, want %d", stream, ci.Config.MaxAckPending, ackPending)
						}
					}
					for id, n := range map[string]int{"after": 10, "otel-after": 10, bulk[0]: bulkEvents} {
						if got := linesIn(t, filepath.Join(chainsDir, id+".jsonl")); got != n {
							return fmt.Errorf("chain file %s holds %d events, want %d", id, got, n)
						}
					}
					if !position {
						return nil
					}
					if got := positionIn(t, e.dataDir, ".stream-position.LCTL_OTEL"); got != 0 {
						t.Fatalf("recorded LCTL_OTEL position %d, past the events not stored from 1 on", got)
					}
					switch got := positionIn(t, e.dataDir, ".stream-position"); {
					case got > 14:
						t.Fatalf("recorded LCTL position %d, past the events not stored from 15 on", got)
					case got < 14:
						return fmt.Errorf("recorded LCTL position %d", got)
					}
					return nil
				}
			}
			unblock := func() {
				for _, id := range blocked {
					if err := os.Remove(filepath.Join(chainsDir, id+".jsonl")); err != nil {
						t.Fatal(err)
					}
				}
			}
			switch how {
			case "killed":
				child := e.startChildTracerWith(t, ns.ClientURL(), ackPending)
				testutil.Eventually(t, waitTimeout, held(false))
				if err := child.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = child.Wait()
				unblock()
			case "restarted":
				first := e.startTracerWith(t, cfg)
				testutil.Eventually(t, waitTimeout, held(true))
				first.stop()
				if got := positionIn(t, e.dataDir, ".stream-position"); got != 14 {
					t.Fatalf("recorded position %d after a stop, want 14 (the event before the blocked chain's)", got)
				}
				unblock()
			default:
				tr := e.startTracerWith(t, cfg)
				testutil.Eventually(t, waitTimeout, held(true))
				unblock()
				sameAsStream(t, e, tr, ids)
				tr.stop()
				if got := positionIn(t, e.dataDir, ".stream-position"); got != 30+bulkEvents {
					t.Fatalf("recorded LCTL position %d after the chains were read back and a stop, want %d", got, 30+bulkEvents)
				}
				if got := positionIn(t, e.dataDir, ".stream-position.LCTL_OTEL"); got != 16 {
					t.Fatalf("recorded LCTL_OTEL position %d after the chains were read back and a stop, want 16", got)
				}
				return
			}
			tr := e.startTracerWith(t, cfg)
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
	t.Parallel()
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
	t.Parallel()
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

// TestLostDeliveryIsReadAgain: a delivery of the tracer's consumer that
// never reaches the tracer (here a pull of the test's own on the tracer's
// consumer takes it; a lost connection loses one alike) must not be
// acknowledged unread by the cumulative ack of a later one. The tracer
// sees the consumer's delivery numbers skip, makes the consumer anew from
// its position and reads the message again. Each chain is one event, so a
// message skipped would leave its chain missing (no later event of it to
// read it back for).
func TestLostDeliveryIsReadAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.startTracer(t)
	ctx := context.Background()
	cons, err := e.log.JetStream().Consumer(ctx, eventlog.StreamName, tracer.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan string, 1)
	go func() {
		defer close(taken)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(waitTimeout))
		if err != nil {
			t.Errorf("the test's pull: %v", err)
			return
		}
		for m := range batch.Messages() {
			taken <- m.Subject()
		}
	}()
	var ids []string
	var stolen string
	for len(ids) < 100 && stolen == "" {
		id := fmt.Sprintf("one-%03d", len(ids))
		publishRaw(t, e, sealed(t, id, 1, "", map[string]any{"step": 1.0}))
		ids = append(ids, id)
		select {
		case subject, ok := <-taken:
			if !ok {
				t.Fatal("the test's pull ended without a message")
			}
			stolen = subject
		default:
		}
	}
	if stolen == "" {
		t.Fatalf("the test's pull took none of %d messages", len(ids))
	}
	t.Logf("the test's pull took the delivery of %s", stolen)
	for _, id := range []string{"after-a", "after-b"} {
		publishRaw(t, e, sealed(t, id, 1, "", map[string]any{"step": 1.0}))
		ids = append(ids, id)
	}
	sameAsStream(t, e, tr, ids)
	allAcked(t, e)
}
