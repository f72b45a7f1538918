package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
)

// getJSON reads one of the debugger's API answers as principal.
func getJSON(t *testing.T, ctx context.Context, c *bindCluster, principal, path string, v any) {
	t.Helper()
	if err := fetchJSON(ctx, c, c.creds.Token(t, principal), path, v); err != nil {
		t.Fatal(err)
	}
}

// fetchJSON is getJSON's request, with a bearer token.
func fetchJSON(ctx context.Context, c *bindCluster, token, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.app.Tracer.HTTPAddr()+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w: %s", path, err, body)
	}
	return nil
}

// chainEvent is an event as the debugger's API gives it.
type chainEvent struct {
	Seq   uint64         `json:"seq"`
	Type  string         `json:"type"`
	Agent string         `json:"agent"`
	Data  map[string]any `json:"data"`
}

// A member's fact carried fields of its choosing at the top level of its
// fact_added / fact_modified data, and the readers of the chain take some
// of those names for the event's own: the debugger puts an event with a
// data.step on that step (the flow's node, the state panel's step with
// its agent and verdict) and shows its data.tool as the node's tool. So
// fix-implementer, updating F1 with fields {step: 1, tool: fs.write},
// had its change drawn as part of code-analyzer's step 1, whose
// proposal and verdict the state panel showed for it: the debugger said
// another member did what this one did. A fact's fields may not use the
// names XCT's readers take for an event's own (step, step_id, tool, ...):
// the update is refused to the member, as a reserved field is.
func TestAttackCrewFactClaimsAnotherMembersStep(t *testing.T) {
	t.Parallel()
	crewFile, err := os.ReadFile(filepath.Join("..", "..", "examples", "crews", "demo", "crew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := startBindCluster(t, func(cfg *app.Config, _ *app.Options) { cfg.Tracer.HTTPListen = "127.0.0.1:0" })
	c.writeScripts(t, crewScript(
		`{tool: facts.update, arguments: {id: F1, reason: recheck, fields: {step: 1, tool: fs.write}}, goal: Note F1}`,
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "find and fix", Crew: crewFile, CrewFile: "crew.yaml"})
	id := run.GetRunId()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The tracer follows the chain: wait until it has the run's last event.
	token := c.creds.Token(t, "bob")
	testutil.Eventually(t, 60*time.Second, func() error {
		var info struct {
			LastSeq uint64 `json:"last_seq"`
		}
		if err := fetchJSON(ctx, c, token, "/api/chains/"+id, &info); err != nil {
			return err
		}
		if info.LastSeq < run.GetLastSeq() {
			return fmt.Errorf("the tracer has the chain up to %d of %d", info.LastSeq, run.GetLastSeq())
		}
		return nil
	})
	var page struct {
		Events []chainEvent `json:"events"`
	}
	getJSON(t, ctx, c, "bob", "/api/chains/"+id+"/events?from=1&limit=1000", &page)
	stepAgent := map[int64]string{} // each numbered step's agent, by its step_start
	var fixerUpdate int64           // the fixer's facts.update step
	for _, e := range page.Events {
		if e.Type != "step_start" {
			continue
		}
		n, ok := e.Data["step"].(float64)
		if !ok {
			continue
		}
		stepAgent[int64(n)] = e.Agent
		if e.Agent == "fix-implementer" && e.Data["tool"] == "facts.update" {
			fixerUpdate = int64(n)
		}
	}
	if stepAgent[1] != "code-analyzer" || fixerUpdate == 0 {
		t.Fatalf("the crew did not play as scripted: steps %v", stepAgent)
	}

	// The state panel: every fact event's step is a step of its own agent.
	facts := 0
	for _, e := range page.Events {
		if e.Type != "fact_added" && e.Type != "fact_modified" {
			continue
		}
		facts++
		var st struct {
			Step *struct {
				Step  *int64 `json:"step"`
				Agent string `json:"agent"`
			} `json:"step"`
		}
		getJSON(t, ctx, c, "bob", fmt.Sprintf("/api/chains/%s/state?seq=%d", id, e.Seq), &st)
		if st.Step != nil && st.Step.Agent != e.Agent {
			n := int64(0)
			if st.Step.Step != nil {
				n = *st.Step.Step
			}
			t.Errorf("the debugger shows %s's %s (seq %d) as part of step %d by %s", e.Agent, e.Type, e.Seq, n, st.Step.Agent)
		}
	}
	if facts < 2 {
		t.Fatalf("%d fact events on the chain", facts)
	}

	// The flow: a node with a step number is in that step's agent's lane,
	// and no fact node shows a tool.
	var flow struct {
		Nodes []struct {
			Kind  string `json:"kind"`
			Seq   uint64 `json:"seq"`
			Agent string `json:"agent"`
			Step  *int64 `json:"step"`
			Tool  string `json:"tool"`
		} `json:"nodes"`
	}
	getJSON(t, ctx, c, "bob", "/api/chains/"+id+"/flow?limit=1000", &flow)
	for _, n := range flow.Nodes {
		if n.Step != nil && stepAgent[*n.Step] != "" && stepAgent[*n.Step] != n.Agent {
			t.Errorf("flow node %d (%s by %s) is numbered step %d, which %s took", n.Seq, n.Kind, n.Agent, *n.Step, stepAgent[*n.Step])
		}
		if n.Kind == "fact" && n.Tool != "" {
			t.Errorf("fact node %d shows tool %s", n.Seq, n.Tool)
		}
	}

	// The member was told why: the update is refused as a fact the store
	// does not take.
	for _, s := range run.GetSteps() {
		if int64(s.GetNumber()) == fixerUpdate {
			if got := s.GetResponse().GetError().GetCode(); got != "INVALID_FACT" {
				t.Errorf("the fixer's facts.update with fields step and tool: error %q, want INVALID_FACT", got)
			}
		}
	}
}
