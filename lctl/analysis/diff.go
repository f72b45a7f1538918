package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
)

// DefaultDiffIgnore returns the data fields Diff ignores unless told
// otherwise: what differs between any two runs without the runs diverging
// (timings, ids derived from the run id, hashes of states that contain
// timings).
func DefaultDiffIgnore() []string {
	return []string{"duration_ms", "elapsed_ms", "evaluated_at", "run_id", "step_id", "state_hash", "started_at", "finished_at", "timestamp"}
}

// DiffOptions tune Diff.
type DiffOptions struct {
	// Ignore names data fields left out of the comparison, at any depth.
	// nil means DefaultDiffIgnore(); an empty slice compares everything.
	Ignore []string
	// MaxEdits bounds the alignment's work: past it, the rest of the two
	// chains is compared position by position (0 means 2000).
	MaxEdits int
}

// Chain is a chain to compare: its id and events, and a label for output
// ("v1", "v2").
type Chain struct {
	Label  string
	ID     string
	Events []lctl.Event
}

// DiffReport is what Diff found.
type DiffReport struct {
	V1        ChainInfo `json:"v1"`
	V2        ChainInfo `json:"v2"`
	Identical bool      `json:"identical"`
	// First is the first difference, where the runs diverged.
	First *Difference `json:"first,omitempty"`
	// Differences lists every difference in chain order.
	Differences []Difference `json:"differences"`
	// Counts of each kind of difference.
	Changed int `json:"changed"`
	Added   int `json:"added"`
	Removed int `json:"removed"`
	// Ignored are the data fields left out of the comparison.
	Ignored []string `json:"ignored"`
	// Aligned is false when the chains were too different to align within
	// MaxEdits and the rest was compared by position.
	Aligned bool `json:"aligned"`
}

// ChainInfo names a compared chain.
type ChainInfo struct {
	Label  string `json:"label"`
	ID     string `json:"chain_id"`
	Events int    `json:"events"`
}

// Difference kinds.
const (
	DiffChanged = "changed" // aligned events whose data differ
	DiffAdded   = "added"   // an event only v2 has
	DiffRemoved = "removed" // an event only v1 has
)

// Difference is one place where the chains differ.
type Difference struct {
	Kind string    `json:"kind"`
	V1   *EventRef `json:"v1,omitempty"`
	V2   *EventRef `json:"v2,omitempty"`
	// Fields are the data fields that differ (changed only).
	Fields []FieldChange `json:"fields,omitempty"`
}

// EventRef points at an event of a compared chain.
type EventRef struct {
	Seq      uint64 `json:"seq"`
	Position int    `json:"position"`
	Agent    string `json:"agent"`
	Type     string `json:"type"`
	Subject  string `json:"subject,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// FieldChange is one data field that differs between aligned events.
// Absent values are null.
type FieldChange struct {
	Path string `json:"path"`
	V1   any    `json:"v1"`
	V2   any    `json:"v2"`
}

// Diff aligns two chains by what happened rather than by row: a sequence
// alignment (Myers' diff) over each event's (agent, type, subject) key,
// where the subject is the tool, fact id or contract the event is about. An
// event inserted into one run shows as one added event, not as every later
// event being different. Aligned events are then compared on their data.
// Adjacent removed and added events of the same agent and type are reported
// as one changed event.
func Diff(a, b Chain, opts DiffOptions) *DiffReport {
	r, _ := DiffContext(context.Background(), a, b, opts) // never ends early
	return r
}

// diffCheckEvery is how many aligned events a diff compares between two
// looks at its context (the alignment looks at every edit distance).
const diffCheckEvery = 256

// DiffContext is Diff, stopped when ctx ends (a reader that went away):
// it looks at ctx once per edit distance of the alignment (each a pass
// over at most 2·MaxEdits diagonals) and every diffCheckEvery aligned
// events compared, and returns ctx's error and no report.
func DiffContext(ctx context.Context, a, b Chain, opts DiffOptions) (*DiffReport, error) {
	ignore := opts.Ignore
	if ignore == nil {
		ignore = DefaultDiffIgnore()
	}
	maxEdits := opts.MaxEdits
	if maxEdits <= 0 {
		maxEdits = 2000
	}
	r := &DiffReport{
		V1:          ChainInfo{Label: a.Label, ID: a.ID, Events: len(a.Events)},
		V2:          ChainInfo{Label: b.Label, ID: b.ID, Events: len(b.Events)},
		Differences: []Difference{},
		Ignored:     append([]string{}, ignore...),
		Aligned:     true,
	}
	skip := make(map[string]bool, len(ignore))
	for _, f := range ignore {
		skip[f] = true
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ka, kb := keys(a.Events), keys(b.Events)
	ops, aligned, err := align(ctx, ka, kb, maxEdits)
	if err != nil {
		return nil, err
	}
	r.Aligned = aligned

	for i, next := 0, diffCheckEvery; i < len(ops); {
		if i >= next {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			next = i + diffCheckEvery
		}
		op := ops[i]
		if op.kind == opMatch {
			if fields := compareData(a.Events[op.i].Data, b.Events[op.j].Data, skip); len(fields) > 0 {
				r.add(Difference{Kind: DiffChanged, V1: ref(a.Events, op.i), V2: ref(b.Events, op.j), Fields: fields})
			}
			i++
			continue
		}
		// A run of removals and additions between two matches: pair the
		// ones of the same agent and type as changes, in order.
		j := i
		var dels, ins []int
		for j < len(ops) && ops[j].kind != opMatch {
			if ops[j].kind == opDelete {
				dels = append(dels, ops[j].i)
			} else {
				ins = append(ins, ops[j].j)
			}
			j++
		}
		r.addRun(a.Events, b.Events, dels, ins, skip)
		i = j
	}
	r.Identical = len(r.Differences) == 0
	if !r.Identical {
		first := r.Differences[0]
		r.First = &first
	}
	return r, nil
}

func (r *DiffReport) add(d Difference) {
	r.Differences = append(r.Differences, d)
	switch d.Kind {
	case DiffChanged:
		r.Changed++
	case DiffAdded:
		r.Added++
	case DiffRemoved:
		r.Removed++
	}
}

// addRun reports a block of removed and added events between two matches,
// pairing each removed event with the next added one of the same agent and
// type as a change. The block is reported in chain order.
func (r *DiffReport) addRun(ea, eb []lctl.Event, dels, ins []int, skip map[string]bool) {
	var block []Difference
	used := make([]bool, len(ins))
	next := 0
	for _, di := range dels {
		da := &ea[di]
		pair := -1
		for k := next; k < len(ins); k++ {
			if eb[ins[k]].Agent == da.Agent && eb[ins[k]].Type == da.Type {
				pair = k
				break
			}
		}
		if pair < 0 {
			block = append(block, Difference{Kind: DiffRemoved, V1: ref(ea, di)})
			continue
		}
		used[pair] = true
		next = pair + 1
		fields := append(subjectChange(da, &eb[ins[pair]]), compareData(da.Data, eb[ins[pair]].Data, skip)...)
		block = append(block, Difference{Kind: DiffChanged, V1: ref(ea, di), V2: ref(eb, ins[pair]), Fields: fields})
	}
	for k, j := range ins {
		if !used[k] {
			block = append(block, Difference{Kind: DiffAdded, V2: ref(eb, j)})
		}
	}
	// Offsets from the start of the block in each chain order the block;
	// at the same offset a removal or change comes before an addition.
	offset := func(d Difference) (int, int) {
		if d.V1 != nil {
			return d.V1.Position - 1 - dels[0], 0
		}
		return d.V2.Position - 1 - ins[0], 1
	}
	slices.SortStableFunc(block, func(x, y Difference) int {
		ox, tx := offset(x)
		oy, ty := offset(y)
		if ox != oy {
			return ox - oy
		}
		return tx - ty
	})
	for _, d := range block {
		r.add(d)
	}
}

// subjectChange reports a change of subject (tool, fact id) between paired
// events.
func subjectChange(a, b *lctl.Event) []FieldChange {
	sa, sb := subjectKey(a), subjectKey(b)
	if sa == sb {
		return nil
	}
	return []FieldChange{{Path: subjectField(a), V1: sa, V2: sb}}
}

func ref(events []lctl.Event, i int) *EventRef {
	e := &events[i]
	subject, detail := Summarize(e)
	return &EventRef{Seq: e.Seq, Position: i + 1, Agent: e.Agent, Type: e.Type, Subject: subject, Detail: detail}
}

// key is what alignment matches events on.
type key struct{ agent, typ, subject string }

func keys(events []lctl.Event) []key {
	out := make([]key, len(events))
	for i := range events {
		out[i] = key{events[i].Agent, events[i].Type, subjectKey(&events[i])}
	}
	return out
}

// subjectKey is what an event is about, for alignment: the tool of a step,
// tool call or verdict, the id of a fact, the contract and direction of a
// contract check.
func subjectKey(e *lctl.Event) string {
	d := e.Data
	s := func(k string) string { v, _ := d[k].(string); return v }
	switch e.Type {
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return s("id")
	case lctl.TypeContractValidation:
		return s("contract") + "/" + s("direction")
	}
	return s("tool")
}

func subjectField(e *lctl.Event) string {
	switch e.Type {
	case lctl.TypeFactAdded, lctl.TypeFactModified:
		return "id"
	case lctl.TypeContractValidation:
		return "contract"
	}
	return "tool"
}

// compareData returns the fields that differ, by path, in sorted order.
func compareData(a, b map[string]any, skip map[string]bool) []FieldChange {
	c := fieldComparer{skip: skip}
	c.value(a, b)
	return c.out
}

// maxFieldChanges bounds the field changes reported for one event.
const maxFieldChanges = 50

// maxFieldPath bounds a reported change's path (cut in the middle).
const maxFieldPath = 512

// fieldComparer walks two events' data side by side. The path to where it
// is, is the steps to it, made into a string only for a change reported:
// made for every member walked, each level's kept while the levels below
// were walked, it cost the data's depth times its keys' length for every
// leaf (a model's 80 KiB of arguments nested under long keys made one
// DiffChains allocate 150 MB, session 16).
type fieldComparer struct {
	skip  map[string]bool
	steps []string // ".key" or "[i]", the first without its dot
	out   []FieldChange
}

func (c *fieldComparer) full() bool { return len(c.out) >= maxFieldChanges }

func (c *fieldComparer) path() string {
	n := 0
	for _, s := range c.steps {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(min(n, maxFieldPath+8))
	if n <= maxFieldPath {
		for _, s := range c.steps {
			b.WriteString(s)
		}
		return b.String()
	}
	// The start and the end, an ellipsis between.
	var all strings.Builder
	all.Grow(n)
	for _, s := range c.steps {
		all.WriteString(s)
	}
	p := all.String()
	end := len(p) - maxFieldPath/2
	for end < len(p) && !utf8.RuneStart(p[end]) {
		end++
	}
	return text.Truncate(p, maxFieldPath/2) + p[end:]
}

func (c *fieldComparer) value(a, b any) {
	if c.full() {
		return
	}
	ma, aIsMap := asMap(a)
	mb, bIsMap := asMap(b)
	if aIsMap && bIsMap {
		keys := make([]string, 0, len(ma)+len(mb))
		for k := range ma {
			keys = append(keys, k)
		}
		for k := range mb {
			if _, ok := ma[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if c.full() {
				return
			}
			if c.skip[k] {
				continue
			}
			step := k
			if len(c.steps) > 0 {
				step = "." + k
			}
			c.steps = append(c.steps, step)
			c.value(ma[k], mb[k])
			c.steps = c.steps[:len(c.steps)-1]
		}
		return
	}
	la, aIsList := a.([]any)
	lb, bIsList := b.([]any)
	if aIsList && bIsList && len(la) == len(lb) {
		for i := range la {
			if c.full() {
				return
			}
			c.steps = append(c.steps, "["+strconv.Itoa(i)+"]")
			c.value(la[i], lb[i])
			c.steps = c.steps[:len(c.steps)-1]
		}
		return
	}
	if !sameValue(a, b) {
		c.out = append(c.out, FieldChange{Path: c.path(), V1: a, V2: b})
	}
}

func asMap(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if ok && m == nil {
		return map[string]any{}, true
	}
	return m, ok
}

func sameValue(a, b any) bool {
	fa, aNum := numberOf(a)
	fb, bNum := numberOf(b)
	if aNum && bNum {
		return fa == fb || math.Abs(fa-fb) <= 1e-12*math.Max(math.Abs(fa), math.Abs(fb))
	}
	ca, errA := lctl.Canonical(a)
	cb, errB := lctl.Canonical(b)
	if errA != nil || errB != nil {
		return fmt.Sprint(a) == fmt.Sprint(b)
	}
	return string(ca) == string(cb)
}

// FieldValue renders a compared value on one line for text output.
func FieldValue(v any) string {
	if v == nil {
		return "(absent)"
	}
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", clip(oneLine(s), 50))
	}
	return compact(v, 50)
}

// Describe renders a difference's field changes: "confidence: 0.7 → 0.85".
func (d Difference) Describe(max int) string {
	var parts []string
	for i, f := range d.Fields {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(d.Fields)-max))
			break
		}
		parts = append(parts, fmt.Sprintf("%s: %s → %s", f.Path, FieldValue(f.V1), FieldValue(f.V2)))
	}
	return strings.Join(parts, "; ")
}

// Alignment.

type opKind uint8

const (
	opMatch opKind = iota
	opDelete
	opInsert
)

// op is one step of an edit script: a match of a[i] and b[j], the deletion
// of a[i] or the insertion of b[j].
type op struct {
	kind opKind
	i, j int
}

// align returns an edit script turning a into b with the fewest insertions
// and deletions (Myers, "An O(ND) Difference Algorithm"), after taking off
// the common prefix and suffix. When more than maxEdits edits would be
// needed, the middle is matched position by position and aligned is false.
func align(ctx context.Context, a, b []key, maxEdits int) (ops []op, aligned bool, err error) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops = make([]op, 0, max(len(a), len(b))+8)
	for i := 0; i < pre; i++ {
		ops = append(ops, op{opMatch, i, i})
	}
	mid, aligned, err := myers(ctx, a[pre:len(a)-suf], b[pre:len(b)-suf], maxEdits)
	if err != nil {
		return nil, false, err
	}
	for _, o := range mid {
		o.i += pre
		o.j += pre
		ops = append(ops, o)
	}
	for k := 0; k < suf; k++ {
		ops = append(ops, op{opMatch, len(a) - suf + k, len(b) - suf + k})
	}
	return ops, aligned, nil
}

func myers(ctx context.Context, a, b []key, maxEdits int) ([]op, bool, error) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		out := make([]op, 0, n+m)
		for i := range n {
			out = append(out, op{opDelete, i, 0})
		}
		for j := range m {
			out = append(out, op{opInsert, 0, j})
		}
		return out, true, nil
	}
	limit := min(n+m, maxEdits)
	offset := limit + 1
	v := make([]int, 2*limit+3)
	// trace[d] holds v[-d..d] after step d.
	var trace [][]int
	for d := 0; d <= limit; d++ {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[offset+k-1] < v[offset+k+1]) {
				x = v[offset+k+1]
			} else {
				x = v[offset+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[offset+k] = x
			if x >= n && y >= m {
				trace = append(trace, slices.Clone(v[offset-d:offset+d+1]))
				return backtrack(trace, n, m), true, nil
			}
		}
		trace = append(trace, slices.Clone(v[offset-d:offset+d+1]))
	}
	// Too far apart: compare position by position.
	out := make([]op, 0, max(n, m))
	for i := 0; i < max(n, m); i++ {
		switch {
		case i < n && i < m && a[i] == b[i]:
			out = append(out, op{opMatch, i, i})
		default:
			if i < n {
				out = append(out, op{opDelete, i, 0})
			}
			if i < m {
				out = append(out, op{opInsert, 0, i})
			}
		}
	}
	return out, false, nil
}

// backtrack walks the saved frontiers back from (n, m) to (0, 0).
func backtrack(trace [][]int, n, m int) []op {
	var rev []op
	x, y := n, m
	get := func(d, k int) int { return trace[d][k+d] }
	for d := len(trace) - 1; d > 0; d-- {
		k := x - y
		var prevK int
		if k == -d || (k != d && get(d-1, k-1) < get(d-1, k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := get(d-1, prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, op{opMatch, x, y})
		}
		if x == prevX {
			y--
			rev = append(rev, op{opInsert, x, y})
		} else {
			x--
			rev = append(rev, op{opDelete, x, y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{opMatch, x, y})
	}
	slices.Reverse(rev)
	return rev
}
