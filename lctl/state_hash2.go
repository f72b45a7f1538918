package lctl

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
)

// The state hash, version 2 (docs/lctl.md, "State hash, version 2").
//
// Version 1 (HashV1) is SHA-256 over the whole state's canonical JSON. The
// state grows with the chain, so a checkpoint every N events makes writing
// and verifying a chain quadratic. Version 2 hashes a small digest form of
// the state instead: the same JSON object, except that each list that only
// grows is replaced by a running hash over its elements, the steps and the
// facts (which change in place) by the root of a Merkle tree over them, and
// a fact's history by a running hash. Each of these can be brought up to
// date in time proportional to what changed since the last hash, so a hash
// at every checkpoint costs time linear in the chain.

// StateHashV2Prefix starts a state hash of version 2: "v2:sha256:" and 64
// hex digits.
const StateHashV2Prefix = "v2:sha256:"

// StateHashVersion returns the version of a state hash: 1 for "sha256:"
// and 64 lowercase hex digits (HashV1), 2 for "v2:sha256:" and 64 (Hash),
// 0 for anything else (another implementation's hash of its own state).
func StateHashVersion(h string) int {
	switch {
	case len(h) == len(StateHashPrefix)+64 && h[:len(StateHashPrefix)] == StateHashPrefix && isLowerHex(h[len(StateHashPrefix):]):
		return 1
	case len(h) == len(StateHashV2Prefix)+64 && h[:len(StateHashV2Prefix)] == StateHashV2Prefix && isLowerHex(h[len(StateHashV2Prefix):]):
		return 2
	}
	return 0
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HashVersion returns the state's hash in the given version (1: HashV1, 2:
// Hash).
func (s *State) HashVersion(v int) (string, error) {
	switch v {
	case 1:
		return s.HashV1()
	case 2:
		return s.Hash()
	}
	return "", fmt.Errorf("hash state: no state hash version %d", v)
}

// Hash identifies the state: the state hash of version 2, "v2:sha256:" and
// the hex SHA-256 of the state's digest form (docs/lctl.md). Two replays
// of the same events give the same hash. The state keeps what the hash
// needs (running hashes, the trees of steps and facts) from the first call
// on and brings it up to date at the next, in time proportional to what
// the events applied in between changed; a state never hashed pays
// nothing for it. It assumes the state changes only through Apply, as
// every State does; copies (Clone) start afresh. Hash writes what the
// state keeps, so, like Apply, it is not to be called on one state from
// two goroutines at once.
func (s *State) Hash() (string, error) {
	if s.countCalls || s.factsOnly || s.noHistory || s.noCurrent || s.noFactText {
		return "", fmt.Errorf("hash state: %w", errPartialState)
	}
	if s.hc == nil {
		s.hc = &hashCache{}
	}
	if s.hc.v2 == nil {
		s.hc.v2 = &stateHasher{}
	}
	sum, err := s.hc.v2.hash(s)
	if err != nil {
		return "", fmt.Errorf("hash state: %w", err)
	}
	return StateHashV2Prefix + hex.EncodeToString(sum[:]), nil
}

// The append-only lists, each hashed as a running hash.
const (
	runAgents = iota
	runContracts
	runErrors
	runRoutings
	runToolCalls
	runUnknown
	numRunLists
)

// stateHasher keeps the parts of the version 2 hash that are costly to
// recompute.
type stateHasher struct {
	lists [numRunLists]runHash
	steps merkleTree
	// dirtySteps are indexes of Steps changed in place since the last
	// hash (repeats allowed); indexes at or past the tree's size are
	// appends, which the tree takes anyway.
	dirtySteps []int
	// allSteps: more steps were marked than the tree holds (a state
	// hashed once, then applied on for long): every leaf is recomputed
	// at the next hash instead, and nothing more is recorded.
	allSteps bool
	facts    factTree
	w        canonWriter // scratch
	dirty    []int       // scratch
}

func (h *stateHasher) touchStep(i int) {
	if n := len(h.dirtySteps); h.allSteps || i >= h.steps.size() || n > 0 && h.dirtySteps[n-1] == i {
		return
	}
	h.dirtySteps = append(h.dirtySteps, i)
	if len(h.dirtySteps) > h.steps.size()+64 {
		h.allSteps, h.dirtySteps = true, h.dirtySteps[:0]
	}
}

func (h *stateHasher) touchFact(id string) {
	ft := &h.facts
	if n := len(ft.dirty); !ft.built || n > 0 && ft.dirty[n-1] == id {
		return
	}
	ft.dirty = append(ft.dirty, id)
	if len(ft.dirty) > len(ft.ids)+64 {
		// As for steps: the next hash rebuilds the facts' tree.
		ft.built, ft.dirty = false, ft.dirty[:0]
	}
}

// runHash is the running hash of a list's first n elements: r(0) is 32
// zero bytes, r(i) = SHA-256(r(i-1) || C(element i)).
type runHash struct {
	n   int
	sum [32]byte
}

// foldList brings r up to date with l, which only ever grew since r was
// last brought up to date (else r starts again).
func foldList[T any](w *canonWriter, r *runHash, l []T, write func(*canonWriter, *T)) {
	if len(l) < r.n {
		*r = runHash{}
	}
	for i := r.n; i < len(l); i++ {
		w.buf.Reset()
		w.buf.Write(r.sum[:])
		w.comma = false
		write(w, &l[i])
		r.sum = sha256.Sum256(w.buf.Bytes())
	}
	r.n = len(l)
}

// listDigest writes a list's digest: {"n":N,"sha256":"hex"}, or null for a
// nil list (as version 1 writes it).
func (w *canonWriter) listDigest(r *runHash, isNil bool) {
	if isNil {
		w.null()
		return
	}
	w.open('{')
	w.key("n")
	w.int(int64(r.n))
	w.key("sha256")
	w.hexDigest(&r.sum)
	w.close('}')
}

func (w *canonWriter) hexDigest(d *[32]byte) {
	var x [66]byte
	x[0], x[65] = '"', '"'
	hex.Encode(x[1:65], d[:])
	w.buf.Write(x[:])
}

// merkleTree is RFC 6962's Merkle tree hash over a list: a leaf's hash is
// SHA-256(0x00 || C(element)), a node's SHA-256(0x01 || left || right);
// levels[j][i] is the root of the perfect subtree over leaves
// [i*2^j, (i+1)*2^j), for every such subtree that is complete.
type merkleTree struct {
	levels [][][32]byte
}

func (m *merkleTree) size() int {
	if len(m.levels) == 0 {
		return 0
	}
	return len(m.levels[0])
}

func (m *merkleTree) reset() {
	for j := range m.levels {
		m.levels[j] = m.levels[j][:0]
	}
}

// update makes the tree one of n leaves: the leaves at the indexes in dirty
// (sorted, unique, below the current size) and every leaf from the current
// size to n get leaf(i); the nodes above them are computed again.
func (m *merkleTree) update(n int, dirty []int, leaf func(i int) [32]byte) {
	if n < m.size() {
		m.reset()
		dirty = dirty[:0]
	}
	if len(m.levels) == 0 {
		m.levels = append(m.levels, nil)
	}
	old := m.size()
	l0 := slices.Grow(m.levels[0][:old], n-old)[:n]
	for _, i := range dirty {
		l0[i] = leaf(i)
	}
	for i := old; i < n; i++ {
		l0[i] = leaf(i)
	}
	m.levels[0] = l0
	// The indexes changed at the level below: dirty, then old..n-1.
	cur := slices.Grow(dirty, n-old)
	for i := old; i < n; i++ {
		cur = append(cur, i)
	}
	var node [65]byte
	node[0] = 1
	for j := 1; n>>j > 0; j++ {
		if len(m.levels) == j {
			m.levels = append(m.levels, nil)
		}
		below := m.levels[j-1]
		want := len(below) / 2
		lv := slices.Grow(m.levels[j], want-len(m.levels[j]))[:want]
		next := cur[:0]
		for _, i := range cur {
			p := i / 2
			if p >= want || len(next) > 0 && next[len(next)-1] == p {
				continue
			}
			next = append(next, p)
			copy(node[1:33], below[2*p][:])
			copy(node[33:], below[2*p+1][:])
			lv[p] = sha256.Sum256(node[:])
		}
		m.levels[j] = lv
		cur = next
	}
	for j := range m.levels {
		if n>>j == 0 {
			m.levels[j] = m.levels[j][:0]
		}
	}
}

// root is the tree's root: SHA-256 of nothing for no leaves; else the
// perfect subtrees of n's binary decomposition, largest first, folded from
// the right (RFC 6962, 2.1). The subtree of bit j of n covers the leaves
// from n with bits 0..j cleared: at level j it is number (n>>j)-1.
func (m *merkleTree) root() [32]byte {
	n := m.size()
	if n == 0 {
		return sha256.Sum256(nil)
	}
	var acc [32]byte
	var node [65]byte
	node[0] = 1
	first := true
	for j := range m.levels {
		if n&(1<<j) == 0 {
			continue
		}
		sub := m.levels[j][(n>>j)-1]
		if first {
			acc, first = sub, false
			continue
		}
		copy(node[1:33], sub[:])
		copy(node[33:], acc[:])
		acc = sha256.Sum256(node[:])
	}
	return acc
}

// leafHash is SHA-256(0x00 || b).
func leafHash(w *canonWriter, write func(*canonWriter)) [32]byte {
	w.buf.Reset()
	w.buf.WriteByte(0)
	w.comma = false
	write(w)
	return sha256.Sum256(w.buf.Bytes())
}

// factTree keeps the facts in their hashed order (by the seq of their
// history's first entry, then id) with a running hash of each history.
type factTree struct {
	tree  merkleTree
	ids   []string // by position
	pos   map[string]int
	hist  []runHash // by position
	dirty []string  // facts touched since the last hash (repeats allowed)
	built bool
}

// factFirstSeq is the seq of the fact's first history entry (0 for none);
// facts are hashed in the order of it, then of their ids.
func factFirstSeq(f *Fact) uint64 {
	if f == nil || len(f.History) == 0 {
		return 0
	}
	return f.History[0].Seq
}

func compareFacts(s *State, a, b string) int {
	if c := cmp.Compare(factFirstSeq(s.Facts[a]), factFirstSeq(s.Facts[b])); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// update brings the fact tree up to date with s.Facts.
func (ft *factTree) update(h *stateHasher, s *State) {
	rebuild := !ft.built
	var added []string
	dirty := h.dirty[:0]
	if !rebuild {
		for _, id := range ft.dirty {
			if _, ok := s.Facts[id]; !ok {
				rebuild = true // a fact removed: not something Apply does
				break
			}
			if p, ok := ft.pos[id]; ok {
				dirty = append(dirty, p)
			} else {
				added = append(added, id) // repeats removed below
			}
		}
	}
	if !rebuild && len(added) > 0 {
		slices.SortFunc(added, func(a, b string) int { return compareFacts(s, a, b) })
		added = slices.Compact(added)
		if n := len(ft.ids); n > 0 && compareFacts(s, added[0], ft.ids[n-1]) < 0 {
			rebuild = true // a fact that sorts before one hashed already
		}
	}
	if !rebuild && len(ft.ids)+len(added) != len(s.Facts) {
		rebuild = true
	}
	ft.dirty = ft.dirty[:0]
	if rebuild {
		ft.ids = ft.ids[:0]
		for id := range s.Facts {
			ft.ids = append(ft.ids, id)
		}
		slices.SortFunc(ft.ids, func(a, b string) int { return compareFacts(s, a, b) })
		ft.pos = make(map[string]int, len(ft.ids))
		for i, id := range ft.ids {
			ft.pos[id] = i
		}
		ft.hist = make([]runHash, len(ft.ids))
		ft.tree.reset()
		dirty = dirty[:0]
		ft.built = true
	} else {
		for _, id := range added {
			ft.pos[id] = len(ft.ids)
			ft.ids = append(ft.ids, id)
			ft.hist = append(ft.hist, runHash{})
		}
		slices.Sort(dirty)
		dirty = slices.Compact(dirty)
	}
	w := &h.w
	ft.tree.update(len(ft.ids), dirty, func(i int) [32]byte {
		id := ft.ids[i]
		f := s.Facts[id]
		if f != nil {
			foldList(w, &ft.hist[i], f.History, (*canonWriter).factChange)
		}
		return leafHash(w, func(w *canonWriter) { w.factLeaf(id, f, &ft.hist[i]) })
	})
	h.dirty = dirty
}

// factLeaf is a fact's leaf: the fact's members as version 1 writes them,
// its id, and its history's digest instead of the history.
func (w *canonWriter) factLeaf(id string, f *Fact, hist *runHash) {
	w.open('{')
	if f != nil {
		w.key("confidence")
		w.optFloat(f.Confidence)
		w.key("history")
		w.listDigest(hist, f.History == nil)
	}
	w.key("id")
	w.str(id)
	if f != nil {
		w.key("source")
		w.str(f.Source)
		if len(f.Tags) > 0 {
			w.key("tags")
			w.strings(f.Tags)
		}
		w.key("text")
		w.str(f.Text)
	}
	w.close('}')
}

// hash brings everything up to date with s and returns the SHA-256 of the
// digest form.
func (h *stateHasher) hash(s *State) ([32]byte, error) {
	w := &h.w
	w.err = nil
	w.h = nil
	foldList(w, &h.lists[runAgents], s.Agents, func(w *canonWriter, a *string) { w.str(*a) })
	foldList(w, &h.lists[runContracts], s.ContractValidations, (*canonWriter).contractValidation)
	foldList(w, &h.lists[runErrors], s.Errors, (*canonWriter).errorRecord)
	foldList(w, &h.lists[runRoutings], s.ModelRoutings, (*canonWriter).modelRouting)
	foldList(w, &h.lists[runToolCalls], s.ToolCalls, (*canonWriter).toolCall)
	unknown := s.hashedUnknown()
	foldList(w, &h.lists[runUnknown], unknown, func(w *canonWriter, seq *uint64) { w.uint(*seq) })

	// Steps: the ones changed in place, then the new ones.
	dirty := h.dirty[:0]
	for _, i := range h.dirtySteps {
		if i < h.steps.size() && i < len(s.Steps) {
			dirty = append(dirty, i)
		}
	}
	h.dirtySteps = h.dirtySteps[:0]
	if h.allSteps {
		h.steps.reset()
		dirty, h.allSteps = dirty[:0], false
	}
	slices.Sort(dirty)
	dirty = slices.Compact(dirty)
	h.steps.update(len(s.Steps), dirty, func(i int) [32]byte {
		return leafHash(w, func(w *canonWriter) { w.step(&s.Steps[i]) })
	})
	h.dirty = dirty

	if s.Facts != nil {
		h.facts.update(h, s)
	}
	if w.err != nil {
		return [32]byte{}, w.err
	}

	// The digest form, in sorted key order.
	w.buf.Reset()
	w.comma = false
	w.open('{')
	w.key("agents")
	w.listDigest(&h.lists[runAgents], s.Agents == nil)
	w.key("chain_id")
	w.str(s.ChainID)
	w.key("contract_validations")
	w.listDigest(&h.lists[runContracts], s.ContractValidations == nil)
	w.key("current_step")
	w.currentStep(s.CurrentStep)
	w.key("duration_ms")
	w.num(s.DurationMS)
	w.key("errors")
	w.listDigest(&h.lists[runErrors], s.Errors == nil)
	w.key("event_count")
	w.int(int64(s.EventCount))
	w.key("event_types")
	w.eventTypes(s.EventTypes)
	w.key("facts")
	if s.Facts == nil {
		w.null()
	} else {
		w.treeDigest(&h.facts.tree)
	}
	if s.LastCheckpointHash != "" {
		w.key("last_checkpoint_hash")
		w.str(s.LastCheckpointHash)
	}
	w.key("last_checkpoint_seq")
	w.uint(s.LastCheckpointSeq)
	w.key("last_timestamp")
	w.str(s.LastTimestamp)
	w.key("model_routings")
	w.listDigest(&h.lists[runRoutings], s.ModelRoutings == nil)
	w.key("run")
	w.run(s.Run)
	w.key("seq")
	w.uint(s.Seq)
	w.key("state_hash_version")
	w.int(2)
	w.key("steps")
	if s.Steps == nil {
		w.null()
	} else {
		w.treeDigest(&h.steps)
	}
	w.key("stream")
	w.stream(&s.Stream)
	w.key("tokens")
	w.tokens(&s.Tokens)
	w.key("tool_calls")
	w.listDigest(&h.lists[runToolCalls], s.ToolCalls == nil)
	w.key("unknown_types")
	w.listDigest(&h.lists[runUnknown], unknown == nil)
	w.close('}')
	if w.err != nil {
		return [32]byte{}, w.err
	}
	return sha256.Sum256(w.buf.Bytes()), nil
}

// treeDigest writes a tree's digest: {"merkle":"hex","n":N}.
func (w *canonWriter) treeDigest(m *merkleTree) {
	root := m.root()
	w.open('{')
	w.key("merkle")
	w.hexDigest(&root)
	w.key("n")
	w.int(int64(m.size()))
	w.close('}')
}

// digestForm returns the digest form's canonical JSON (for tests).
func (s *State) digestForm() ([]byte, error) {
	h := &stateHasher{}
	if _, err := h.hash(s); err != nil {
		return nil, err
	}
	return append([]byte(nil), h.w.buf.Bytes()...), nil
}
