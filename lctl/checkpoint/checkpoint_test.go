package checkpoint_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

type key struct {
	signer   note.Signer
	verifier note.Verifier
	vkey     string
}

func newKey(t testing.TB, name string) key {
	t.Helper()
	skey, vkey, err := checkpoint.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.ParseSigner([]byte(skey+"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := checkpoint.ParseVerifiers([]byte("# trusted\n"+vkey+"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return key{s, vs[0], vkey}
}

// chain writes n work events to a chain, as the orchestrator would, with a
// signed checkpoint after every `every` events and at the end; signerAt
// picks the key for the checkpoint covering a seq (rotation).
func chain(t testing.TB, id string, n, every int, signerAt func(seq uint64) note.Signer) []lctl.Event {
	t.Helper()
	types := make([]string, n)
	for i := range types {
		types[i] = lctl.TypeToolCall
	}
	return chainOf(t, id, types, every, signerAt)
}

// runChain is chain with a run's start before the work and its end after.
func runChain(t testing.TB, id string, n, every int, signerAt func(seq uint64) note.Signer) []lctl.Event {
	t.Helper()
	types := []string{lctl.TypeRunStarted}
	for range n {
		types = append(types, lctl.TypeToolCall)
	}
	return chainOf(t, id, append(types, lctl.TypeRunFinished), every, signerAt)
}

// chainOf is chain with an event of each of types.
func chainOf(t testing.TB, id string, types []string, every int, signerAt func(seq uint64) note.Signer) []lctl.Event {
	t.Helper()
	n := len(types)
	var events []lctl.Event
	add := func(typ string, data map[string]any) *lctl.Event {
		prev := ""
		if len(events) > 0 {
			prev = events[len(events)-1].Hash
		}
		agent := "agent"
		if typ == checkpoint.EventType {
			agent = checkpoint.SignerAgent
		}
		e := lctl.Event{ChainID: id, Seq: uint64(len(events) + 1), Type: typ, Agent: agent,
			Timestamp: lctl.FormatTime(testTime(len(events))), Data: data}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
		return &events[len(events)-1]
	}
	sign := func() {
		head := events[len(events)-1]
		d, err := checkpoint.Sign(signerAt(head.Seq), checkpoint.Origin("test", id), &head)
		if err != nil {
			t.Fatal(err)
		}
		add(checkpoint.EventType, d)
	}
	for i := 0; i < n; i++ {
		e := add(types[i], map[string]any{"tool": "fs.read", "step": float64(i + 1), "output": fmt.Sprintf("result %d", i)})
		if every > 0 && e.Seq%uint64(every) == 0 {
			sign()
		}
	}
	if every > 0 {
		sign()
	}
	return events
}

func reseal(t *testing.T, events []lctl.Event) {
	t.Helper()
	prev := ""
	for i := range events {
		events[i].Seq = uint64(i + 1)
		if err := events[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = events[i].Hash
	}
}

func clone(events []lctl.Event) []lctl.Event {
	out := make([]lctl.Event, len(events))
	for i, e := range events {
		d := make(map[string]any, len(e.Data))
		for k, v := range e.Data {
			d[k] = v
		}
		e.Data = d
		out[i] = e
	}
	return out
}

func TestVerify(t *testing.T) {
	k := newKey(t, "xct-test")
	other := newKey(t, "xct-test") // same name, another key
	trusted := note.VerifierList(k.verifier)
	good := chain(t, "run-1", 25, 10, func(uint64) note.Signer { return k.signer })
	// 25 events with checkpoints after seq 10, 21 (10 + checkpoint + 10),
	// and at the end.

	t.Run("untouched", func(t *testing.T) {
		r := checkpoint.Verify("run-1", good, trusted, checkpoint.Options{})
		if !r.OK || r.SignedThrough != uint64(len(good)-1) || len(r.Unsigned) != 0 || len(r.Checkpoints) != 3 {
			t.Fatalf("%+v", r)
		}
		for _, c := range r.Checkpoints {
			if !c.OK || c.Keys[0] != "xct-test" {
				t.Fatalf("checkpoint %+v", c)
			}
		}
	})
	t.Run("edited without rehash", func(t *testing.T) {
		ev := clone(good)
		ev[6].Data["output"] = "result 7, changed"
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 7, "differs from what was written")
	})
	t.Run("deleted event", func(t *testing.T) {
		ev := append(clone(good[:4]), clone(good[5:])...)
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 6, "seq 6 where 5 was expected")
	})
	t.Run("reordered pair", func(t *testing.T) {
		ev := clone(good)
		ev[12], ev[13] = ev[13], ev[12]
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 14, "position 13")
	})
	t.Run("edited and rehashed", func(t *testing.T) {
		ev := clone(good)
		ev[14].Data["output"] = "forged"
		reseal(t, ev)
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		// Events 1-10 are still proven; the checkpoint at seq 21 covers
		// 11 to 20.
		wantFirst(t, r, 21, "one or more of events 11 to 20 were changed")
		if r.SignedThrough != 10 || r.First.Kind != checkpoint.ProblemRehashed {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("deleted and rehashed", func(t *testing.T) {
		ev := append(clone(good[:2]), clone(good[3:])...)
		reseal(t, ev)
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 10, "events before it were removed and the hashes recomputed (one or more of events 1 to 9 differ)")
	})
	t.Run("wrong key", func(t *testing.T) {
		r := checkpoint.Verify("run-1", good, note.VerifierList(other.verifier), checkpoint.Options{})
		wantFirst(t, r, 11, "which is not a trusted key")
		if r.SignedThrough != 0 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("note edited", func(t *testing.T) {
		ev := clone(good)
		cp := &ev[10]
		cp.Data["note"] = strings.Replace(cp.Data["note"].(string), "\n10\n", "\n9\n", 1)
		reseal(t, ev)
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 11, "does not verify")
	})
	t.Run("copied from another chain", func(t *testing.T) {
		r := checkpoint.Verify("run-2", good, trusted, checkpoint.Options{})
		wantFirst(t, r, 11, "it was copied from another chain")
	})
	t.Run("unsigned tail", func(t *testing.T) {
		ev := clone(good[:len(good)-1]) // the final checkpoint cut off
		ev = append(ev, lctl.Event{ChainID: "run-1", Type: lctl.TypeToolCall, Agent: "intruder", Data: map[string]any{"tool": "x"}})
		ev[len(ev)-1].Seq = uint64(len(ev))
		if err := ev[len(ev)-1].Seal(ev[len(ev)-2].Hash); err != nil {
			t.Fatal(err)
		}
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 22, "events 22 to 28 come after the last signed checkpoint")
		r = checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{AllowUnsignedTail: true})
		if !r.OK || r.SignedThrough != 20 || len(r.Unsigned) != 7 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("no checkpoint", func(t *testing.T) {
		ev := chain(t, "run-1", 3, 0, nil)
		r := checkpoint.Verify("run-1", ev, trusted, checkpoint.Options{})
		wantFirst(t, r, 1, "no signed checkpoint")
	})
}

// TestKeyRotation signs the first checkpoints with one key and the rest
// with its successor: trusting both verifies the chain, trusting only the
// new one proves nothing before the rotation.
func TestKeyRotation(t *testing.T) {
	old, cur := newKey(t, "xct-2026a"), newKey(t, "xct-2026b")
	ev := chain(t, "run-r", 30, 10, func(seq uint64) note.Signer {
		if seq <= 10 {
			return old.signer
		}
		return cur.signer
	})
	raw := "# rotated out on 2026-11-01, kept to verify older chains\n" + old.vkey + "\n" + cur.vkey + "\n"
	vs, err := checkpoint.ParseVerifiers([]byte(raw), "trusted")
	if err != nil {
		t.Fatal(err)
	}
	r := checkpoint.Verify("run-r", ev, note.VerifierList(vs...), checkpoint.Options{})
	if !r.OK || r.Checkpoints[0].Keys[0] != "xct-2026a" || r.Checkpoints[len(r.Checkpoints)-1].Keys[0] != "xct-2026b" {
		t.Fatalf("%+v", r)
	}
	r = checkpoint.Verify("run-r", ev, note.VerifierList(cur.verifier), checkpoint.Options{})
	wantFirst(t, r, 11, "xct-2026a")
}

func TestNoteFormat(t *testing.T) {
	k := newKey(t, "xct-dev")
	head := lctl.Event{Seq: 42, Hash: strings.Repeat("ab", 32)}
	d, err := checkpoint.Sign(k.signer, checkpoint.Origin("", "run-9"), &head)
	if err != nil {
		t.Fatal(err)
	}
	msg := d["note"].(string)
	lines := strings.Split(msg, "\n")
	// origin, size, base64 root, blank, "— name base64(keyhash||sig)", "".
	if len(lines) != 6 || lines[0] != "xct/lctl/run-9" || lines[1] != "42" || lines[2] != "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=" || lines[3] != "" || !strings.HasPrefix(lines[4], "— xct-dev ") {
		t.Fatalf("note:\n%s", msg)
	}
	n, err := note.Open([]byte(msg), note.VerifierList(k.verifier))
	if err != nil {
		t.Fatal(err)
	}
	p, err := checkpoint.ParseBody(n.Text)
	if err != nil || p.Seq != 42 || p.HeadHash != head.Hash || p.Origin != "xct/lctl/run-9" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{"o\n42\n", "o\n042\nq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=\n", "o\n1\nnot base64\n", "\n1\nq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=\n", "o\n1\nq6s="} {
		if _, err := checkpoint.ParseBody(bad); err == nil {
			t.Errorf("ParseBody(%q) accepted", bad)
		}
	}
	if _, err := checkpoint.ParseVerifiers([]byte("PRIVATE+KEY+x+01+abc\n"), "k"); err == nil || !strings.Contains(err.Error(), "private signing key") {
		t.Errorf("a private key given as trusted: %v", err)
	}
	if _, err := checkpoint.ParseSigner([]byte(k.vkey), "k"); err == nil || !strings.Contains(err.Error(), "not a signing key") {
		t.Errorf("a verifier key given as signer: %v", err)
	}
}

func wantFirst(t *testing.T, r *checkpoint.Report, seq uint64, text string) {
	t.Helper()
	if r.OK || r.First == nil {
		t.Fatalf("verified, want a problem at seq %d (%q): %+v", seq, text, r)
	}
	if r.First.Seq != seq || !strings.Contains(r.First.Message, text) {
		t.Fatalf("first problem %+v\nwant seq %d containing %q", *r.First, seq, text)
	}
}

// TestCutAfterACheckpoint: a run's chain cut right after a checkpoint in
// its middle has nothing unsigned, every event left being what was signed;
// its end and what came before the end (a denied step, an error) are gone.
// Verify must fail it, naming the cut, and accept it only as a chain still
// being written (--allow-unsigned-tail), with a note. A whole run, and a
// chain that is no run's, pass as before.
func TestCutAfterACheckpoint(t *testing.T) {
	k := newKey(t, "xct-test")
	keys := note.VerifierList(k.verifier)
	whole := runChain(t, "run-1", 25, 10, func(uint64) note.Signer { return k.signer })
	if r := checkpoint.Verify("run-1", whole, keys, checkpoint.Options{}); !r.OK || r.SignedThrough != 29 {
		t.Fatalf("whole run: %+v", r)
	}
	// Events 1..10, the checkpoint covering 10 at seq 11: cut there.
	if whole[10].Type != checkpoint.EventType {
		t.Fatalf("event 11 is %s", whole[10].Type)
	}
	cut := clone(whole[:11])
	for _, stream := range []bool{false, true} {
		verify := func(opts checkpoint.Options) *checkpoint.Report {
			if !stream {
				return checkpoint.Verify("run-1", cut, keys, opts)
			}
			v := checkpoint.NewStreamVerifier("run-1", keys, opts)
			for i := range cut {
				if !v.Add(&cut[i]) {
					t.Fatalf("event %d refused", i+1)
				}
			}
			return v.Report()
		}
		r := verify(checkpoint.Options{})
		wantFirst(t, r, 10, "the signed events end at seq 10, which is not the run's end")
		if r.First.Kind != checkpoint.ProblemNoEnd || len(r.Unsigned) != 0 || r.SignedThrough != 10 {
			t.Fatalf("stream %v: %+v", stream, r)
		}
		r = verify(checkpoint.Options{AllowUnsignedTail: true})
		if !r.OK || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "events after it may have been cut off") {
			t.Fatalf("stream %v, tail allowed: %+v", stream, r)
		}
	}
	// A rollback after the run ends with its own signed end.
	rolled := runChain(t, "run-1", 5, 10, func(uint64) note.Signer { return k.signer })
	more := chainOf(t, "x", []string{lctl.TypeRollbackStarted, lctl.TypeRollbackFinished}, 0, nil)
	for _, e := range more {
		prev := rolled[len(rolled)-1]
		e.Seq = prev.Seq + 1
		if err := e.Seal(prev.Hash); err != nil {
			t.Fatal(err)
		}
		rolled = append(rolled, e)
	}
	head := rolled[len(rolled)-1]
	d, err := checkpoint.Sign(k.signer, checkpoint.Origin("test", "run-1"), &head)
	if err != nil {
		t.Fatal(err)
	}
	cp := lctl.Event{Seq: head.Seq + 1, Type: checkpoint.EventType, Agent: checkpoint.SignerAgent, Timestamp: head.Timestamp, Data: d}
	if err := cp.Seal(head.Hash); err != nil {
		t.Fatal(err)
	}
	rolled = append(rolled, cp)
	if r := checkpoint.Verify("run-1", rolled, keys, checkpoint.Options{}); !r.OK {
		t.Fatalf("rolled back: %+v", r)
	}
	// Cut before the rollback: the run's end is the last event signed.
	// It verifies; what the file alone cannot show is said (session 13),
	// for the cut copy and the whole one alike: the whole one could have
	// been cut after a second rollback.
	for name, events := range map[string][]lctl.Event{"cut before the rollback": rolled[:len(rolled)-3], "whole": rolled} {
		r := checkpoint.Verify("run-1", events, keys, checkpoint.Options{})
		if !r.OK || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "the signed events end at the run's end (seq "+fmt.Sprint(events[len(events)-2].Seq)+")") ||
			!strings.Contains(r.Notes[0], "--against-tracer") {
			t.Fatalf("rolled back, %s: %+v", name, r)
		}
	}
	// Against the cluster's latest signed head (the live chain's tail),
	// the cut shows.
	tail := rolled[len(rolled)-6:]
	h, ok := checkpoint.LatestHead("run-1", tail, keys, checkpoint.Options{})
	if !ok || h.Seq != head.Seq || h.Hash != head.Hash {
		t.Fatalf("latest head %+v %v, want seq %d", h, ok, head.Seq)
	}
	h.Source = "the tracer at 127.0.0.1:7704"
	both := func(events []lctl.Event, opts checkpoint.Options) *checkpoint.Report {
		t.Helper()
		r := checkpoint.Verify("run-1", events, keys, opts)
		sv := checkpoint.NewStreamVerifier("run-1", keys, opts)
		for i := range events {
			sv.Add(&events[i])
		}
		if s := sv.Report(); s.OK != r.OK || !reflect.DeepEqual(s.Problems, r.Problems) || !reflect.DeepEqual(s.Notes, r.Notes) {
			t.Fatalf("stream %+v\nwhole %+v", s, r)
		}
		return r
	}
	r := both(rolled[:len(rolled)-3], checkpoint.Options{Against: &h})
	wantFirst(t, r, head.Seq-2, "covering seq "+fmt.Sprint(head.Seq)+"; this chain ends at seq "+fmt.Sprint(head.Seq-2))
	if r.First.Kind != checkpoint.ProblemBehind || !strings.Contains(r.First.Message, "127.0.0.1:7704") {
		t.Fatalf("%+v", r.First)
	}
	if r := both(rolled, checkpoint.Options{Against: &h}); !r.OK || !strings.Contains(strings.Join(r.Notes, "\n"), "latest signed head the tracer at 127.0.0.1:7704 has (seq "+fmt.Sprint(head.Seq)) {
		t.Fatalf("whole, against its head: %+v", r)
	}
	// Another chain at that seq (a fork): refused.
	forked := h
	forked.Hash = strings.Repeat("0", 64)
	wantFirst(t, both(rolled, checkpoint.Options{Against: &forked}), head.Seq, "it is not the chain the cluster signed")
	// An untrusted key's or another chain's checkpoint is no head.
	if _, ok := checkpoint.LatestHead("run-1", tail, note.VerifierList(newKey(t, "other").verifier), checkpoint.Options{}); ok {
		t.Fatal("an untrusted key's checkpoint gave a head")
	}
	if _, ok := checkpoint.LatestHead("run-2", tail, keys, checkpoint.Options{}); ok {
		t.Fatal("another chain's checkpoint gave a head")
	}
	if _, ok := checkpoint.LatestHead("run-1", tail[len(tail)-1:], keys, checkpoint.Options{}); ok {
		t.Fatal("a checkpoint without the event it covers gave a head")
	}
}

// TestCopiedCheckpointIsUnsigned: a signed checkpoint proves itself only
// where it was signed, right after the event it covers, with the data
// Sign gave it. A copy of a real one appended later (its note verifies),
// or one with a field added, is an event nobody signed: listed unsigned.
func TestCopiedCheckpointIsUnsigned(t *testing.T) {
	k := newKey(t, "xct-test")
	keys := note.VerifierList(k.verifier)
	whole := runChain(t, "run-1", 5, 100, func(uint64) note.Signer { return k.signer })
	last := whole[len(whole)-1]
	if last.Type != checkpoint.EventType {
		t.Fatalf("the chain ends with %s", last.Type)
	}
	appendCopy := func(extra map[string]any) []lctl.Event {
		out := clone(whole)
		c := last
		c.Data = map[string]any{}
		for k, v := range last.Data {
			c.Data[k] = v
		}
		for k, v := range extra {
			c.Data[k] = v
		}
		c.Seq = last.Seq + 1
		if err := c.Seal(last.Hash); err != nil {
			t.Fatal(err)
		}
		return append(out, c)
	}
	copied := appendCopy(nil)
	extra := clone(whole)
	extra[len(extra)-1].Data["message"] = "approved by security"
	reseal(t, extra)
	for _, tc := range []struct {
		name   string
		events []lctl.Event
		seq    uint64
	}{
		{"copied to the end", copied, last.Seq + 1},
		{"copied with a line of its own", appendCopy(map[string]any{"message": "approved by security"}), last.Seq + 1},
		{"a field added", extra, last.Seq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkpoint.Verify("run-1", tc.events, keys, checkpoint.Options{})
			wantFirst(t, r, tc.seq, "after the last signed checkpoint")
			v := checkpoint.NewStreamVerifier("run-1", keys, checkpoint.Options{})
			for i := range tc.events {
				if !v.Add(&tc.events[i]) {
					t.Fatalf("event %d refused", i+1)
				}
			}
			if got := v.Report(); !reflect.DeepEqual(got, r) {
				t.Fatalf("stream:\n%+v\nfull:\n%+v", *got, *r)
			}
		})
	}
}

// TestOriginPrefix: two clusters sharing a key each sign their run-1
// (origins a/lctl/run-1 and b/lctl/run-1). Without a prefix either
// verifies as run-1; with the cluster's prefix (--origin) the other's is
// refused, by Verify and the streaming verifier alike.
func TestOriginPrefix(t *testing.T) {
	k := newKey(t, "shared")
	keys := note.VerifierList(k.verifier)
	other := runChain(t, "run-1", 5, 100, func(uint64) note.Signer { return k.signer })
	if r := checkpoint.Verify("run-1", other, keys, checkpoint.Options{}); !r.OK {
		t.Fatalf("no prefix: %+v", r)
	}
	for _, prefix := range []string{"test", "prod"} {
		want := prefix == "test" // runChain signs with origin test/lctl/run-1
		opts := checkpoint.Options{OriginPrefix: prefix}
		r := checkpoint.Verify("run-1", other, keys, opts)
		v := checkpoint.NewStreamVerifier("run-1", keys, opts)
		for i := range other {
			v.Add(&other[i])
		}
		if got := v.Report(); !reflect.DeepEqual(got, r) {
			t.Fatalf("%s: stream:\n%+v\nfull:\n%+v", prefix, *got, *r)
		}
		if r.OK != want {
			t.Fatalf("origin prefix %s: ok %v: %+v", prefix, r.OK, r)
		}
		if !want {
			wantFirst(t, r, other[len(other)-1].Seq, `it signs origin "test/lctl/run-1", not "prod/lctl/run-1" (--origin)`)
		}
	}
}

func testTime(i int) time.Time {
	return time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
}

// TestStreamVerifierAgrees: on chains that link up, the streaming verifier
// says what Verify says.
func TestStreamVerifierAgrees(t *testing.T) {
	k := newKey(t, "xct-test")
	other := newKey(t, "xct-other")
	good := chain(t, "run-1", 25, 10, func(uint64) note.Signer { return k.signer })
	rehashed := clone(good)
	rehashed[14].Data["output"] = "forged"
	reseal(t, rehashed)
	tail := clone(good[:len(good)-1])
	for _, tc := range []struct {
		name   string
		events []lctl.Event
		keys   note.Verifiers
		opts   checkpoint.Options
	}{
		{"untouched", good, note.VerifierList(k.verifier), checkpoint.Options{}},
		{"rehashed", rehashed, note.VerifierList(k.verifier), checkpoint.Options{}},
		{"wrong key", good, note.VerifierList(other.verifier), checkpoint.Options{}},
		{"unsigned tail", tail, note.VerifierList(k.verifier), checkpoint.Options{}},
		{"unsigned tail allowed", tail, note.VerifierList(k.verifier), checkpoint.Options{AllowUnsignedTail: true}},
		{"no checkpoints", chain(t, "run-1", 5, 0, nil), note.VerifierList(k.verifier), checkpoint.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := checkpoint.Verify("run-1", tc.events, tc.keys, tc.opts)
			v := checkpoint.NewStreamVerifier("run-1", tc.keys, tc.opts)
			for i := range tc.events {
				if !v.Add(&tc.events[i]) {
					t.Fatalf("event %d refused", i+1)
				}
			}
			got := v.Report()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("stream:\n%+v\nfull:\n%+v", *got, *want)
			}
		})
	}
}

// TestRevokedKeys: a trusted-keys file says a key is revoked, outright or
// since a time, and what it alone signed is refused accordingly; a key
// revoked in one file and listed plainly in another is revoked; a key
// listed twice is one key. Before, a revoked key had to be removed (and a
// key given by --key and in a trusted-keys file made every checkpoint it
// signed "ambiguous").
func TestRevokedKeys(t *testing.T) {
	old, cur := newKey(t, "xct-2026a"), newKey(t, "xct-2026b")
	// Checkpoint at seq 11 covers seq 10 (dated 10:00:09), signed by old;
	// the later ones by cur (the next at seq 21, covering seq 20, dated
	// 10:00:19).
	ev := runChain(t, "run-r", 30, 10, func(seq uint64) note.Signer {
		if seq <= 10 {
			return old.signer
		}
		return cur.signer
	})
	dir := t.TempDir()
	write := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	verify := func(files ...string) *checkpoint.Report {
		t.Helper()
		tk, err := checkpoint.LoadVerifiers(files...)
		if err != nil {
			t.Fatal(err)
		}
		opts := checkpoint.Options{Revoked: tk.Revoked}
		r := checkpoint.Verify("run-r", ev, tk.Verifiers, opts)
		sv := checkpoint.NewStreamVerifier("run-r", tk.Verifiers, opts)
		for i := range ev {
			if !sv.Add(&ev[i]) {
				t.Fatal("stream verifier gave up")
			}
		}
		if s := sv.Report(); s.OK != r.OK || !reflect.DeepEqual(s.Problems, r.Problems) || !reflect.DeepEqual(s.Notes, r.Notes) {
			t.Fatalf("stream %+v\nwhole %+v", s, r)
		}
		return r
	}
	both := write("both", old.vkey+"\n"+cur.vkey+"\n")
	if r := verify(both); !r.OK {
		t.Fatalf("both trusted: %+v", r)
	}
	r := verify(write("outright", "# leaked on 2026-11-20\nrevoked "+old.vkey+"\n"+cur.vkey+"\n"))
	wantFirst(t, r, 11, "xct-2026a+")
	if r.First.Kind != checkpoint.ProblemRevoked || !strings.Contains(r.First.Message, "(revoked)") {
		t.Fatalf("%+v", r.First)
	}
	r = verify(write("retired", "revoked since=2026-11-25T10:00:10Z "+old.vkey+"\n"+cur.vkey+"\n"))
	// The revocation's note, then the one every run's chain ending at its
	// signed end gets.
	if !r.OK || len(r.Notes) != 2 || !strings.Contains(r.Notes[0], "revoked since 2026-11-25T10:00:10Z") || !strings.Contains(r.Notes[0], "signer's own claim") {
		t.Fatalf("retired after what it signed: %+v", r)
	}
	r = verify(write("early", "revoked since=2026-11-25T10:00:05Z "+old.vkey+"\n"+cur.vkey+"\n"))
	wantFirst(t, r, 11, "revoked since 2026-11-25T10:00:05Z")
	r = verify(write("cur-since", old.vkey+"\nrevoked since=2026-11-25T10:00:15Z "+cur.vkey+"\n"))
	wantFirst(t, r, 21, "xct-2026b+")
	// Revoked in one file, listed in another: revoked.
	r = verify(both, write("revokes", "revoked "+old.vkey+"\n"))
	wantFirst(t, r, 11, "(revoked)")
	// Outright in one, since a time in another: outright.
	r = verify(write("a", "revoked since=2026-11-25T10:00:10Z "+old.vkey+"\n"+cur.vkey+"\n"), write("b", "revoked "+old.vkey+"\n"))
	wantFirst(t, r, 11, "(revoked)")
	// A key given twice (--key and a trusted-keys file) is one key.
	if r := verify(write("cur.pub", cur.vkey+"\n"), both); !r.OK {
		t.Fatalf("a key listed twice: %+v", r)
	}
	for _, bad := range []string{
		"revoked since=yesterday " + old.vkey,
		"revoked",
		"revoked since=2026-11-25T10:00:10Z",
		"revoke " + old.vkey,
		old.vkey + " " + cur.vkey,
	} {
		if _, err := checkpoint.ParseTrustedKeys([]byte(bad+"\n"+cur.vkey+"\n"), "keys"); err == nil || !strings.Contains(err.Error(), "keys line 1") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := checkpoint.ParseVerifiers([]byte("revoked "+old.vkey+"\n"), "keys"); err == nil {
		t.Error("ParseVerifiers took a revocation")
	}
}
