package validator_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/crew"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/validator"
)

// serve serves s over gRPC on loopback and returns a client with the
// orchestrator's (a service's) identity.
func serve(t *testing.T, s *validator.Service) xctv1.ValidatorServiceClient {
	t.Helper()
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("validator", slog.New(slog.NewTextHandler(t.Output(), nil)), creds.ServerOptions()...)
	s.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		srv.Stop(stopCtx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := s.Stop(stopCtx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return xctv1.NewValidatorServiceClient(creds.Dial(t, srv.Addr(), grpcxtest.Service))
}

// analyzer is the crew context of the security review's code-analyzer,
// which may hand to a reviewer (its verifier).
func analyzer() *xctv1.CrewContext {
	return &xctv1.CrewContext{
		Crew: "security-review", CrewSha256: strings.Repeat("ab", 32), Agent: "code-analyzer", AgentType: "analyzer",
		Tools:      []string{"fs.read", "facts.add", "facts.update", "facts.query", "xct.handoff"},
		Thresholds: &xctv1.CrewThresholds{Proceed: 0.8, Warn: 0.6, Verify: 0.4},
		Verifier:   "security-reviewer",
	}
}

// TestCrewValidation: the validator's per-agent check and the crew's
// confidence gate, over gRPC on loopback.
func TestCrewValidation(t *testing.T) {
	t.Parallel()
	client := serve(t, newService(t, `rules:
  - id: allow-read
    effect: allow
    effects: [read]
  - id: allow-reversible
    effect: allow
    effects: [reversible]
  - id: approve-irreversible
    effect: require_approval
    effects: [irreversible]
  - id: reviewers-read-only
    effect: deny
    message: reviewers do not write
    when: crew.agent_type == "reviewer" && effect != "read"
`))
	conf := func(c float64) *float64 { return &c }
	with := func(tool string, a map[string]any, cc *xctv1.CrewContext, c *float64, edit func(*xctv1.CrewContext)) *xctv1.ValidateRequest {
		req := request(t, tool, a)
		req.Crew = cc
		req.Proposal.Confidence = c
		if edit != nil && cc != nil {
			edit(cc)
		}
		return req
	}
	fact := map[string]any{"id": "F1", "text": "SQL built from user input", "confidence": 0.85, "source": "static-analysis"}
	read := map[string]any{"path": "app.py"}
	cases := []struct {
		name    string
		req     *xctv1.ValidateRequest
		want    xctv1.VerdictDecision
		code    wire.Code
		reasons []string
		detail  string // a details key=value the error must carry
	}{
		// No crew: exactly as before.
		{"no crew: facts.add is no catalog tool", with("facts.add", fact, nil, nil, nil), deny, wire.CodeUnknownTool, []string{"builtin.catalog"}, ""},
		{"no crew: xct.handoff is the system's", with("xct.handoff", map[string]any{"to": "b", "summary": "s"}, nil, nil, nil), deny, wire.CodeUnknownTool, []string{"builtin.catalog"}, ""},
		{"no crew: 0.3 is the policy's deny", with("fs.read", read, nil, conf(0.3), nil), deny, wire.CodePolicyDenied, []string{"allow-read", "builtin.confidence"}, ""},
		// The agent's tools.
		{"a tool the agent may not propose", with("fs.write", map[string]any{"path": "a", "content": "b"}, analyzer(), nil, nil), deny, wire.CodeToolNotAllowed, []string{"builtin.crew.tools"}, "agent=code-analyzer"},
		{"a tool the catalog lacks but the agent lists", with("fs.list", read, analyzer(), nil, func(c *xctv1.CrewContext) { c.Tools = append(c.Tools, "fs.list") }), deny, wire.CodeUnknownTool, []string{"builtin.catalog"}, ""},
		{"an agent with no tools", with("fs.read", read, analyzer(), nil, func(c *xctv1.CrewContext) { c.Tools = nil }), deny, wire.CodeToolNotAllowed, []string{"builtin.crew.tools"}, ""},
		{"facts.add listed", with("facts.add", fact, analyzer(), nil, nil), allow, "", []string{"allow-reversible"}, ""},
		{"facts.query is read", with("facts.query", map[string]any{"query": "SELECT *"}, analyzer(), nil, nil), allow, "", []string{"allow-read"}, ""},
		{"xct.handoff listed", with("xct.handoff", map[string]any{"to": "security-reviewer", "summary": "review F1"}, analyzer(), nil, nil), allow, "", []string{"allow-reversible"}, ""},
		{"a fact with confidence 1.7", with("facts.add", map[string]any{"id": "F2", "text": "t", "confidence": 1.7}, analyzer(), nil, nil), deny, wire.CodeSchemaInvalid, []string{"builtin.schema"}, ""},
		{"handoff without a summary", with("xct.handoff", map[string]any{"to": "security-reviewer"}, analyzer(), nil, nil), deny, wire.CodeSchemaInvalid, []string{"builtin.schema"}, ""},
		// The threshold table.
		{"0.85 proceeds", with("fs.read", read, analyzer(), conf(0.85), nil), allow, "", []string{"allow-read"}, ""},
		{"0.70 proceeds with a warning", with("fs.read", read, analyzer(), conf(0.7), nil), allow, "", []string{"allow-read", "builtin.crew.confidence.warn"}, ""},
		{"0.50 asks the reviewer to verify", with("fs.read", read, analyzer(), conf(0.5), nil), deny, wire.CodeVerification, []string{"allow-read", "builtin.crew.confidence.verify"}, "verifier=security-reviewer"},
		{"0.50 with no reviewer is an approval", with("fs.read", read, analyzer(), conf(0.5), func(c *xctv1.CrewContext) { c.Verifier = "" }), approval, wire.CodeApprovalRequired, []string{"allow-read", "builtin.crew.confidence.verify"}, "gate=verify"},
		{"0.30 is an approval, not a deny", with("fs.read", read, analyzer(), conf(0.3), nil), approval, wire.CodeApprovalRequired, []string{"allow-read", "builtin.crew.confidence.block"}, "gate=block"},
		{"a fact relied on at 0.35", with("fs.read", read, analyzer(), conf(0.9), func(c *xctv1.CrewContext) {
			c.ReliesOn = []*xctv1.FactConfidence{{Id: "F2", Confidence: 0.95}, {Id: "F1", Confidence: 0.35}}
		}), approval, wire.CodeApprovalRequired, []string{"allow-read", "builtin.crew.confidence.block"}, "subject=fact F1"},
		{"a fact relied on at 0.65", with("fs.read", read, analyzer(), nil, func(c *xctv1.CrewContext) { c.ReliesOn = []*xctv1.FactConfidence{{Id: "F1", Confidence: 0.65}} }), allow, "", []string{"allow-read", "builtin.crew.confidence.warn"}, ""},
		{"the crew's own thresholds", with("fs.read", read, analyzer(), conf(0.85), func(c *xctv1.CrewContext) {
			c.Thresholds = &xctv1.CrewThresholds{Proceed: 0.9, Warn: 0.7, Verify: 0.5}
		}), allow, "", []string{"allow-read", "builtin.crew.confidence.warn"}, ""},
		// Session 7: the crew file is the submitter's, and its thresholds
		// replaced the policy's: a crew at 0.03/0.02/0.01 let a step at 0.3
		// run that the policy (and any run without a crew) holds. The
		// policy's thresholds are a floor.
		{"a crew cannot lower the policy's thresholds", with("fs.read", read, analyzer(), conf(0.3), func(c *xctv1.CrewContext) {
			c.Thresholds = &xctv1.CrewThresholds{Proceed: 0.03, Warn: 0.02, Verify: 0.01}
		}), approval, wire.CodeApprovalRequired, []string{"allow-read", "builtin.crew.confidence.block"}, "gate=block"},
		{"a crew cannot lower a fact's either", with("fs.read", read, analyzer(), nil, func(c *xctv1.CrewContext) {
			c.Thresholds = &xctv1.CrewThresholds{Proceed: 0.03, Warn: 0.02, Verify: 0.01}
			c.ReliesOn = []*xctv1.FactConfidence{{Id: "F1", Confidence: 0.65}}
		}), allow, "", []string{"allow-read", "builtin.crew.confidence.warn"}, ""},
		{"an approval stays one, with the gate's reason", with("shell.exec", map[string]any{"command": "ls"}, analyzer(), conf(0.3), func(c *xctv1.CrewContext) { c.Tools = append(c.Tools, "shell.exec") }), approval, wire.CodeApprovalRequired, []string{"approve-irreversible", "builtin.crew.confidence.block"}, "gate=block"},
		// The policy sees the agent: its deny beats the gate.
		{"the policy denies by agent type", with("facts.add", fact, analyzer(), conf(0.3), func(c *xctv1.CrewContext) { c.AgentType = "reviewer" }), deny, wire.CodePolicyDenied, []string{"allow-reversible", "reviewers-read-only", "builtin.crew.confidence.block"}, ""},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.Validate(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			v := resp.GetVerdict()
			checkVerdict(t, v, tc.want, tc.code, tc.reasons...)
			if tc.detail != "" {
				k, val, _ := strings.Cut(tc.detail, "=")
				if got := v.GetError().GetDetails().AsMap()[k]; got != val {
					t.Errorf("details[%s] = %v, want %s (%v)", k, got, val, v.GetError())
				}
			}
		})
	}

	// A malformed crew context is a malformed request.
	for name, edit := range map[string]func(*xctv1.CrewContext){
		"no agent":          func(c *xctv1.CrewContext) { c.Agent = "" },
		"thresholds > 1":    func(c *xctv1.CrewContext) { c.Thresholds.Proceed = 1.5 },
		"thresholds order":  func(c *xctv1.CrewContext) { c.Thresholds.Warn = 0.9 },
		"a fact with no id": func(c *xctv1.CrewContext) { c.ReliesOn = []*xctv1.FactConfidence{{Confidence: 0.9}} },
	} {
		if _, err := client.Validate(ctx, with("fs.read", read, analyzer(), nil, edit)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "crew context") {
			t.Errorf("%s: %v", name, err)
		}
	}

	// The crew context as the orchestrator builds it (crew.Session): the
	// analyzer's step relies on F1, added at 0.45.
	c, err := crew.LoadFile("../../examples/crews/security-review.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fa, sig := crew.NewFactStore(c).Add("code-analyzer", crew.FactInput{ID: "F1", Text: "t", Confidence: conf(0.45), Source: "static-analysis"})
	if sig != nil {
		t.Fatal(sig)
	}
	sess, err := crew.NewSession(c, "run-1", []lctl.Event{
		{Seq: 1, Type: lctl.TypeStepStart, Agent: "code-analyzer", Data: map[string]any{}},
		{Seq: 2, Type: lctl.TypeFactAdded, Agent: "code-analyzer", Data: fa.Data()},
	}, crew.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := request(t, "fs.read", read)
	req.Proposal.Goal = "read the code around F1"
	req.Crew = sess.CrewContext("fs.read", read, req.Proposal.Goal)
	resp, err := client.Validate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, resp.GetVerdict(), deny, wire.CodeVerification, "allow-read", "builtin.crew.confidence.verify")
	if d := resp.GetVerdict().GetError().GetDetails().AsMap(); d["verifier"] != "security-reviewer" || d["subject"] != "fact F1" || d["confidence"] != 0.45 {
		t.Errorf("details %v", d)
	}
	req.Proposal.Tool = "fs.write"
	req.Crew = sess.CrewContext("fs.write", read, req.Proposal.Goal)
	resp, err = client.Validate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, resp.GetVerdict(), deny, wire.CodeToolNotAllowed, "builtin.crew.tools")
}

// crewRun is a crew run's chain as the loop writes it, with its session.
type crewRun struct {
	t      *testing.T
	sess   *crew.Session
	events []lctl.Event
}

func (r *crewRun) record(agent string, ev interface {
	Type() string
	Data() map[string]any
}) {
	r.t.Helper()
	data, err := lctl.DataOf(ev.Data())
	if err != nil {
		r.t.Fatal(err)
	}
	e := lctl.Event{ChainID: "run-v", Seq: uint64(len(r.events) + 1), Type: ev.Type(), Agent: agent, Data: data,
		Timestamp: lctl.FormatTime(time.Date(2026, 11, 25, 12, 0, len(r.events), 0, time.UTC))}
	prev := ""
	if len(r.events) > 0 {
		prev = r.events[len(r.events)-1].Hash
	}
	if err := e.Seal(prev); err != nil {
		r.t.Fatal(err)
	}
	r.events = append(r.events, e)
	if err := r.sess.Observe(&r.events[len(r.events)-1]); err != nil {
		r.t.Fatal(err)
	}
}

type data struct {
	typ string
	d   map[string]any
}

func (d data) Type() string         { return d.typ }
func (d data) Data() map[string]any { return d.d }

// step proposes tool by the agent in control, asks the validator over
// gRPC, and records what the loop would: the verdict, then the system
// tool's outcome or the refusal. It returns the verdict.
func (r *crewRun) step(client xctv1.ValidatorServiceClient, n int, tool string, a map[string]any, goal string) *xctv1.Verdict {
	r.t.Helper()
	agent := r.sess.Current().Name
	plan := r.sess.Plan()
	r.record(agent, crew.Merge(data{lctl.TypeStepStart, map[string]any{"step": n, "tool": tool, "arguments": a, "intent": goal}}, r.sess.StepStartFields(plan.Model)))
	req := stepRequest(r.t, "run-v", n, tool, a)
	req.Proposal.Goal = goal
	req.Crew = r.sess.CrewContext(tool, a, goal)
	resp, err := client.Validate(context.Background(), req)
	if err != nil {
		r.t.Fatal(err)
	}
	v := resp.GetVerdict()
	r.record("validator", data{lctl.TypeVerdict, map[string]any{"step": n, "tool": tool, "decision": v.GetDecision().String(), "code": v.GetError().GetCode()}})
	outcome := "success"
	switch {
	case v.GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		e := v.GetError()
		r.record("validator", data{lctl.TypeError, map[string]any{"step": n, "code": e.GetCode(), "category": e.GetCategory(), "type": e.GetType(),
			"message": e.GetMessage(), "details": e.GetDetails().AsMap()}})
		outcome = "denied"
	case crew.IsSystemTool(tool):
		out := r.sess.Carry(agent, tool, a)
		for _, e := range out.Events {
			r.record(e.Agent, e)
		}
		if out.Signal != nil {
			r.t.Fatalf("step %d: %v", n, out.Signal)
		}
		r.record("executor", data{lctl.TypeToolCall, map[string]any{"step": n, "tool": tool, "output": out.Result, "status": "success"}})
	default:
		r.record("executor", data{lctl.TypeToolCall, map[string]any{"step": n, "tool": tool, "output": "ok", "status": "success"}})
	}
	r.record(agent, data{lctl.TypeStepEnd, map[string]any{"step": n, "outcome": outcome}})
	if cp, err := r.sess.Checkpoint(); err != nil {
		r.t.Fatal(err)
	} else if cp != nil {
		r.record(cp.Agent, *cp)
	}
	return v
}

// TestCrewVerification: a step relying on a fact in the verify band is
// sent to the reviewer; the handoff makes the reviewer's step a verify
// step, and its assessment lifts the fact by consensus. The session and
// the real validator (gRPC on loopback) agree at every step.
func TestCrewVerification(t *testing.T) {
	t.Parallel()
	client := serve(t, newService(t, ""))
	c, err := crew.LoadFile("../../examples/crews/security-review.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := crew.NewSession(c, "run-v", nil, crew.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &crewRun{t: t, sess: sess}
	allowed := xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	if v := r.step(client, 1, "facts.add", map[string]any{"id": "F1", "text": "SQL built from user input", "confidence": 0.5, "source": "static-analysis"}, "record it"); v.GetDecision() != allowed {
		t.Fatalf("facts.add: %v", v)
	}
	v := r.step(client, 2, "fs.read", map[string]any{"path": "app.py"}, "read around F1")
	if v.GetError().GetCode() != string(wire.CodeVerification) || v.GetError().GetDetails().AsMap()["verifier"] != "security-reviewer" {
		t.Fatalf("a step on F1 at 0.5: %v", v)
	}
	if k := sess.StepKind(); k != crew.KindRetry {
		t.Fatalf("after the refusal the step kind is %s", k)
	}
	if v := r.step(client, 3, "xct.handoff", map[string]any{"to": "security-reviewer", "summary": "verify F1"}, "have F1 verified"); v.GetDecision() != allowed {
		t.Fatalf("handoff: %v", v)
	}
	plan := sess.Plan()
	if plan.Agent.Name != "security-reviewer" || plan.Kind != crew.KindVerify || !strings.Contains(plan.Brief, "asked to verify") {
		t.Fatalf("the reviewer's plan: %s %s\n%s", plan.Agent.Name, plan.Kind, plan.Brief)
	}
	if v := r.step(client, 4, "facts.update", map[string]any{"id": "F1", "confidence": 0.9, "reason": "verified", "fields": map[string]any{"severity": "high"}}, "verify F1"); v.GetDecision() != allowed {
		t.Fatalf("facts.update: %v", v)
	}
	mod := r.events[len(r.events)-3] // then the tool_call and the step_end (no checkpoint: no handoff since the last)
	if mod.Type != lctl.TypeFactModified || mod.Data["consensus"] == nil {
		t.Fatalf("the assessment: %s %v", mod.Type, mod.Data)
	}
	if k := sess.StepKind(); k != crew.KindContinue || sess.Facts().Fact("F1").Confidence != 0.9 {
		t.Fatalf("after verifying: kind %s, F1 %v", k, sess.Facts().Fact("F1").Confidence)
	}
	cps := 0
	for _, e := range r.events {
		if e.Type == lctl.TypeCheckpoint {
			cps++
		}
	}
	if cps != 1 {
		t.Fatalf("%d checkpoints, want the handoff's", cps)
	}
	// A rebuilt session agrees.
	again, err := crew.NewSession(c, "run-v", r.events, crew.SessionOptions{})
	if err != nil || again.StepKind() != crew.KindContinue || again.Facts().Fact("F1").Confidence != 0.9 {
		t.Fatalf("rebuilt: %v", err)
	}
}

// TestCrewHandoffProvenance (session 18): a receiver's proposal is judged
// as the receiver's, whatever the handoff that asked for it said; the
// policy can now see who asked. crew.handed_by is the agent whose handoff
// gave this one control ("" for the entry agent, and outside a crew),
// crew.handoff_path every agent that held control, in order. Here "no write that
// the analyzer asked for": the fixer's write is denied when the analyzer
// handed to it, directly or through the reviewer, and allowed when the
// reviewer alone did.
func TestCrewHandoffProvenance(t *testing.T) {
	t.Parallel()
	s := newService(t, `rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: no-write-an-analyzer-asked-for
    effect: deny
    tools: ["fs.write"]
    when: crew.handed_by == "code-analyzer" || (crew.handoff_path.size() > 1 && crew.handoff_path[0] == "code-analyzer" && !("security-reviewer" in crew.handoff_path))
  - id: the-reviewers-fixes-need-a-human
    effect: require_approval
    tools: ["fs.write"]
    when: '"security-reviewer" in crew.handoff_path && crew.handoff_path.exists(a, a == "code-analyzer")'
`)
	fixer := func(path ...string) *xctv1.CrewContext {
		return &xctv1.CrewContext{Crew: "security-review", CrewSha256: strings.Repeat("ab", 32), Agent: "fix-implementer", AgentType: "executor",
			Tools: []string{"fs.write"}, Thresholds: &xctv1.CrewThresholds{Proceed: 0.8, Warn: 0.6, Verify: 0.4}, HandoffPath: path}
	}
	write := map[string]any{"path": "app.py", "content": "fixed"}
	for _, tc := range []struct {
		name string
		cc   *xctv1.CrewContext
		want xctv1.VerdictDecision
	}{
		{"handed by the analyzer", fixer("code-analyzer", "fix-implementer"), deny},
		{"handed by the reviewer the analyzer asked", fixer("code-analyzer", "security-reviewer", "fix-implementer"), approval},
		{"handed by the reviewer alone", fixer("security-reviewer", "fix-implementer"), allow},
		{"the entry agent", fixer("fix-implementer"), allow},
		{"no path (an older orchestrator)", fixer(), allow},
	} {
		req := request(t, "fs.write", write)
		req.Crew = tc.cc
		if v := validate(t, s, req); v.GetDecision() != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, v.GetDecision(), v.GetReasons(), tc.want)
		}
	}
	// Outside a crew the variables are empty.
	if v := validate(t, s, request(t, "fs.write", write)); v.GetDecision() != allow {
		t.Errorf("no crew: %v %v", v.GetDecision(), v.GetReasons())
	}
}
