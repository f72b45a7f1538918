package attack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
)

// failingThenAnswering is an OpenAI-compatible streaming endpoint on
// loopback: model "big" reads the whole prompt (it reports 5000 prompt
// tokens) and then fails mid-stream; model "small" answers (50 prompt
// tokens), fs.list first, then done.
type failingThenAnswering struct {
	mu    sync.Mutex
	calls map[string]int
}

func (m *failingThenAnswering) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	m.mu.Lock()
	m.calls[req.Model]++
	n := m.calls[req.Model]
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	if req.Model == "big" {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"next_step\\\"\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5000,\"completion_tokens\":10}}\n\n")
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"the model gave up\",\"type\":\"server_error\"}}\n\n")
		return
	}
	answer := `{"next_step": {"tool": "fs.list", "arguments": {"path": "."}, "goal": "look around"}}`
	if n > 1 {
		answer = `{"done": true, "message": "nothing to do"}`
	}
	delta, _ := json.Marshal(answer)
	fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%s}}]}\n\n", delta)
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":10}}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestAttackCrewFallbacksSpendOffTheBudget: a crew agent's model that
// fails after reading its prompt moves the step to the agent's next
// model (the crew's fallback), and the tokens the failed call used (on
// the chain, in its stream_end) were counted nowhere: not in the step's
// tokens, not in the run's, not in what the validator's budgets see. A
// model that fails on purpose on every step, with 64 fallbacks (the crew
// file's limit) to try, spent up to 65 prompts a step against one. Under
// max_tokens 2000, a step whose failed call read 5000 tokens was allowed
// on main; it is refused for the budget now, and the run's tokens say
// what was used.
func TestAttackCrewFallbacksSpendOffTheBudget(t *testing.T) {
	t.Parallel()
	model := &failingThenAnswering{calls: map[string]int{}}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	policy := `budgets: {max_tokens: 2000}
rules:
  - {id: allow-all, effect: allow, tools: ["*"]}
`
	c := startBindCluster(t, withTools(t, "", policy), func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.OpenAI.BaseURL = srv.URL + "/v1"
		cfg.Orchestrator.OpenAI.Stream = true
	})
	crewFile := []byte(`crew: fallback-spend
agents:
  - name: analyst
    profile: {type: analyzer, capabilities: [analysis], model: "openai:big", fallbacks: ["openai:small"], reliability_score: 0.9}
    tools: [fs.list]
handoffs: {entry: analyst}
routing: {fallback_on: [GENERATION_FAILED]}
`)
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "look", Crew: crewFile, CrewFile: "crew.yaml"})
	model.mu.Lock()
	calls := fmt.Sprint(model.calls)
	model.mu.Unlock()
	used := run.GetInputTokens() + run.GetOutputTokens()
	if got := stepErrors(run); fmt.Sprint(got) != "[BUDGET_EXCEEDED]" || used < 5000 {
		t.Fatalf("steps %v, run %s (%s), %d tokens counted (model calls %s); want the first step refused for the 5070 tokens its calls used",
			got, run.GetStatus(), run.GetMessage(), used, calls)
	}
}

// TestAttackFailedModelCallOffTheRunsTokens: a single-model run whose
// model fails after reading its prompt ends the run (no fallbacks), and
// what that call used, on the chain in its stream_end, was missing from
// run_finished's tokens (0 counted for a call that read 5000). Session 15
// (tokens15): the run's tokens count it, as a crew's fallback does.
func TestAttackFailedModelCallOffTheRunsTokens(t *testing.T) {
	t.Parallel()
	model := &failingThenAnswering{calls: map[string]int{}}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	policy := `rules:
  - {id: allow-all, effect: allow, tools: ["*"]}
`
	c := startBindCluster(t, withTools(t, "", policy), func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.OpenAI.BaseURL = srv.URL + "/v1"
		cfg.Orchestrator.OpenAI.Stream = true
	})
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "look", Model: "openai:big"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_FAILED || run.GetInputTokens() != 5000 || run.GetOutputTokens() != 10 {
		t.Fatalf("run %s (%s), tokens %d in %d out; want failed, with the failed call's 5000 in 10 out",
			run.GetStatus(), run.GetMessage(), run.GetInputTokens(), run.GetOutputTokens())
	}
}
