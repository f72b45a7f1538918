package crew

import (
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// authorityCrew is a lead (the entry, a reviewer) that hands work to a
// poster and takes it back; the poster may add and update facts.
func authorityCrew(t *testing.T, authority string) *Crew {
	t.Helper()
	src := `crew: audit-and-post
agents:
  - name: auditor
    profile: {type: reviewer, capabilities: [assessment, approval], model: "openai:a"}
    tools: [fs.read, facts.add, facts.update, xct.handoff]
    hands_to: [poster]
  - name: poster
    profile: {type: executor, capabilities: [tool_use], model: "openai:p"}
    tools: [http.request, facts.add, facts.update, xct.handoff]
    hands_to: [auditor, helper]
  - name: helper
    profile: {type: analyzer, capabilities: [static_analysis], model: "openai:h"}
    tools: [fs.read, facts.update]
handoffs: {entry: auditor, cycles: allow, max_visits: 3}
` + authority
	c, err := Load("audit.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuthorityDefaults: without authority:, only the entry agent ends
// the run and only the agents with the assessment capability lift a
// doubt; a member that can neither hand on nor end the run is a dead
// end; the file's lists replace the defaults.
func TestAuthorityDefaults(t *testing.T) {
	c := authorityCrew(t, "")
	if !slices.Equal(c.Authority.EndRun, []string{"auditor"}) || !slices.Equal(c.Authority.LiftDoubts, []string{"auditor"}) {
		t.Fatalf("defaults %+v", c.Authority)
	}
	if d := c.DeadEnds(); len(d) != 1 || !strings.Contains(d[0], "agent helper hands control to nobody and may not end the run") {
		t.Fatalf("dead ends %q", d)
	}
	c = authorityCrew(t, "authority: {end_run: [poster, helper], lift_doubts: []}\n")
	if !c.MayEndRun("poster") || c.MayEndRun("auditor") || len(c.Authority.LiftDoubts) != 0 || c.MayLiftDoubts("auditor") || len(c.DeadEnds()) != 0 {
		t.Fatalf("explicit %+v, dead ends %q", c.Authority, c.DeadEnds())
	}
	for src, want := range map[string]string{
		"authority: {end_run: []}\n":                     "authority.end_run is empty",
		"authority: {lift_doubts: [auditor, auditor]}\n": "authority.lift_doubts names auditor twice",
		"authority: {lift: [auditor]}\n":                 "lift",
	} {
		_, err := Load("audit.yaml", []byte(strings.Replace(authoritySource, "AUTH", src, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: %v, want %q", src, err, want)
		}
	}
}

const authoritySource = `crew: c
agents:
  - name: auditor
    profile: {type: reviewer, capabilities: [assessment], model: "openai:a"}
    tools: [fs.read]
AUTH`

// TestDoneNeedsAuthority: done from a member authority.end_run does not
// name is refused with a signal that says who may end the run; the
// session counts the refusals (from the chain) until the member's next
// step, and its brief says so.
func TestDoneNeedsAuthority(t *testing.T) {
	l := newLoop(t, authorityCrew(t, ""), 0)
	if sig := l.sess.CheckDone("auditor"); sig != nil {
		t.Fatalf("the lead's done: %v", sig)
	}
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "poster", "summary": "post the report"}})
	l.play(proposal{tool: "http.request", args: map[string]any{"url": "http://127.0.0.1:1/"}})
	sig := l.sess.CheckDone("poster")
	if sig == nil || sig.Code != CodeDoneNotAllowed || sig.Category != "orchestration_error" || sig.Type != "delegation_rejected" || !sig.Recoverable ||
		!strings.Contains(sig.Message, "poster may not end the run: only auditor may") || !slices.Equal(sig.Details["hands_to"].([]string), []string{"auditor", "helper"}) {
		t.Fatalf("poster's done: %+v", sig)
	}
	for i := 1; i <= 2; i++ {
		l.record("poster", raw{typ: lctl.TypeError, data: sig.Data()})
		if l.sess.DoneRefusals() != i {
			t.Fatalf("refusals %d, want %d", l.sess.DoneRefusals(), i)
		}
	}
	if b := l.sess.Plan().Brief; !strings.Contains(b, "Your answer done was refused") || !strings.Contains(b, "You may not end the run (only auditor may)") {
		t.Fatalf("brief %s", b)
	}
	again, err := NewSession(l.sess.Crew(), chainID, l.events, SessionOptions{})
	if err != nil || again.DoneRefusals() != 2 {
		t.Fatalf("rebuilt: %v, %d refusals", err, again.DoneRefusals())
	}
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "auditor", "summary": "posted"}})
	if l.sess.DoneRefusals() != 0 || strings.Contains(l.sess.Plan().Brief, "was refused") {
		t.Fatalf("after the hand-back: %d refusals, brief %s", l.sess.DoneRefusals(), l.sess.Plan().Brief)
	}
}

// TestLiftingADoubtNeedsAuthority: a member may lower a fact another
// doubted, never raise it above that doubt unless authority.lift_doubts
// names it and it did not add the fact; raising a fact no one doubts is
// anyone's. A chain that holds such a lift (written before the rule)
// still replays.
func TestLiftingADoubtNeedsAuthority(t *testing.T) {
	c := authorityCrew(t, "")
	l := newLoop(t, c, 0)
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "R1", "text": "the report is clean", "confidence": 0.9}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "poster", "summary": "post it"}})
	// Not a doubt: the auditor's 0.9, decayed once, is still proceed.
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "R1", "confidence": 0.95, "reason": "looks right"}})
	l.play(proposal{tool: ToolFactsAdd, args: map[string]any{"id": "P1", "text": "the endpoint is ours", "confidence": 0.9}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "auditor", "summary": "check P1"}})
	// The auditor doubts both.
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "R1", "confidence": 0.3, "reason": "a secret in it"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "P1", "confidence": 0.5, "reason": "unknown host"}})
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "poster", "summary": "fix it"}})
	// The poster may not lift either: not named in lift_doubts, and P1's author.
	out := l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "R1", "confidence": 0.99, "reason": "it is fine"}, want: CodeAssessmentNotAllowed})
	if !strings.Contains(out.Signal.Message, "authority.lift_doubts does not name it (auditor)") || out.Signal.Details["others_confidence"] != 0.3 {
		t.Fatalf("R1: %+v", out.Signal)
	}
	out = l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "P1", "confidence": 0.51, "reason": "trust me"}, want: CodeAssessmentNotAllowed})
	if !strings.Contains(out.Signal.Message, "it added the fact") {
		t.Fatalf("P1: %+v", out.Signal)
	}
	// Lowering and an edit without a confidence are anyone's (the doubt
	// decays with each hop: a word given again is a lift of it).
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "R1", "confidence": 0.2, "reason": "worse"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "P1", "text": "the endpoint is 127.0.0.1", "reason": "named it"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "P1", "confidence": 0.45, "reason": "agree"}})
	if f := l.sess.Facts().Fact("R1"); f.Confidence != 0.2 || f.UpdatedBy != "poster" {
		t.Fatalf("R1 %+v", f)
	}
	// The lead is in lift_doubts: it may lift the poster's P1, not R1,
	// its own fact (the poster's lower word stands until another member,
	// or a human at the gate, verifies it).
	l.play(proposal{tool: ToolHandoff, args: map[string]any{"to": "auditor", "summary": "done"}})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "R1", "confidence": 0.9, "reason": "redacted"}, want: CodeAssessmentNotAllowed})
	l.play(proposal{tool: ToolFactsUpdate, args: map[string]any{"id": "P1", "confidence": 0.9, "reason": "checked the host"}})
	if f := l.sess.Facts().Fact("P1"); f.Confidence != 0.9 {
		t.Fatalf("P1 %+v", f)
	}

	// A chain written before the rule, with the poster's lift on it, replays.
	l.record("auditor", raw{typ: lctl.TypeFactModified, data: map[string]any{"id": "R1", "text": "the report is clean", "confidence": 0.95, "reason": "replayed"}})
	again, err := NewSession(c, chainID, l.events, SessionOptions{})
	if err != nil || again.Facts().Fact("R1").Confidence != 0.95 {
		t.Fatalf("an old chain: %v", err)
	}
}
