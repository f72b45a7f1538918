package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// devsChangesNeedAHuman lets runs read and make reversible changes, and
// has dev's deletes and moves wait for a human: alice's do not.
const devsChangesNeedAHuman = `rules:
  - {id: allow-reversible, effect: allow, effects: [read, reversible]}
  - id: devs-changes-need-a-human
    effect: require_approval
    tools: ["fs.delete", "fs.move"]
    when: 'run.principal == "dev"'
`

// Session 18 (attack18c): fs.delete and fs.move had no preview. dev's
// delete (or move) of config/app.yaml waits for bob, who is shown the
// proposal alone; meanwhile alice's run (allowed, no human) rewrites the
// file; bob approves, and dev's step deleted (moved) alice's new file,
// which no one saw (on main). Their previews now show what they would
// remove or move and name its digest; the approval binds it, and the
// step fails CHANGED_SINCE_PREVIEW, leaving alice's file where it is.
func TestAttackApprovedDeleteOrMoveOfAFileChangedSinceThePreview(t *testing.T) {
	const file, moved = "config/app.yaml", "config/old.yaml"
	for _, tc := range []struct {
		name, tool, args, shows string
		changed                 bool
	}{
		{"a delete, the file changed meanwhile", "fs.delete", fmt.Sprintf(`{path: %s}`, file), "-mode: safe", true},
		{"a move, the file changed meanwhile", "fs.move", fmt.Sprintf(`{from: %s, to: %s}`, file, moved), "would be moved to " + moved, true},
		{"a delete of the file as previewed", "fs.delete", fmt.Sprintf(`{path: %s}`, file), "-mode: safe", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startBindCluster(t, withTools(t, "", devsChangesNeedAHuman))
			if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c.workspace, file), []byte("mode: safe\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c.writeScript(t, "dev.yaml", script(step(tc.tool, tc.args)))
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:dev.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			a := waitApproval(t, c, "bob", id)
			if !strings.Contains(a.GetPreview().GetContent(), tc.shows) || !strings.HasPrefix(a.GetPreview().GetBaseDigest(), "sha256:") {
				t.Errorf("bob's preview: %v, want it to show %q and name the file's digest", a.GetPreview(), tc.shows)
			}
			if tc.changed {
				c.writeScript(t, "alice.yaml", script(step("fs.write", fmt.Sprintf(`{path: %s, content: "mode: safe\nowner: alice\n"}`, file))))
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
			_, movedExists := readWS(t, c.workspace, moved)
			s := run.GetSteps()[0]
			e := s.GetResponse().GetError()
			if !tc.changed {
				if e != nil || exists {
					t.Fatalf("the approved delete of the file bob saw: %v, file there %v", e, exists)
				}
				return
			}
			if got != "mode: safe\nowner: alice\n" || movedExists {
				t.Errorf("%s after bob approved: %q (exists %v; %s exists %v), want alice's file kept where it was", file, got, exists, moved, movedExists)
			}
			if e.GetCode() != "CHANGED_SINCE_PREVIEW" || s.GetState() != xctv1.StepState_STEP_STATE_FAILED {
				t.Errorf("the approved step: %v, %v, want a definite CHANGED_SINCE_PREVIEW", s.GetState(), e)
			}
		})
	}
}
