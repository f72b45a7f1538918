package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
)

// drafts returns n drafts, timestamps one millisecond apart from at.
func drafts(n int, at time.Time, tag string) []eventlog.Draft {
	out := make([]eventlog.Draft, n)
	for i := range out {
		out[i] = eventlog.Draft{Time: at.Add(time.Duration(i) * time.Millisecond), Type: lctl.TypeToolCall, Agent: "agent",
			Data: map[string]any{"tag": tag, "i": float64(i)}}
	}
	return out
}

// limitOTel sets LCTL_OTEL's message limit to room messages more than it
// holds, refusing what does not fit (discard new); room < 0 lifts it.
func limitOTel(t *testing.T, js jetstream.JetStream, room int64) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, eventlog.OTelStreamName)
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	c.MaxMsgs, c.Discard = -1, jetstream.DiscardNew
	if room >= 0 {
		c.MaxMsgs = int64(st.CachedInfo().State.Msgs) + room
	}
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// readVerified reads a chain and checks its seqs and hashes.
func readVerified(t *testing.T, l *eventlog.Log, chainID string) []lctl.Event {
	t.Helper()
	events, err := l.ReadChain(context.Background(), chainID)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain %s: %v", chainID, err)
	}
	return events
}

// TestAppendBatchIsAllOrNothing: a batched append to LCTL_OTEL (atomic
// batch publish, as provisioned; here of one replica, so for writes of
// MinDiskBatch events or more) stores every event of a batch or none.
// The stream refusing mid-batch for want of room stores nothing of it
// and the writer stops; a writer resumed after the limit is lifted
// continues the chain, whose hashes and seqs hold across batches of
// MaxBatch. A write of several batches that fails at the second keeps
// the first and says so (PartialError). A second writer's batch after
// the first's fails as a conflict, storing nothing.
func TestAppendBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := openLog(t)
	js := l.JetStream()
	const id = "otel-0123456789abcdef0123456789abcdef"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w, err := l.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.AppendBatch(ctx, drafts(3, at, "first")); err != nil || len(got) != 3 || got[2].Seq != 3 {
		t.Fatalf("first batch: %d events, %v", len(got), err)
	}

	// Room for 5 more messages; a batch is refused whole.
	limitOTel(t, js, 5)
	got, err := w.AppendBatch(ctx, drafts(eventlog.MinDiskBatch, at.Add(time.Second), "refused"))
	var apiErr *jetstream.APIError
	if !errors.Is(err, eventlog.ErrBatchRefused) || !errors.As(err, &apiErr) || len(got) != 0 {
		t.Fatalf("a batch past the stream's limit: %d events, %v (want ErrBatchRefused with the stream's error)", len(got), err)
	}
	var partial *eventlog.PartialError
	if errors.As(err, &partial) {
		t.Fatalf("a refused first batch is not partial: %v", err)
	}
	if n, err := l.LastSeq(ctx, id); err != nil || n != 3 {
		t.Fatalf("after the refused batch the chain's last seq is %d (%v), want 3: nothing of it stored", n, err)
	}
	if _, err := w.AppendBatch(ctx, drafts(eventlog.MinDiskBatch, at.Add(2*time.Second), "after")); err == nil {
		t.Fatal("the writer went on after a failed batch")
	}

	// Lifted: a resumed writer continues, 2500 events in three batches.
	limitOTel(t, js, -1)
	w, err = l.ResumeChainWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.AppendBatch(ctx, drafts(2500, at.Add(3*time.Second), "big")); err != nil || len(got) != 2500 || got[2499].Seq != 2503 {
		t.Fatalf("2500 events: %d stored, %v", len(got), err)
	}
	events := readVerified(t, l, id)
	if len(events) != 2503 || events[3].Data["tag"] != "big" || events[2502].Data["i"] != float64(2499) {
		t.Fatalf("chain: %d events", len(events))
	}

	// Room for one batch and a half: the first batch is stored, the
	// second refused whole, and the error says how many were stored.
	limitOTel(t, js, eventlog.MaxBatch+eventlog.MaxBatch/2)
	got, err = w.AppendBatch(ctx, drafts(2*eventlog.MaxBatch, at.Add(time.Hour), "partial"))
	if !errors.As(err, &partial) || partial.Stored != eventlog.MaxBatch || partial.Total != 2*eventlog.MaxBatch ||
		!errors.Is(err, eventlog.ErrBatchRefused) || len(got) != eventlog.MaxBatch {
		t.Fatalf("a write refused at its second batch: %d events, %v (want a PartialError of %d stored)", len(got), err, eventlog.MaxBatch)
	}
	if events := readVerified(t, l, id); len(events) != 2503+eventlog.MaxBatch {
		t.Fatalf("chain after the partial write: %d events, want %d", len(events), 2503+eventlog.MaxBatch)
	}
	limitOTel(t, js, -1)

	// Two writers: the stale one's batch is a conflict, nothing stored.
	a, err := l.ResumeChainWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.ResumeChainWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := a.Seq()
	const n = eventlog.MinDiskBatch
	if _, err := a.AppendBatch(ctx, drafts(n, at.Add(2*time.Hour), "a")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.AppendBatch(ctx, drafts(n, at.Add(2*time.Hour), "b")); !errors.Is(err, eventlog.ErrConflict) || len(got) != 0 {
		t.Fatalf("the second writer's batch: %d events, %v (want ErrConflict)", len(got), err)
	}
	events = readVerified(t, l, id)
	if got := uint64(len(events)); got != last+n || events[got-1].Data["tag"] != "a" {
		t.Fatalf("chain after two writers: %d events, last %v", got, events[got-1].Data)
	}

	// Fewer events than MinDiskBatch go one at a time: a refusal after
	// five of ten is a PartialError saying so.
	w, err = l.ResumeChainWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	limitOTel(t, js, 5)
	if got, err := w.AppendBatch(ctx, drafts(10, at.Add(3*time.Hour), "small")); !errors.As(err, &partial) || partial.Stored != 5 || len(got) != 5 {
		t.Fatalf("a small write past the limit: %d events, %v (want a PartialError of 5 stored)", len(got), err)
	}
	readVerified(t, l, id)
}

// TestAppendBatchWithoutAtomicPublish: on a stream that does not allow
// atomic publish (LCTL, or an LCTL_OTEL provisioned before XCT asked for
// it) AppendBatch appends one event at a time, with the same chain.
func TestAppendBatchWithoutAtomicPublish(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openLog(t)
	w, err := l.NewChainWriter("run-batch")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 3 {
		got, err := w.AppendBatch(ctx, drafts(5, at.Add(time.Duration(i)*time.Second), fmt.Sprint(i)))
		if err != nil || len(got) != 5 {
			t.Fatalf("batch %d: %d events, %v", i, len(got), err)
		}
	}
	if events := readVerified(t, l, "run-batch"); len(events) != 15 || events[14].Data["tag"] != "2" {
		t.Fatalf("chain: %d events", len(events))
	}
}
