package lctl_test

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// refHashV2 computes the state hash of version 2 from scratch, straight
// from its definition in docs/lctl.md ("State hash, version 2"), with
// nothing of the package's hasher: elements through the generic Canonical,
// RFC 6962's tree by its recursive definition.
func refHashV2(t testing.TB, s *lctl.State) string {
	t.Helper()
	canon := func(v any) []byte {
		b, err := lctl.Canonical(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	running := func(elems [][]byte) [32]byte {
		var r [32]byte
		for _, e := range elems {
			r = sha256.Sum256(append(append([]byte(nil), r[:]...), e...))
		}
		return r
	}
	listDigest := func(elems [][]byte, isNil bool) any {
		if isNil {
			return nil
		}
		r := running(elems)
		return map[string]any{"n": len(elems), "sha256": hex.EncodeToString(r[:])}
	}
	var mth func(leaves [][]byte) [32]byte
	mth = func(leaves [][]byte) [32]byte {
		switch n := len(leaves); n {
		case 0:
			return sha256.Sum256(nil)
		case 1:
			return sha256.Sum256(append([]byte{0}, leaves[0]...))
		default:
			k := 1
			for k*2 < n {
				k *= 2
			}
			l, r := mth(leaves[:k]), mth(leaves[k:])
			return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
		}
	}
	treeDigest := func(leaves [][]byte) any {
		r := mth(leaves)
		return map[string]any{"n": len(leaves), "merkle": hex.EncodeToString(r[:])}
	}
	elems := func(n int, at func(i int) any) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = canon(at(i))
		}
		return out
	}
	form := map[string]any{
		"agents":               listDigest(elems(len(s.Agents), func(i int) any { return s.Agents[i] }), s.Agents == nil),
		"chain_id":             s.ChainID,
		"contract_validations": listDigest(elems(len(s.ContractValidations), func(i int) any { return s.ContractValidations[i] }), s.ContractValidations == nil),
		"current_step":         s.CurrentStep,
		"duration_ms":          s.DurationMS,
		"errors":               listDigest(elems(len(s.Errors), func(i int) any { return s.Errors[i] }), s.Errors == nil),
		"event_count":          s.EventCount,
		"event_types":          s.EventTypes,
		"last_checkpoint_seq":  s.LastCheckpointSeq,
		"last_timestamp":       s.LastTimestamp,
		"model_routings":       listDigest(elems(len(s.ModelRoutings), func(i int) any { return s.ModelRoutings[i] }), s.ModelRoutings == nil),
		"run":                  s.Run,
		"seq":                  s.Seq,
		"state_hash_version":   2,
		"stream":               s.Stream,
		"tokens":               s.Tokens,
		"tool_calls":           listDigest(elems(len(s.ToolCalls), func(i int) any { return s.ToolCalls[i] }), s.ToolCalls == nil),
	}
	unknown := lctl.HashedUnknown(s)
	form["unknown_types"] = listDigest(elems(len(unknown), func(i int) any { return unknown[i] }), unknown == nil)
	if s.LastCheckpointHash != "" {
		form["last_checkpoint_hash"] = s.LastCheckpointHash
	}
	if s.Steps == nil {
		form["steps"] = nil
	} else {
		form["steps"] = treeDigest(elems(len(s.Steps), func(i int) any { return s.Steps[i] }))
	}
	if s.Facts == nil {
		form["facts"] = nil
	} else {
		first := func(f *lctl.Fact) uint64 {
			if f == nil || len(f.History) == 0 {
				return 0
			}
			return f.History[0].Seq
		}
		var ids []string
		for id := range s.Facts {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int {
			return cmp.Or(cmp.Compare(first(s.Facts[a]), first(s.Facts[b])), strings.Compare(a, b))
		})
		leaves := elems(len(ids), func(i int) any {
			f := s.Facts[ids[i]]
			leaf := map[string]any{"id": ids[i], "confidence": f.Confidence, "source": f.Source, "text": f.Text,
				"history": listDigest(elems(len(f.History), func(j int) any { return f.History[j] }), f.History == nil)}
			if len(f.Tags) > 0 {
				leaf["tags"] = f.Tags
			}
			return leaf
		})
		form["facts"] = treeDigest(leaves)
	}
	sum := sha256.Sum256(canon(form))
	return lctl.StateHashV2Prefix + hex.EncodeToString(sum[:])
}

func hashV2(t testing.TB, s *lctl.State) string {
	t.Helper()
	h, err := s.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestStateHashV2MatchesDefinition: a state hashed once (the hasher built
// from scratch) gives the hash the definition gives, on random chains, an
// XCT chain, the spec's examples, a generated workflow, an empty state and
// a summary state (no steps).
func TestStateHashV2MatchesDefinition(t *testing.T) {
	states := map[string]*lctl.State{
		"empty":    lctl.NewState("empty"),
		"gen":      lctl.Replay("gen", lctltest.Chain("gen", 3000, lctltest.Options{}), 0),
		"xct":      lctl.Replay("x", xctChain(t), 0),
		"spec":     lctl.Replay("spec", specEvents(t), 0),
		"workflow": lctl.Replay("w", lctltest.Workflow("w", 5000, lctltest.WorkflowOptions{}), 0),
	}
	summary := lctl.NewSummaryState("w")
	for _, e := range lctltest.Workflow("w", 700, lctltest.WorkflowOptions{}) {
		summary.Apply(&e)
	}
	states["summary"] = summary
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		states["random"+string(rune('A'+seed%26))+string(rune('0'+seed/26))] = lctl.Replay("r\u00e9", randomChain(rng, 1+rng.IntN(120)), 0)
	}
	for name, s := range states {
		got := hashV2(t, s.Clone())
		if want := refHashV2(t, s); got != want {
			t.Errorf("%s: hash %s, definition %s", name, got, want)
		}
		if lctl.StateHashVersion(got) != 2 || !lctl.IsStateHash(got) {
			t.Errorf("%s: %q is not a version 2 state hash", name, got)
		}
		if v1, _ := s.HashV1(); v1 == got || lctl.StateHashVersion(v1) != 1 {
			t.Errorf("%s: version 1 hash %q", name, v1)
		}
	}
}

// TestStateHashV2Incremental: a state hashed again and again while events
// are applied keeps its hasher up to date; each hash equals the one the
// definition gives from scratch. At every checkpoint of a generated
// workflow (steps revisited by verdicts and tool calls, facts revised) and
// at irregular points of random chains (steps and facts touched in any
// order, fact ids added out of seq order).
func TestStateHashV2Incremental(t *testing.T) {
	// Each hash is checked against one from scratch, so the cost grows
	// with the square of a chain's length. Under the race detector (one
	// goroutine: it finds nothing here) a third of the workflow, with
	// checkpoints as many, and a quarter of the random chains (every
	// fourth still applied out of order).
	n, every, seeds := 3000, 75, uint64(40)
	if lctl.RaceDetector {
		n, every, seeds = 1000, 25, 10
	}
	chains := map[string][]lctl.Event{
		"workflow": lctltest.Workflow("w", n, lctltest.WorkflowOptions{CheckpointEvery: every}),
		"xct":      xctChain(t),
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		events := randomChain(rng, 50+rng.IntN(400))
		if seed%4 == 0 {
			// Applied out of seq order: a fact first seen later in the
			// file can sort before the ones hashed already.
			rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		}
		chains["random"+string(rune('A'+seed%26))+string(rune('0'+seed/26))] = events
	}
	for name, events := range chains {
		rng := rand.New(rand.NewPCG(uint64(len(events)), 3))
		s := lctl.NewState("c")
		hashes, checkpoints := 0, 0
		for i := range events {
			at := events[i].Type == lctl.TypeCheckpoint
			if at || rng.IntN(9) == 0 || i == len(events)-1 || len(events) < 100 {
				if got, want := hashV2(t, s), refHashV2(t, s); got != want {
					t.Fatalf("%s: before event %d (hash %d): kept %s, definition %s", name, i+1, hashes, got, want)
				}
				hashes++
				if at {
					checkpoints++
				}
			}
			s.Apply(&events[i])
		}
		if hashes < 5 || name == "workflow" && checkpoints < 30 {
			t.Errorf("%s: only %d hashes, %d at checkpoints", name, hashes, checkpoints)
		}
	}
}

// TestStateHashV2OutOfOrderFact: a fact whose first event has a lower seq
// than facts hashed before it (a file applied out of order) takes its
// place in the order; the kept hash is still the definition's.
func TestStateHashV2OutOfOrderFact(t *testing.T) {
	s := lctl.NewState("c")
	add := func(seq uint64, id, text string) {
		s.Apply(&lctl.Event{Seq: seq, Type: lctl.TypeFactAdded, Agent: "a", Data: map[string]any{"id": id, "text": text, "confidence": 0.5}})
	}
	add(10, "F10", "ten")
	add(20, "F20", "twenty")
	first := hashV2(t, s)
	add(5, "F5", "five")
	if got, want := hashV2(t, s), refHashV2(t, s); got != want || got == first {
		t.Fatalf("after an earlier fact: kept %s, definition %s (before %s)", got, want, first)
	}
	add(30, "F10", "ten again")
	if got, want := hashV2(t, s), refHashV2(t, s); got != want {
		t.Fatalf("after a re-add: kept %s, definition %s", got, want)
	}
}

// TestStateHashV2Detects: the hash changes with a fact's text or source, a
// step's verdict, a step revisited, and two events swapped (seqs
// renumbered), and not when the same events are applied again.
func TestStateHashV2Detects(t *testing.T) {
	base := lctltest.Workflow("w", 900, lctltest.WorkflowOptions{})
	want := hashV2(t, lctl.Replay("w", base, 0))
	if again := hashV2(t, lctl.Replay("w", base, 0)); again != want {
		t.Fatalf("same events, hashes %s and %s", want, again)
	}
	find := func(events []lctl.Event, typ string, from int) int {
		for i := from; i < len(events); i++ {
			if events[i].Type == typ {
				return i
			}
		}
		t.Fatalf("no %s after %d", typ, from)
		return 0
	}
	edit := func(events []lctl.Event, i int, k string, v any) {
		d := map[string]any{}
		for kk, vv := range events[i].Data {
			d[kk] = vv
		}
		d[k] = v
		events[i].Data = d
	}
	// Each mutation returns the index of the last event it changed; the
	// state just after it must hash differently.
	tests := map[string]func([]lctl.Event) int{
		"fact text": func(e []lctl.Event) int {
			i := find(e, lctl.TypeFactAdded, 100)
			edit(e, i, "text", "something else")
			return i
		},
		"fact source": func(e []lctl.Event) int {
			i := find(e, lctl.TypeFactAdded, 100)
			edit(e, i, "source", "elsewhere")
			return i
		},
		"fact reason": func(e []lctl.Event) int {
			i := find(e, lctl.TypeFactModified, 100)
			edit(e, i, "reason", "no reason")
			return i
		},
		"verdict": func(e []lctl.Event) int {
			i := find(e, lctl.TypeVerdict, 50)
			edit(e, i, "decision", "deny")
			return i
		},
		"step outcome": func(e []lctl.Event) int {
			i := find(e, lctl.TypeStepEnd, 50)
			edit(e, i, "outcome", "error")
			return i
		},
		"early step": func(e []lctl.Event) int {
			i := find(e, lctl.TypeVerdict, 800)
			edit(e, i, "step", 2.0)
			return i
		},
		"tool duration": func(e []lctl.Event) int {
			i := find(e, lctl.TypeToolCall, 300)
			edit(e, i, "duration_ms", 1.0)
			return i
		},
		"swapped": func(e []lctl.Event) int {
			i := find(e, lctl.TypeToolCall, 400)
			e[i], e[i+1] = e[i+1], e[i]
			e[i].Seq, e[i+1].Seq = e[i+1].Seq, e[i].Seq
			return i + 1
		},
	}
	for name, mutate := range tests {
		events := slices.Clone(base)
		i := mutate(events)
		if got, was := hashV2(t, lctl.Replay("w", events[:i+1], 0)), hashV2(t, lctl.Replay("w", base[:i+1], 0)); got == was {
			t.Errorf("%s: the hash did not change", name)
		}
	}
}

func TestStateHashVersion(t *testing.T) {
	hexd := strings.Repeat("0123456789abcdef", 4)
	for h, want := range map[string]int{
		"sha256:" + hexd:                  1,
		"v2:sha256:" + hexd:               2,
		"sha256:" + hexd[:63]:             0,
		"v2:sha256:" + hexd + "0":         0,
		"V2:sha256:" + hexd:               0,
		"v3:sha256:" + hexd:               0,
		"sha256:" + strings.ToUpper(hexd): 0,
		"abc123":                          0,
		"":                                0,
	} {
		if got := lctl.StateHashVersion(h); got != want {
			t.Errorf("StateHashVersion(%q) = %d, want %d", h, got, want)
		}
	}
	if _, err := lctl.NewState("c").HashVersion(3); err == nil {
		t.Error("HashVersion(3) did not fail")
	}
}

// TestStateHashV2Vector is the example of docs/lctl.md ("State hash,
// version 2"): the digest form of a state after two events, and its hash.
func TestStateHashV2Vector(t *testing.T) {
	s := lctl.NewState("c")
	s.Apply(&lctl.Event{Seq: 1, Type: "step_start", Agent: "a", Data: map[string]any{"step": 1.0, "tool": "fs.read"}})
	s.Apply(&lctl.Event{Seq: 2, Type: "fact_added", Agent: "a", Data: map[string]any{"id": "F1", "text": "t", "confidence": 0.5}})
	zero := strings.Repeat("0", 64)
	want := `{"agents":{"n":1,"sha256":"88eddaf7c34e551cb487eadeab12f450093102c8e250cf037a2bfb74ed84a1a8"},"chain_id":"c",` +
		`"contract_validations":{"n":0,"sha256":"` + zero + `"},"current_step":{"agent":"a","intent":"","seq":1,"step":1,"tool":"fs.read"},` +
		`"duration_ms":0,"errors":{"n":0,"sha256":"` + zero + `"},"event_count":2,"event_types":{"fact_added":1,"step_start":1},` +
		`"facts":{"merkle":"8a3b703a3c5facda1094d9bfd9566c16f64bf4a176912c57fa04b2cab6494585","n":1},"last_checkpoint_seq":0,"last_timestamp":"",` +
		`"model_routings":{"n":0,"sha256":"` + zero + `"},"run":null,"seq":2,"state_hash_version":2,` +
		`"steps":{"merkle":"6b072948b64316c3ed8f0788c5e45d7cc78e338124eb174834ca253a20c014e2","n":1},` +
		`"stream":{"active":false,"chunks":0,"duration_ms":0,"reported_chunks":0,"reported_tokens":0,"streams":0,"tokens":0},` +
		`"tokens":{"input":0,"output":0},"tool_calls":{"n":0,"sha256":"` + zero + `"},"unknown_types":{"n":0,"sha256":"` + zero + `"}}`
	got, err := lctl.DigestForm(s)
	if err != nil || string(got) != want {
		t.Fatalf("digest form (%v):\n%s\nwant\n%s", err, got, want)
	}
	// The pieces, from their definitions.
	agents := sha256.Sum256(append(make([]byte, 32), `"a"`...))
	step := sha256.Sum256([]byte("\x00" + `{"decision":"","outcome":"","start_seq":1,"step":1,"step_id":"","tool":"fs.read"}`))
	hist := sha256.Sum256(append(make([]byte, 32), `{"agent":"a","confidence":0.5,"reason":"","seq":2,"text":"t"}`...))
	fact := sha256.Sum256([]byte("\x00" + `{"confidence":0.5,"history":{"n":1,"sha256":"` + hex.EncodeToString(hist[:]) + `"},"id":"F1","source":"","text":"t"}`))
	for name, d := range map[string][32]byte{"88eddaf7": agents, "6b072948": step, "8a3b703a": fact} {
		if !strings.HasPrefix(hex.EncodeToString(d[:]), name) {
			t.Errorf("%s: computed %x", name, d)
		}
	}
	if h := hashV2(t, s); h != "v2:sha256:2cb4b1e2a750c59520894173ac9e186f0981f82c4a428a9e28dd0b00177b6f63" {
		t.Errorf("hash %s", h)
	}
	if h := hashV2(t, lctl.NewState("c")); h != "v2:sha256:bd676469bde786a04d81c1f8c636a4dc19b75694bf313f8ace05cb9fe73ee299" {
		t.Errorf("empty state: hash %s", h)
	}
}

// TestStateHashV2LongGap: a state hashed once, then changed at many more
// places than it holds steps and facts before the next hash (the hasher
// stops recording and rebuilds those trees), still gives the definition's
// hash.
func TestStateHashV2LongGap(t *testing.T) {
	s := lctl.NewState("c")
	seq := uint64(0)
	apply := func(typ string, data map[string]any) {
		seq++
		s.Apply(&lctl.Event{Seq: seq, Type: typ, Agent: "a", Data: data})
	}
	for i := 1; i <= 100; i++ {
		apply(lctl.TypeStepStart, map[string]any{"step": float64(i), "tool": "t"})
		apply(lctl.TypeFactAdded, map[string]any{"id": fmt.Sprintf("F%d", i%10), "text": "x", "confidence": 0.5})
	}
	hashV2(t, s)
	for k := 0; k < 3; k++ {
		for i := 1; i <= 100; i++ {
			apply(lctl.TypeVerdict, map[string]any{"step": float64(i), "decision": fmt.Sprintf("d%d", k)})
			apply(lctl.TypeFactModified, map[string]any{"id": fmt.Sprintf("F%d", i%10), "text": fmt.Sprintf("y%d", i)})
		}
	}
	if got, want := hashV2(t, s), refHashV2(t, s); got != want {
		t.Fatalf("kept %s, definition %s", got, want)
	}
	apply(lctl.TypeVerdict, map[string]any{"step": 7.0, "decision": "deny"})
	if got, want := hashV2(t, s), refHashV2(t, s); got != want {
		t.Fatalf("after the rebuild: kept %s, definition %s", got, want)
	}
}
