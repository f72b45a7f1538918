package eventlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
)

// sealedChain returns n events of chain id sealed as a ChainWriter seals
// them, each as its stream message would hold it alone.
func sealedChain(t *testing.T, id string, n int) [][]byte {
	t.Helper()
	at := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	out := make([][]byte, 0, n)
	prev := ""
	for seq := 1; seq <= n; seq++ {
		e := lctl.Event{ChainID: id, Seq: uint64(seq), Type: "step_start", Timestamp: lctl.FormatTime(at.Add(time.Duration(seq) * time.Millisecond)), Agent: "orchestrator",
			Data: map[string]any{"step": float64(seq), "intent": fmt.Sprintf("line one\nline two %d", seq), "arguments": map[string]any{"i": float64(seq)}}}
		raw, err := e.SealEncoded(prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		out = append(out, raw)
	}
	return out
}

// writePacked publishes a chain's sealed events to the stream in packs of
// the given sizes, in turn (one size: every message one event), with a
// message of another chain between two of the chain's and a long stretch
// of the other chain in the middle, so stream and chain positions differ
// unevenly.
func writePacked(t *testing.T, js jetstream.JetStream, id string, events [][]byte, sizes ...int) {
	t.Helper()
	ctx := context.Background()
	other := sealedChain(t, id+"-other", 2*len(events)+60)
	o := 0
	pub := func(subject string, data []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := 0, 0; i < len(events); k++ {
		n := min(sizes[k%len(sizes)], len(events)-i)
		pub(eventlog.Subject(id), bytes.Join(events[i:i+n], []byte("\n")))
		i += n
		pub(eventlog.Subject(id+"-other"), other[o])
		o++
		if k == 7 {
			for range 50 {
				pub(eventlog.Subject(id+"-other"), other[o])
				o++
			}
		}
	}
}

// chainReads is everything the log's readers say of a chain.
type chainReads struct {
	whole       []lctl.Event
	followed    []lctl.Event
	from        map[uint64][]lctl.Event
	first, last lctl.Event
	lastSeq     uint64
}

func readAll(t *testing.T, l *eventlog.Log, id string, n int) chainReads {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r chainReads
	var err error
	if r.whole, err = l.ReadChain(ctx, id); err != nil {
		t.Fatalf("ReadChain: %v", err)
	}
	if err := lctl.Verify(r.whole); err != nil {
		t.Fatalf("ReadChain: %v", err)
	}
	err = l.Follow(ctx, id, eventlog.FollowOptions{StopAtEnd: true}, func(e lctl.Event) error {
		r.followed = append(r.followed, e)
		return nil
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	r.from = map[uint64][]lctl.Event{}
	for from := uint64(0); from <= uint64(n); from++ {
		if r.from[from], err = l.ReadChainFrom(ctx, id, from); err != nil {
			t.Fatalf("ReadChainFrom(%d): %v", from, err)
		}
	}
	if _, err := l.ReadChainFrom(ctx, id, uint64(n)+1); !errors.Is(err, eventlog.ErrEventNotFound) {
		t.Fatalf("ReadChainFrom past the end: %v, want ErrEventNotFound", err)
	}
	if r.first, r.last, err = l.Ends(ctx, id); err != nil {
		t.Fatalf("Ends: %v", err)
	}
	if r.lastSeq, err = l.LastSeq(ctx, id); err != nil {
		t.Fatalf("LastSeq: %v", err)
	}
	return r
}

// A chain written in packs (several events in one stream message) reads
// exactly as the same chain written one event per message, through every
// reader of the log, and a writer resumed on it goes on after its last
// event.
func TestPackedChainReadsAsOneEventPerMessage(t *testing.T) {
	t.Parallel()
	const n = 97
	events := sealedChain(t, "run-packed", n)
	single, singleJS := openLogJS(t)
	writePacked(t, singleJS, "run-packed", events, 1)
	want := readAll(t, single, "run-packed", n)
	if len(want.whole) != n || want.lastSeq != n || want.first.Seq != 1 || want.last.Seq != n {
		t.Fatalf("one event a message: %d events, last seq %d, ends %d..%d", len(want.whole), want.lastSeq, want.first.Seq, want.last.Seq)
	}
	for _, sizes := range [][]int{{2}, {3, 1, 4, 1, 5}, {n}, {1, 1, 7}, {6, 2}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			t.Parallel()
			l, js := openLogJS(t)
			writePacked(t, js, "run-packed", events, sizes...)
			got := readAll(t, l, "run-packed", n)
			if !reflect.DeepEqual(got.whole, want.whole) {
				t.Errorf("ReadChain differs from the chain written one event a message")
			}
			if !reflect.DeepEqual(got.followed, want.followed) {
				t.Errorf("Follow delivered %d events, differing from the chain written one event a message (%d)", len(got.followed), len(want.followed))
			}
			for from := uint64(0); from <= n; from++ {
				if !reflect.DeepEqual(got.from[from], want.from[from]) {
					t.Errorf("ReadChainFrom(%d): %d events, differing from the chain written one event a message (%d)", from, len(got.from[from]), len(want.from[from]))
				}
			}
			if !reflect.DeepEqual(got.first, want.first) || !reflect.DeepEqual(got.last, want.last) || got.lastSeq != want.lastSeq {
				t.Errorf("Ends %d..%d, LastSeq %d; want %d..%d, %d", got.first.Seq, got.last.Seq, got.lastSeq, want.first.Seq, want.last.Seq, want.lastSeq)
			}
			w, err := l.ResumeChainWriter(context.Background(), "run-packed")
			if err != nil {
				t.Fatal(err)
			}
			if w.Seq() != n || w.Last().Hash != want.last.Hash {
				t.Fatalf("resumed at %d/%s, want %d/%s", w.Seq(), w.Last().Hash, n, want.last.Hash)
			}
			e, err := w.Append(context.Background(), "step_end", "orchestrator", map[string]any{"step": float64(n)})
			if err != nil {
				t.Fatalf("append after the packs: %v", err)
			}
			if e.Seq != n+1 || e.PrevHash != want.last.Hash {
				t.Fatalf("appended %d after %s, want %d after %s", e.Seq, e.PrevHash, n+1, want.last.Hash)
			}
			whole, err := l.ReadChain(context.Background(), "run-packed")
			if err != nil || len(whole) != n+1 || lctl.Verify(whole) != nil {
				t.Fatalf("after the append: %d events, %v", len(whole), err)
			}
		})
	}
}

// A message that is neither one event nor a pack of the chain's
// consecutive events is refused by the readers.
func TestBadPackRefused(t *testing.T) {
	t.Parallel()
	events := sealedChain(t, "run-bad", 6)
	other := sealedChain(t, "run-else", 2)
	for name, c := range map[string]struct {
		msgs [][]byte
		is   error // errors.Is, when not nil
	}{
		"seq skipped":      {msgs: [][]byte{bytes.Join([][]byte{events[0], events[2]}, []byte("\n"))}, is: eventlog.ErrBadPack},
		"seq repeated":     {msgs: [][]byte{bytes.Join([][]byte{events[0], events[1], events[1]}, []byte("\n"))}, is: eventlog.ErrBadPack},
		"another chain's":  {msgs: [][]byte{bytes.Join([][]byte{events[0], other[1]}, []byte("\n"))}, is: eventlog.ErrBadPack},
		"an empty line":    {msgs: [][]byte{bytes.Join([][]byte{events[0], nil, events[1]}, []byte("\n"))}, is: eventlog.ErrBadPack},
		"not an event":     {msgs: [][]byte{bytes.Join([][]byte{events[0], []byte(`{"seq":2}`)}, []byte("\n"))}},
		"a pack, then bad": {msgs: [][]byte{bytes.Join(events[:2], []byte("\n")), bytes.Join([][]byte{events[2], events[4]}, []byte("\n"))}, is: eventlog.ErrBadPack},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, js := openLogJS(t)
			for _, m := range c.msgs {
				if _, err := js.Publish(context.Background(), eventlog.Subject("run-bad"), m); err != nil {
					t.Fatal(err)
				}
			}
			_, err := l.ReadChain(context.Background(), "run-bad")
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("ReadChain: %v, want an error (%v)", err, c.is)
			}
			_, err = l.ReadChainFrom(context.Background(), "run-bad", 1)
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("ReadChainFrom: %v, want an error (%v)", err, c.is)
			}
		})
	}
}

// packDrafts returns n drafts with fixed times, as a run's step events.
func packDrafts(n int) []eventlog.Draft {
	at := time.Date(2026, 11, 28, 1, 30, 0, 0, time.UTC)
	out := make([]eventlog.Draft, n)
	for i := range out {
		out[i] = eventlog.Draft{Time: at.Add(time.Duration(i) * time.Millisecond), Type: "step_start", Agent: "orchestrator",
			Data: map[string]any{"step": i + 1, "intent": "a\nb", "arguments": map[string]any{"i": i}}}
	}
	return out
}

// AppendPackWithin stores the events Append would have stored one after
// the other, in fewer messages, and a writer goes on after a pack.
func TestAppendPackStoresWhatAppendsWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drafts := packDrafts(10)
	single := openLog(t)
	sw, _ := single.NewChainWriter("run-pack")
	for _, d := range drafts {
		if _, err := sw.AppendAt(ctx, d.Time, d.Type, d.Agent, d.Data); err != nil {
			t.Fatal(err)
		}
	}
	want, err := single.ReadChain(ctx, "run-pack")
	if err != nil {
		t.Fatal(err)
	}
	packed := openLog(t)
	pw, _ := packed.NewChainWriter("run-pack")
	i := 0
	for _, n := range []int{1, 3, 2, 4} {
		got, err := pw.AppendPackWithin(5*time.Second, packDrafts(10)[i:i+n])
		if err != nil {
			t.Fatalf("pack of %d: %v", n, err)
		}
		if len(got) != n || !reflect.DeepEqual(got, want[i:i+n]) {
			t.Fatalf("pack of %d returned %d events, differing from Append's", n, len(got))
		}
		i += n
	}
	if pw.Seq() != 10 || pw.Last().Hash != want[9].Hash {
		t.Fatalf("writer at %d/%s, want 10/%s", pw.Seq(), pw.Last().Hash, want[9].Hash)
	}
	got, err := packed.ReadChain(ctx, "run-pack")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadChain: %d events (%v), differing from the chain appended one by one", len(got), err)
	}
	chains, err := packed.Chains(ctx)
	if err != nil || chains["run-pack"] != 4 {
		t.Fatalf("Chains: %v, %v; want 4 messages", chains, err)
	}
	if e, err := pw.Append(ctx, "step_end", "orchestrator", nil); err != nil || e.Seq != 11 || e.PrevHash != want[9].Hash {
		t.Fatalf("append after the packs: %d after %s, %v", e.Seq, e.PrevHash, err)
	}
}

// A pack refused because another writer appended first stores none of
// its events, and its writer refuses to go on; a pack over the
// connection's maximum payload goes as separate appends.
func TestAppendPackConflictAndSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	l, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := l.NewChainWriter("run-race")
	if _, err := a.AppendPackWithin(5*time.Second, packDrafts(2)); err != nil {
		t.Fatal(err)
	}
	b, err := l.ResumeChainWriter(ctx, "run-race")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "step_end", "other", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AppendPackWithin(5*time.Second, packDrafts(3)); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("pack after another writer's event: %v, want ErrConflict", err)
	}
	if _, err := a.Append(ctx, "step_end", "a", nil); err == nil {
		t.Fatal("a writer whose pack failed appended again")
	}
	if got, err := l.ReadChain(ctx, "run-race"); err != nil || len(got) != 3 || got[2].Agent != "other" {
		t.Fatalf("after the refused pack: %d events, %v", len(got), err)
	}

	big, _ := l.NewChainWriter("run-big")
	drafts := packDrafts(2)
	pad := strings.Repeat("x", int(nc.MaxPayload())*6/10) // two are over it, one is not
	for i := range drafts {
		drafts[i].Data["pad"] = pad
	}
	if got, err := big.AppendPackWithin(5*time.Second, drafts); err != nil || len(got) != 2 {
		t.Fatalf("a pack over the maximum payload: %d events, %v", len(got), err)
	}
	chains, err := l.Chains(ctx)
	if err != nil || chains["run-big"] != 2 {
		t.Fatalf("Chains: %v, %v; want 2 messages for the two large events", chains, err)
	}
	if got, err := l.ReadChain(ctx, "run-big"); err != nil || len(got) != 2 || lctl.Verify(got) != nil {
		t.Fatalf("run-big: %d events, %v", len(got), err)
	}
}
