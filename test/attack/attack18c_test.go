package attack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	t.Parallel()
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

// Session 18 (attack18c): the chain's approval_requested recorded the
// preview's kind and content, not the digest of the file the approval
// bound, so a reader could not tell which file a human approved a change
// of. It now records it, but only for a preview shown whole: the plain
// SHA-256 of a file whose preview was redacted (a secret replaced in the
// diff) or withheld (a file the run may not read) would let any reader of
// the chain confirm guesses of its content. Those get the digest's
// redaction marker, keyed, which the step's result (fs.write's
// previous_checksum) carries too; the plain digest is nowhere on the
// chain, nor in the approver's list.
func TestAttackApprovalRecordsTheBoundFileOnlyWhereItsPreviewIsShown(t *testing.T) {
	t.Parallel()
	const policy = `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: keys-are-not-read
    effect: deny
    tools: ["fs.read"]
    when: 'args.path.lowerAscii().endsWith(".key")'
  - {id: writes-need-a-human, effect: require_approval, effects: [reversible, irreversible]}
`
	c := startBindCluster(t, withTools(t, "", policy))
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dev"))
	for _, tc := range []struct {
		path, content string
		keyed         bool // the digest reaches the chain only as a marker
	}{
		{"notes.txt", "old notes\n", false},
		{"deploy.key", "KEY-MATERIAL-a4d9e2\n", true}, // the run may not read it
		{"db.env", "db_password: hunter2-q7\n", true}, // the diff's secret is redacted
	} {
		t.Run(tc.path, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(c.workspace, tc.path), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(tc.content))
			plain := hex.EncodeToString(sum[:])
			c.writeScript(t, "a.yaml", script(step("fs.write", fmt.Sprintf(`{path: %s, content: "rotated\n"}`, tc.path))))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			listed := waitApproval(t, c, "bob", id).GetPreview().GetBaseDigest()
			if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Reason: "ok"}); err != nil {
				t.Fatal(err)
			}
			if run := c.waitRun(t, "alice", id); run.GetSteps()[0].GetResponse().GetError() != nil {
				t.Fatalf("the approved write: %v", run.GetSteps()[0].GetResponse().GetError())
			}
			var bound, previous string
			var chainText string
			testutil.Eventually(t, 30*time.Second, func() error {
				chain, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
				if err != nil {
					return err
				}
				chainText, bound, previous = chain.String(), "", ""
				for _, ev := range chain.GetEvents() {
					d := ev.GetData().AsMap()
					switch ev.GetType() {
					case "approval_requested":
						pv, _ := d["preview"].(map[string]any)
						bound, _ = pv["base_digest"].(string)
					case "tool_call":
						out, _ := d["output"].(map[string]any)
						previous, _ = out["previous_checksum"].(string)
					}
				}
				if previous == "" {
					return fmt.Errorf("no tool_call on %s yet", id)
				}
				return nil
			})
			if !tc.keyed {
				if bound != "sha256:"+plain || listed != bound || previous != bound {
					t.Errorf("a preview shown whole: the chain's base %q, the approver's %q, the result's previous_checksum %q, want the file's digest sha256:%s", bound, listed, previous, plain)
				}
				return
			}
			if strings.Contains(chainText, plain) || strings.Contains(listed, plain) {
				t.Errorf("the digest of %s, whose preview was redacted, reached the chain or the approver's list", tc.path)
			}
			if !strings.HasPrefix(bound, "[REDACTED ") || listed != bound || previous != bound {
				t.Errorf("a redacted preview: the chain's base %q, the approver's %q, the result's previous_checksum %q, want one redaction marker", bound, listed, previous)
			}
		})
	}
}
