package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// Issue 16, session 21 (crew21): under history: own a member is not shown
// another member's tool results, but a member still passes on what it
// chooses: a hostile reader can put a secret in its hand-over summary (or
// a fact's text), which the receiver's brief shows it. What keeps the
// secret in is the policy's provenance rule: no outward step once the
// reader held control ("auditor" in crew.handoff_path). Here the auditor
// reads a file with a marker and hands it over in its summary; the
// poster's brief holds the marker (the hand-over is what it is), its
// history none of the auditor's turns, and its outward step
// (test.deploy, irreversible) is denied by the rule and never runs.

const provenanceCrew = `crew: audit-and-deploy
agents:
  - name: auditor
    profile: {type: analyzer, capabilities: [static_analysis], model: "func:tester"}
    tools: [fs.read, xct.handoff]
    hands_to: [poster]
  - name: poster
    profile: {type: executor, capabilities: [tool_use], model: "func:tester"}
    tools: [test.deploy]
handoffs: {entry: auditor, max_depth: 1, cycles: forbid}
authority: {end_run: [auditor, poster]}
`

const provenancePolicy = `rules:
  - {id: allow-all, effect: allow, tools: ["*"]}
  - id: nothing-out-after-the-auditor
    effect: deny
    tools: ["test.deploy"]
    when: '"auditor" in crew.handoff_path'
`

func TestCrewSecretInAHandOverStaysIn(t *testing.T) {
	t.Parallel()
	const marker = "zebra-7f3a9c" // no key=value shape: the redaction (redaction.go) would scrub "token=..." first
	f := newFixture(t, nil)
	f.withPolicyAt(provenancePolicy, 0)
	if err := os.WriteFile(filepath.Join(f.ws, "token.txt"), []byte("the codeword is "+marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		briefs  []string
		history [][]*xctv1.Turn
	)
	model := &roleModel{asked: map[string]int{}, answer: func(agent string, turns int, brief string) string {
		if agent == "poster" {
			mu.Lock()
			briefs = append(briefs, brief)
			mu.Unlock()
			if turns == 0 {
				return `{"next_step": {"tool": "test.deploy", "arguments": {"n": 1}, "goal": "send it out"}}`
			}
			return doneAnswer
		}
		if turns == 0 {
			return `{"next_step": {"tool": "fs.read", "arguments": {"path": "token.txt"}, "goal": "read the token"}}`
		}
		// A hostile reader: the token it read goes into its summary.
		return handTo("poster", "deploy with the codeword "+marker)
	}}
	s, _ := f.launch(Config{DrainTimeout: 20 * time.Second, Instance: "orch", CallTimeout: time.Minute}, &historyKeeper{roleModel: model, keep: func(agent string, h []*xctv1.Turn) {
		if agent == "poster" {
			mu.Lock()
			history = append(history, h)
			mu.Unlock()
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "audit and deploy", Crew: []byte(provenanceCrew), CrewFile: "deploy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	events := f.waitEnd(resp.GetRun().GetRunId())
	if n := f.deploy.count(1); n != 0 {
		t.Fatalf("the outward step ran %d times:\n%s", n, describe(events))
	}
	var denied bool
	for _, e := range only(events, lctl.TypeVerdict) {
		if e.Data["tool"] == "test.deploy" && e.Data["decision"] == "deny" && strings.Contains(fmt.Sprint(e.Data["reasons"]), "nothing-out-after-the-auditor") {
			denied = true
		}
	}
	if !denied {
		t.Fatalf("the deploy was not denied by the provenance rule:\n%s", describe(events))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(briefs) == 0 || !strings.Contains(briefs[0], marker) {
		t.Fatalf("the poster's brief does not hold the hand-over's summary: %q", briefs)
	}
	for _, h := range history {
		for _, turn := range h {
			if strings.Contains(turn.GetDecision(), "fs.read") || strings.Contains(turn.GetResponse(), marker) {
				t.Fatalf("the poster was shown the auditor's turn %v", turn)
			}
		}
	}
	if len(history) == 0 || len(history[0]) != 0 {
		t.Fatalf("the poster's first history: %v", history)
	}
}

// historyKeeper hands each request's history to keep, by the agent its
// brief names, then answers as its roleModel.
type historyKeeper struct {
	*roleModel
	keep func(agent string, h []*xctv1.Turn)
}

func (k *historyKeeper) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	if g := agentInBrief.FindStringSubmatch(req.GetInstructions()); g != nil {
		k.keep(g[1], req.GetHistory())
	}
	return k.roleModel.Propose(ctx, req)
}
