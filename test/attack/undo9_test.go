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

// Session 9 (undo9): a rollback's undo was judged as "xct.undo {step_id}",
// so no policy saw what it changed.

// rollbackAsync rolls run id back as principal; the response (or error)
// arrives on the channel.
func rollbackAsync(t *testing.T, c *bindCluster, principal, id string) <-chan error {
	t.Helper()
	orch := c.orchestratorAs(t, principal)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		rb, err := orch.RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id})
		if err == nil && (rb.GetStatus() != "done" || fmt.Sprint(rb.GetUndone()) != "[2 1]") {
			err = fmt.Errorf("rollback: %v", rb)
		}
		done <- err
	}()
	return done
}

// A rollback reverted an approved change with no human. Under the shipped
// config-approval.yaml a write under config/ waits for a human who is not
// the run's principal. dev (submitter and operator, as in `xct dev`)
// changes config/app.yaml in its run, bob approves, and dev then rolls the
// run back: the undo restored the old config/app.yaml with no one asked,
// because the validator judged only "xct.undo {step_id}" (a reversible
// tool, allowed). The undo now names its actions and each is judged as
// the fs tool it amounts to (a restore under config/ as fs.write there):
// it waits for a human too, and dev may not be that human. The other undo
// of the rollback (removing notes.txt, which the run created: fs.delete,
// allowed) is done without one.
func TestAttackRollbackRevertsAnApprovedChange(t *testing.T) {
	t.Parallel()
	for _, decision := range []string{"approve", "deny", "cancel"} {
		t.Run(decision, func(t *testing.T) {
			c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "config-approval.yaml")))
			if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c.workspace, "config", "app.yaml"), []byte("mode: safe\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c.writeScript(t, "a.yaml", script(
				step("fs.write", `{path: config/app.yaml, content: "mode: fast\n"}`),
				step("fs.write", `{path: notes.txt, content: "switched to fast\n"}`),
			))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "dev").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			if a := waitApproval(t, c, "bob", id); a.GetProposal().GetTool() != "fs.write" {
				t.Fatalf("the run's approval: %v", a)
			}
			if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true}); err != nil {
				t.Fatal(err)
			}
			if got := stepErrors(c.waitRun(t, "dev", id)); fmt.Sprint(got) != "[ ]" {
				t.Fatalf("the run's steps: %v", got)
			}
			if got, _ := readWS(t, c.workspace, "config/app.yaml"); got != "mode: fast\n" {
				t.Fatalf("config/app.yaml after the approved run: %q", got)
			}

			done := rollbackAsync(t, c, "dev", id)
			a := waitApproval(t, c, "bob", id) // failed here: no approval was asked for
			if a.GetProposal().GetTool() != "xct.undo" || a.GetRequestedBy() != "dev" ||
				!strings.Contains(a.GetPreview().GetContent(), `"path":"config/app.yaml"`) || !strings.Contains(a.GetPreview().GetContent(), `"op":"restore"`) {
				t.Fatalf("the undo's approval: %v", a)
			}
			if got := a.GetProposal().GetArguments().AsMap()["actions"]; fmt.Sprint(got) != "[map[op:restore path:config/app.yaml]]" {
				t.Errorf("the undo's judged actions: %v", got)
			}
			select {
			case err := <-done:
				t.Fatalf("the rollback ended while its undo waited for a human: %v", err)
			default:
			}
			if got, _ := readWS(t, c.workspace, "config/app.yaml"); got != "mode: fast\n" {
				t.Fatalf("config/app.yaml was reverted before a human decided: %q", got)
			}
			if _, ok := readWS(t, c.workspace, "notes.txt"); ok {
				t.Error("notes.txt (the allowed undo, done first) is still there")
			}
			// The run's principal may not decide its own undo.
			if _, err := c.validatorAs(t, "dev").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: fmt.Sprint(a.GetStep()), Approve: true}); err == nil {
				t.Fatal("dev approved its own undo")
			}
			if decision == "cancel" {
				// The rollback is cancelled while it waits: the undo ends
				// denied and its approval is withdrawn.
				if _, err := c.orchestratorAs(t, "dev").CancelRun(ctx, &xctv1.CancelRunRequest{RunId: id, Reason: "not now"}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{
				RunId: id, Step: fmt.Sprint(a.GetStep()), Approve: decision == "approve", Reason: "checked",
			}); err != nil {
				t.Fatal(err)
			}
			err = <-done
			// The run stays ended: an undo's approval on its chain does not
			// make it live again (for a takeover to resume, or a second
			// rollback to refuse as running).
			if r, gerr := c.orchestratorAs(t, "dev").GetRun(ctx, &xctv1.GetRunRequest{RunId: id}); gerr != nil || r.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
				t.Errorf("the run after its rollback: %v %v", r.GetRun().GetStatus(), gerr)
			}
			got, _ := readWS(t, c.workspace, "config/app.yaml")
			if decision == "approve" {
				if err != nil || got != "mode: safe\n" {
					t.Fatalf("after bob approved the undo: %v; config/app.yaml %q", err, got)
				}
				return
			}
			want := map[string]string{"deny": "APPROVAL_DENIED", "cancel": "cancelled while the undo waited"}[decision]
			if err == nil || !strings.Contains(err.Error(), "failed") || !strings.Contains(err.Error(), want) {
				t.Errorf("a rollback whose undo was not approved (%s): %v", decision, err)
			}
			if got != "mode: fast\n" {
				t.Errorf("config/app.yaml after the undo was not approved (%s): %q", decision, got)
			}
			if decision == "cancel" {
				if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{
					RunId: id, Step: fmt.Sprint(a.GetStep()), Approve: true,
				}); err == nil {
					t.Error("bob approved the undo of a cancelled rollback: its approval was not withdrawn")
				}
			}
		})
	}
}

// An undo that amounts to a denied change is refused. Under the shipped
// no-deletes.yaml the run creates notes.txt (fs.write, allowed); its undo
// removes the file, which is a delete, and fs.delete is denied. The undo
// was allowed as "xct.undo" (reversible) and the file deleted.
func TestAttackUndoIsADeniedDelete(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "no-deletes.yaml")))
	c.writeScript(t, "a.yaml", script(step("fs.write", `{path: notes.txt, content: "kept\n"}`)))
	run := c.runToEnd(t, "dev", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := stepErrors(run); fmt.Sprint(got) != "[]" {
		t.Fatalf("the run's steps: %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rb, err := c.orchestratorAs(t, "dev").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := readWS(t, c.workspace, "notes.txt"); !ok || got != "kept\n" {
		t.Fatalf("the undo deleted notes.txt under no-deletes.yaml: %q (exists %v); rollback %v", got, ok, rb)
	}
	if rb.GetStatus() != "failed" || len(rb.GetUndone()) != 0 || !strings.Contains(rb.GetMessage(), "fs.delete of notes.txt") ||
		!strings.Contains(rb.GetMessage(), "deletes are not allowed") {
		t.Errorf("rollback: %v", rb)
	}
}
