package analysis

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestStepIndexIsAMap: the step timer's index of open steps by number
// answers as a map does through random sets, gets and deletes, with few
// steps open and with more than its short list holds (where it turns into
// a map).
func TestStepIndexIsAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, keys := range []int{4, 16, 17, 40, 400} {
		var x stepIndex
		m := map[int64]*openStep{}
		steps := make([]*openStep, 64)
		for i := range steps {
			steps[i] = &openStep{}
		}
		for range 20_000 {
			n := int64(r.IntN(keys))
			switch r.IntN(3) {
			case 0:
				o := steps[r.IntN(len(steps))]
				x.set(n, o)
				m[n] = o
			case 1:
				x.del(n)
				delete(m, n)
			}
			if got, want := x.get(n), m[n]; got != want {
				t.Fatalf("%d keys: get(%d) = %p, want %p", keys, n, got, want)
			}
		}
		for n := range int64(keys) {
			if got, want := x.get(n), m[n]; got != want {
				t.Fatalf("%d keys: at the end get(%d) = %p, want %p", keys, n, got, want)
			}
		}
		// Up to the list's length it stays a list; with many more keys
		// (a third of them set at a time) it became a map.
		if (keys <= stepIndexList && x.m != nil) || (keys >= 40 && x.m == nil) {
			t.Fatalf("%d keys: a map %v", keys, x.m != nil)
		}
	}
}

// TestAgentSlots: each name has one slot, the same each time it is asked
// for, with a few agents and with more than the short list holds.
func TestAgentSlots(t *testing.T) {
	var a agentSlots
	seen := map[string]*agentSlot{}
	r := rand.New(rand.NewPCG(2, 3))
	for range 5_000 {
		name := fmt.Sprint("agent-", r.IntN(40))
		if r.IntN(2) == 0 {
			name = string([]byte(name)) // equal, not the same string
		}
		s := a.of(name)
		if s.name != name {
			t.Fatalf("of(%q) is %q's slot", name, s.name)
		}
		if prev, ok := seen[name]; ok && prev != s {
			t.Fatalf("of(%q): another slot than before", name)
		}
		seen[name] = s
	}
	if len(seen) != 40 || len(a.list) != agentList || len(a.byName) != 40-agentList {
		t.Fatalf("%d names, %d in the list, %d in the map", len(seen), len(a.list), len(a.byName))
	}
}
