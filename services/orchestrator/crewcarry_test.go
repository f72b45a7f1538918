package orchestrator

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/lctl"
)

// Issue 12, session 13: a crew's system tool (facts.add, facts.update,
// xct.handoff) acts by recording its event on the chain (fact_added,
// fact_modified, handoff) before the step's tool_call. When that event is
// stored and the writer learns nothing of it (its acknowledgement lost, the
// orchestrator killed right after the write), the run is taken over with
// the step open and the effect already on the chain. Before the fix, the
// takeover carried the tool out again from a session that had already
// applied it: the handoff's step was recorded as NOT_IN_CONTROL ("finder
// is not in control (checker is)") and the fact's as a refusal (it
// exists), so the chain said a step that acted had failed, and the model
// was told to do it again. Now the step's outcome is the effect on the
// chain, recorded once. The step's other events (step_start, verdict,
// tool_call, step_end) and the crew's checkpoint after the handoff's
// step, each stored unseen, are guards: they passed before the fix too.
func TestCrewSystemToolLandedUnseen(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{lctl.TypeFactAdded, lctl.TypeHandoff, lctl.TypeFactModified, lctl.TypeStepStart, lctl.TypeVerdict, lctl.TypeToolCall, lctl.TypeStepEnd, lctl.TypeCheckpoint} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			model := newGatedModel(
				`{"next_step": {"tool": "facts.add", "arguments": {"id": "F1", "text": "a finding", "confidence": 0.9, "source": "scan"}, "goal": "record it"}}`,
				`{"next_step": {"tool": "xct.handoff", "arguments": {"to": "checker", "summary": "check F1"}, "goal": "hand over"}}`,
				`{"next_step": {"tool": "facts.update", "arguments": {"id": "F1", "confidence": 0.8, "reason": "checked"}, "goal": "assess F1"}}`,
				step("test.count", 1),
			)
			f := newFixture(t, model)
			s, loser := f.launchLossy("orch-a", model)
			loser.LoseNext(func(subject string, body []byte) bool {
				return strings.HasPrefix(subject, "lctl.chain.") && bytes.Contains(body, []byte(`"type":"`+typ+`"`))
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "find and check", Crew: []byte(handoverCrew), CrewFile: "pair.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			events := f.waitEnd(id)
			select {
			case <-loser.Lost:
			default:
				t.Fatalf("no acknowledgement was lost:\n%s", describe(events))
			}
			if len(only(events, TypeRunResumed)) == 0 {
				t.Fatalf("no takeover after the lost acknowledgement:\n%s", describe(events))
			}
			if errs := only(events, lctl.TypeError); len(errs) != 0 {
				t.Fatalf("a step that acted was recorded as an error: %v\n%s", errs[0].Data, describe(events))
			}
			if err := lctl.Verify(events); err != nil {
				t.Fatalf("chain does not verify: %v", err)
			}
			if last := events[len(events)-1]; last.Type != lctl.TypeRunFinished || last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
			for i, e := range only(events, lctl.TypeStepStart) {
				if int(num(e.Data, "step")) != i+1 || i >= 4 {
					t.Fatalf("steps are not 1..4 once each:\n%s", describe(events))
				}
			}
			outputs := map[string]map[string]any{}
			for _, e := range only(events, lctl.TypeToolCall) {
				tool := str(e.Data, "tool")
				if _, twice := outputs[tool]; twice {
					t.Fatalf("two tool_call events of %s:\n%s", tool, describe(events))
				}
				outputs[tool], _ = e.Data["output"].(map[string]any)
			}
			if out := outputs["xct.handoff"]; out["handed_to"] != "checker" || num(out, "depth") != 1 {
				t.Fatalf("the handoff's result %v", out)
			}
			for _, tool := range []string{"facts.add", "facts.update"} {
				if fact, _ := outputs[tool]["fact"].(map[string]any); fact["id"] != "F1" {
					t.Fatalf("%s's result %v", tool, outputs[tool])
				}
			}
			if cons, _ := outputs["facts.update"]["consensus"].(map[string]any); cons == nil {
				t.Fatalf("facts.update's result has no consensus: %v", outputs["facts.update"])
			}
			for _, want := range []string{lctl.TypeFactAdded, lctl.TypeHandoff, lctl.TypeFactModified} {
				if n := len(only(events, want)); n != 1 {
					t.Fatalf("%d %s events, want 1:\n%s", n, want, describe(events))
				}
			}
			if n := len(only(events, lctl.TypeToolCall)); n != 4 {
				t.Fatalf("%d tool_call events, want 4:\n%s", n, describe(events))
			}
			if c := f.count.count(1); c != 1 {
				t.Fatalf("count 1 ran %d times", c)
			}
		})
	}
}

// The same for a handoff whose contracts are checked: its carry records
// the two contract_validation events, then the handoff. The first
// validation is stored unseen; the takeover records only what the chain
// lacks (before the fix the carry ran again from the start: the output
// contract's validation was on the chain twice).
func TestCrewHandoffValidationLandedUnseen(t *testing.T) {
	t.Parallel()
	crewFile := handoverCrew + `contracts:
  finder:
    outputs:
      - type: fact
        required_fields: [id, text]
        confidence_min: 0.5
  checker:
    inputs:
      - type: fact
        confidence_min: 0.5
`
	model := newGatedModel(
		`{"next_step": {"tool": "facts.add", "arguments": {"id": "F1", "text": "a finding", "confidence": 0.9, "source": "scan"}, "goal": "record it"}}`,
		`{"next_step": {"tool": "xct.handoff", "arguments": {"to": "checker", "summary": "check F1"}, "goal": "hand over"}}`,
		step("test.count", 1),
	)
	f := newFixture(t, model)
	s, loser := f.launchLossy("orch-a", model)
	loser.LoseNext(func(subject string, body []byte) bool {
		return strings.HasPrefix(subject, "lctl.chain.") && bytes.Contains(body, []byte(`"type":"`+lctl.TypeContractValidation+`"`))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "find and check", Crew: []byte(crewFile), CrewFile: "pair.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	events := f.waitEnd(id)
	select {
	case <-loser.Lost:
	default:
		t.Fatalf("no acknowledgement was lost:\n%s", describe(events))
	}
	if len(only(events, TypeRunResumed)) == 0 {
		t.Fatalf("no takeover after the lost acknowledgement:\n%s", describe(events))
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	if last := events[len(events)-1]; last.Type != lctl.TypeRunFinished || last.Data["status"] != "done" {
		t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
	}
	if errs := only(events, lctl.TypeError); len(errs) != 0 {
		t.Fatalf("a step that acted was recorded as an error: %v\n%s", errs[0].Data, describe(events))
	}
	var dirs []string
	for _, e := range only(events, lctl.TypeContractValidation) {
		dirs = append(dirs, str(e.Data, "direction")+":"+str(e.Data, "status"))
	}
	if strings.Join(dirs, ",") != "output:passed,input:passed" {
		t.Fatalf("contract validations %v, want the output's then the input's, once each:\n%s", dirs, describe(events))
	}
	if n := len(only(events, lctl.TypeHandoff)); n != 1 {
		t.Fatalf("%d handoffs:\n%s", n, describe(events))
	}
	if n := len(only(events, lctl.TypeToolCall)); n != 3 {
		t.Fatalf("%d tool_call events, want 3:\n%s", n, describe(events))
	}
}
