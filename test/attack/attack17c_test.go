package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
)

// devsWritesNeedAHuman lets runs read and make reversible changes, and
// has dev's writes wait for a human: alice's do not.
const devsWritesNeedAHuman = `rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: devs-writes-need-a-human
    effect: require_approval
    tools: ["fs.write"]
    when: 'run.principal == "dev"'
`

// Session 17 (attack17c): a human's approval of an fs.write bound the
// step's arguments, not the file the human saw the diff against. dev's
// write of config/app.yaml waits for bob, who is shown the diff against
// the file as it is; meanwhile alice's run (allowed, no human) changes
// the file; bob approves what he saw, and the write replaced alice's
// change, which no one approved replacing (on main). The preview now
// names the file it was made against (a digest, or "absent"), the
// validator signs it into the grant of the approved step, and the
// executor writes only while the file is still that one: otherwise the
// step fails CHANGED_SINCE_PREVIEW, nothing written.
func TestAttackApprovedWriteOverFileChangedSinceThePreview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, before, meanwhile string // before "": no file when the preview was made
		refused                 bool
	}{
		{"a file changed meanwhile", "mode: safe\n", "mode: safe\nowner: alice\n", true},
		{"a file created meanwhile", "", "owner: alice\n", true},
		{"a file deleted meanwhile", "mode: safe\n", "-", true},
		{"the file as previewed", "mode: safe\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startBindCluster(t, withTools(t, "", devsWritesNeedAHuman))
			const file = "config/app.yaml"
			if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.before != "" {
				if err := os.WriteFile(filepath.Join(c.workspace, file), []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c.writeScript(t, "dev.yaml", script(step("fs.write", fmt.Sprintf(`{path: %s, content: "mode: fast\n"}`, file))))
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:dev.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			a := waitApproval(t, c, "bob", id)
			if a.GetPreview().GetKind() != "diff" || !strings.Contains(a.GetPreview().GetContent(), "+mode: fast") {
				t.Fatalf("bob's preview: %v", a.GetPreview())
			}
			// Another run, which the policy lets change the file without a
			// human, changes it while bob looks at the diff.
			switch tc.meanwhile {
			case "":
			case "-":
				c.writeScript(t, "alice.yaml", script(step("fs.delete", fmt.Sprintf(`{path: %s}`, file))))
			default:
				c.writeScript(t, "alice.yaml", script(step("fs.write", fmt.Sprintf(`{path: %s, content: %q}`, file, tc.meanwhile))))
			}
			if tc.meanwhile != "" {
				other := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:alice.yaml"})
				if got := stepErrors(other); fmt.Sprint(got) != "[ ]" && fmt.Sprint(got) != "[]" {
					t.Fatalf("alice's change: %v", got)
				}
			}
			if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Reason: "looks right"}); err != nil {
				t.Fatal(err)
			}
			run := c.waitRun(t, "dev", id)
			got, exists := readWS(t, c.workspace, file)
			s := run.GetSteps()[0]
			e := s.GetResponse().GetError()
			if !tc.refused {
				if e != nil || got != "mode: fast\n" {
					t.Fatalf("the approved write of the file bob saw: %v, file %q", e, got)
				}
				return
			}
			want, wantExists := tc.meanwhile, true
			if tc.meanwhile == "-" {
				want, wantExists = "", false
			}
			if got != want || exists != wantExists {
				t.Errorf("%s after bob approved: %q (exists %v), want alice's change kept: %q (exists %v)", file, got, exists, want, wantExists)
			}
			if e.GetCode() != "CHANGED_SINCE_PREVIEW" || !strings.Contains(e.GetMessage(), "changed since the preview") ||
				!strings.Contains(e.GetMessage(), "nothing was written") || e.GetDetails().AsMap()["changed_since_preview"] != true {
				t.Errorf("the approved step's error: %v, want CHANGED_SINCE_PREVIEW saying nothing was written", e)
			}
			if s.GetState() != xctv1.StepState_STEP_STATE_FAILED || e.GetDetails().AsMap()["outcome_unknown"] == true {
				t.Errorf("the approved step: %v (%v), want a definite failure", s.GetState(), e.GetDetails().AsMap())
			}
			// The chain says the step ended in an error, and why.
			tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dev"))
			var ends []string
			testutil.Eventually(t, 30*time.Second, func() error {
				chain, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
				if err != nil {
					return err
				}
				ends = nil
				for _, ev := range chain.GetEvents() {
					if ev.GetType() == "step_end" {
						d := ev.GetData().AsMap()
						summary, _ := d["output_summary"].(string)
						ends = append(ends, fmt.Sprint(d["outcome"], " ", strings.Contains(summary, "changed since the preview")))
					}
				}
				if len(ends) == 0 {
					return fmt.Errorf("no step_end on %s yet", id)
				}
				return nil
			})
			if fmt.Sprint(ends) != "[error true]" {
				t.Errorf("the chain's step_end events (outcome, names the change): %v, want one error naming it", ends)
			}
		})
	}
}
