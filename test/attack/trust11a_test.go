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

// Session 11 (trust11a): the executor's side of the veto, combinations of
// actions each allowed on its own.

// TestAttackRollbackRestoresAHardLinkedFile: fs.read refuses a file with
// other hard links (one may be outside the workspace: a link made on the
// host), but fs.write and fs.delete read such a file into the step's
// compensation, and a rollback put that content back as a file with one
// name, which fs.read then read. On main: the model's fs.write and
// fs.delete of two such links succeeded (fs.write answering with the
// outside file's checksum), the operator's rollback restored both, and
// the next run's fs.read gave the model the outside secret twice. Now the
// mutating fs tools refuse such a file (PERMISSION_DENIED), so there is
// nothing to restore; the run's plain write is still undone.
func TestAttackRollbackRestoresAHardLinkedFile(t *testing.T) {
	c := startBindCluster(t, withTools(t, "", permissivePolicy))
	out := outsideFile(t, c)
	for _, name := range []string{"hl.txt", "hl2.txt"} {
		if err := os.Link(out, filepath.Join(c.workspace, name)); err != nil {
			t.Fatal(err)
		}
	}
	c.writeScript(t, "a.yaml", script(
		step("fs.write", `{path: hl.txt, content: "x"}`),
		step("fs.delete", `{path: hl2.txt}`),
		step("fs.write", `{path: notes.txt, content: "n"}`),
	))
	run := c.runToEnd(t, "dev", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := stepErrors(run); fmt.Sprint(got) != "[PERMISSION_DENIED PERMISSION_DENIED ]" {
		t.Errorf("the run's steps: %v", got)
	}
	if s := fmt.Sprint(run.GetSteps()); strings.Contains(s, "outside secret") || strings.Contains(s, "557c6d0a") {
		t.Errorf("the run told the outside file: %s", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rb, err := c.orchestratorAs(t, "dev").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
	if err != nil || rb.GetStatus() != "done" || fmt.Sprint(rb.GetUndone()) != "[3]" {
		t.Errorf("rollback: %v %v", rb, err)
	}
	c.writeScript(t, "b.yaml", script(step("fs.read", `{path: hl.txt}`), step("fs.read", `{path: hl2.txt}`)))
	run = c.runToEnd(t, "dev", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:b.yaml"})
	if s := fmt.Sprint(run.GetSteps()); strings.Contains(s, "outside secret") {
		t.Fatalf("the outside file was read after the rollback: %v", stepErrors(run))
	}
	if got := stepErrors(run); fmt.Sprint(got) != "[PERMISSION_DENIED PERMISSION_DENIED]" {
		t.Errorf("the reads: %v", got)
	}
	untouched(t, out)
	if _, ok := readWS(t, c.workspace, "notes.txt"); ok {
		t.Error("notes.txt, the run's plain write, was not undone")
	}
}
