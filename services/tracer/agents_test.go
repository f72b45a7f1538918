package tracer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A chain names each agent once, in order of first appearance, below and
// past the length at which a set takes over from the list.
func TestChainAgentsOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, agentListMax, agentListMax + 1, 5 * agentListMax} {
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		c := &chain{}
		var want []string
		seen := map[string]bool{}
		for range 20 * (n + 1) {
			a := fmt.Sprintf("agent-%d", rng.IntN(n+1))
			c.addAgent(a)
			if !seen[a] {
				seen[a] = true
				want = append(want, a)
			}
		}
		if !slices.Equal(c.agents, want) {
			t.Fatalf("%d names: agents = %v, want %v", n+1, c.agents, want)
		}
		if (c.agentSet != nil) != (len(want) > agentListMax) {
			t.Errorf("%d agents: set made = %v", len(want), c.agentSet != nil)
		}
	}
}
