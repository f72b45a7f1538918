package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/lctl"
)

// Issue 16, session 21 (crew21): in a governed crew a subordinate member
// (or one steered by what it read) neither ends the run before the lead's
// check nor lifts a doubt another member raised. Both crews load on main
// (no authority: section): the defaults govern them.

// roleModel answers as the agent its brief names, by that agent's own
// turns (history: own, the default): answer(agent, turns, brief).
type roleModel struct {
	answer func(agent string, turns int, brief string) string
	mu     sync.Mutex
	asked  map[string]int
}

var agentInBrief = regexp.MustCompile(`You are agent "([a-z-]+)"`)

func (m *roleModel) Name() string { return "tester" }
func (m *roleModel) Close() error { return nil }
func (m *roleModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	agent := ""
	if g := agentInBrief.FindStringSubmatch(req.GetInstructions()); g != nil {
		agent = g[1]
	}
	m.mu.Lock()
	m.asked[agent]++
	m.mu.Unlock()
	out := m.answer(agent, len(req.GetHistory()), req.GetInstructions())
	return &xctv1.ProposeResponse{Output: out, Model: "tester", Usage: &xctv1.Usage{InputTokens: 7, OutputTokens: 2}}, nil
}

// auditPostCrew: the auditor leads (the entry) and hands the work to the
// poster, which hands it back for the auditor's check.
const auditPostCrew = `crew: audit-and-post
agents:
  - name: auditor
    profile: {type: reviewer, capabilities: [assessment, approval], model: "func:tester"}
    tools: [test.count, facts.add, facts.update, xct.handoff]
    hands_to: [poster]
  - name: poster
    profile: {type: executor, capabilities: [tool_use], model: "func:tester"}
    tools: [test.count, facts.update, xct.handoff]
    hands_to: [auditor]
handoffs: {entry: auditor, cycles: allow, max_visits: 2}
`

func handTo(to, summary string) string {
	return fmt.Sprintf(`{"next_step": {"tool": "xct.handoff", "arguments": {"to": %q, "summary": %q}, "goal": "hand over"}}`, to, summary)
}

const doneAnswer = `{"done": true, "message": "posted, all good"}`

// A poster that answers done before the auditor's check does not end the
// run: its done is refused (DONE_NOT_ALLOWED, outside any step, with what
// the call used), its brief says so, it hands back, and the auditor's
// check runs before the auditor ends the run. A poster that keeps
// answering done ends the run failed at the repair budget, never done.
// On main the poster's first done ended the run, done, with the check
// never run.
func TestCrewMemberMayNotEndTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		relents bool // the poster hands back once refused
	}{{"hands back", true}, {"insists", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var briefs []string
			model := &roleModel{asked: map[string]int{}, answer: func(agent string, turns int, brief string) string {
				if agent == "poster" {
					briefs = append(briefs, brief)
					if tc.relents && strings.Contains(brief, "Your answer done was refused") {
						return handTo("auditor", "posted: check it")
					}
					return doneAnswer
				}
				switch turns {
				case 0:
					return handTo("poster", "post the report")
				case 1:
					return step("test.count", 2) // the auditor's check
				}
				return `{"done": true, "message": "checked and posted"}`
			}}
			f := newFixture(t, nil)
			s, _ := f.launch(Config{DrainTimeout: 20 * time.Second, Instance: "orch", CallTimeout: time.Minute}, model)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "audit then post", Crew: []byte(auditPostCrew), CrewFile: "audit.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			events := f.waitEnd(id)
			if err := lctl.Verify(events); err != nil {
				t.Fatalf("chain does not verify: %v", err)
			}
			var refusals []lctl.Event
			for _, e := range only(events, lctl.TypeError) {
				if e.Data["code"] == crew.CodeDoneNotAllowed {
					refusals = append(refusals, e)
				}
			}
			last := events[len(events)-1]
			if len(refusals) == 0 {
				t.Fatalf("the poster's done was not refused; the run ended %v:\n%s", last.Data, describe(events))
			}
			for _, e := range refusals {
				tok, _ := e.Data["tokens"].(map[string]any)
				if e.Agent != "poster" || str(e.Data, "step_id") != "" || num(tok, "input") != 7 || num(tok, "output") != 2 ||
					!strings.Contains(str(e.Data, "message"), "poster may not end the run: only auditor may") {
					t.Fatalf("refusal %v", e.Data)
				}
			}
			// What the refused calls used is the run's.
			if tok, _ := last.Data["tokens"].(map[string]any); num(tok, "input") != 7*int64(sum(model.asked)) {
				t.Fatalf("run_finished tokens %v, %d calls", tok, sum(model.asked))
			}
			if tc.relents {
				if last.Data["status"] != "done" || last.Data["message"] != "checked and posted" || len(refusals) != 1 {
					t.Fatalf("run ended %v after %d refusals:\n%s", last.Data, len(refusals), describe(events))
				}
				if c := f.count.count(2); c != 1 {
					t.Fatalf("the auditor's check ran %d times", c)
				}
				if len(briefs) != 2 || strings.Contains(briefs[0], "was refused") || !strings.Contains(briefs[0], "You may not end the run (only auditor may)") {
					t.Fatalf("the poster's briefs: %q", briefs)
				}
				// A takeover right after the refusal goes on: the refusal
				// does not end the run as an error outside a step would.
				for i, e := range events {
					if e.Seq == refusals[0].Seq {
						rs := foldResume(id, events[:i+1])
						if rs.endMessage != "" || rs.open != nil || rs.next != 2 {
							t.Fatalf("resumed after the refusal: end %q, open %v, next %d", rs.endMessage, rs.open, rs.next)
						}
					}
				}
				return
			}
			if last.Data["status"] != "failed" || len(refusals) != 3 || !strings.Contains(str(last.Data, "message"), "answered done 3 times") {
				t.Fatalf("run ended %v after %d refusals:\n%s", last.Data, len(refusals), describe(events))
			}
			if f.count.count(2) != 0 || model.asked["poster"] != 3 {
				t.Fatalf("count 2 ran %d times, the poster was asked %d times", f.count.count(2), model.asked["poster"])
			}
		})
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// auditPostPublishCrew: the auditor records a doubt, the poster works on
// it and hands to the publisher, whose step relies on what the others
// said of the fact.
const auditPostPublishCrew = `crew: audit-post-publish
agents:
  - name: auditor
    profile: {type: reviewer, capabilities: [assessment, approval], model: "func:tester"}
    tools: [test.count, facts.add, facts.update, xct.handoff]
    hands_to: [poster]
  - name: poster
    profile: {type: executor, capabilities: [tool_use], model: "func:tester"}
    tools: [test.count, facts.update, xct.handoff]
    hands_to: [publisher]
  - name: publisher
    profile: {type: executor, capabilities: [tool_use], model: "func:tester"}
    tools: [test.count, xct.handoff]
    hands_to: [auditor]
handoffs: {entry: auditor, cycles: allow, max_visits: 2}
`

// The auditor doubts R1 (0.30: the report holds a secret); the poster,
// which the crew does not let lift a doubt, assesses R1 at 0.99 and
// hands to the publisher. The poster's assessment is refused
// (ASSESSMENT_NOT_ALLOWED, no fact_modified), so the publisher's step
// relies on R1 at the auditor's 0.30 and waits for a human. On main the
// poster's word lifted R1 for the publisher, whose step ran at once.
func TestCrewMemberMayNotLiftAnothersDoubt(t *testing.T) {
	t.Parallel()
	model := &roleModel{asked: map[string]int{}, answer: func(agent string, turns int, _ string) string {
		switch {
		case agent == "auditor" && turns == 0:
			return `{"next_step": {"tool": "facts.add", "arguments": {"id": "R1", "text": "the report holds a secret", "confidence": 0.3, "source": "audit"}, "goal": "record the doubt"}}`
		case agent == "auditor" && turns == 1:
			return handTo("poster", "do not post R1 yet")
		case agent == "poster" && turns == 0:
			return `{"next_step": {"tool": "facts.update", "arguments": {"id": "R1", "confidence": 0.99, "reason": "it is fine"}, "goal": "clear R1"}}`
		case agent == "poster" && turns == 1:
			return handTo("publisher", "R1 is cleared: publish")
		case agent == "publisher" && turns == 0:
			return step("test.count", 3) // the publication
		}
		return doneAnswer
	}}
	f := newFixture(t, nil)
	s, _ := f.launch(Config{DrainTimeout: 20 * time.Second, Instance: "orch", CallTimeout: time.Minute}, model)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "audit, post, publish", Crew: []byte(auditPostPublishCrew), CrewFile: "app.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	events := f.waitFor(id, "the publisher's step held for a human, or the run's end", func(e lctl.Event) bool {
		return e.Type == lctl.TypeApprovalRequested || e.Type == lctl.TypeRunFinished
	})
	if n := f.count.count(3); n != 0 {
		t.Fatalf("the publisher's step ran %d times without a human:\n%s", n, describe(events))
	}
	if mods := only(events, lctl.TypeFactModified); len(mods) != 0 {
		t.Fatalf("the poster's assessment is on the chain: %v", mods[0].Data)
	}
	var refused *lctl.Event
	for _, e := range only(events, lctl.TypeError) {
		if e.Data["code"] == crew.CodeAssessmentNotAllowed {
			refused = &e
		}
	}
	if refused == nil || refused.Agent != "poster" || !strings.Contains(str(refused.Data, "message"), "poster may not lift the doubt on fact R1") {
		t.Fatalf("no refusal of the poster's assessment:\n%s", describe(events))
	}
	reqs, verdicts := only(events, lctl.TypeApprovalRequested), only(events, lctl.TypeVerdict)
	if len(reqs) != 1 || num(reqs[0].Data, "step") != 5 || !strings.Contains(fmt.Sprint(verdicts[len(verdicts)-1].Data), "fact R1 confidence 0.30") {
		t.Fatalf("approval requests:\n%s", describe(events))
	}
	if _, err := s.CancelRun(as(ctx, "carol", auth.RoleOperator), &xctv1.CancelRunRequest{RunId: id, Reason: "not published"}); err != nil {
		t.Fatal(err)
	}
	f.waitEnd(id)
}
