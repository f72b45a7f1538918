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

// Session 9 (trust9): attacks that combine allowed actions, each first
// seen to get through, then closed.

// A rollback acted where no policy looked, through a link made after the
// step. Every step is allowed (the default policy; config-approval.yaml):
// run A writes d/FILE (reversible) with the bytes the target holds (the
// model may read it); run B deletes that file and the directory
// (reversible) and makes d a link with a reversible program of the
// operator's (ln). When an operator rolled run A back, xct.undo removed
// "the file run A created" at d/FILE, which then was the target (its
// checksum matched), and the link: .git/HEAD, which the fs tools never
// change (a protected path), or config/app.yaml, which the shipped
// config-approval.yaml lets change only with a human's approval, was
// gone. The undo now checks its paths as the fs tools do.
func TestAttackRollbackThroughALinkMadeAfterTheStep(t *testing.T) {
	requireSandbox(t)
	for _, tc := range []struct {
		name, policy, dir, file, content, refusal string
	}{
		{"into a protected path", "", ".git", "HEAD", "ref: refs/heads/main\n", "protected path"},
		{"past an approval", "config-approval.yaml", "config", "app.yaml", "mode: safe\n", "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := ""
			if tc.policy != "" {
				policy = shippedPolicy(t, tc.policy)
			}
			tools := "shell:\n  binaries:\n    - {name: ln, effect: reversible, allow_flags: [-s]}\n"
			c := startBindCluster(t, withTools(t, tools, policy))
			target := filepath.Join(tc.dir, tc.file)
			if err := os.MkdirAll(filepath.Join(c.workspace, tc.dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c.workspace, target), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			c.writeScript(t, "a.yaml", script(
				step("fs.read", fmt.Sprintf(`{path: %s}`, target)),
				step("fs.write", fmt.Sprintf(`{path: d/%s, content: %q}`, tc.file, tc.content)),
			))
			a := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if got := stepErrors(a); fmt.Sprint(got) != "[ ]" {
				t.Fatalf("run A's steps: %v", got)
			}
			c.writeScript(t, "b.yaml", script(
				step("fs.delete", fmt.Sprintf(`{path: d/%s}`, tc.file)),
				step("fs.delete", `{path: d}`),
				step("shell.exec", fmt.Sprintf(`{argv: [ln, -s, %s, d]}`, tc.dir)),
			))
			b := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:b.yaml"})
			if got := stepErrors(b); fmt.Sprint(got) != "[  ]" {
				t.Fatalf("run B's steps: %v: %v", got, b.GetSteps())
			}
			if fi, err := os.Lstat(filepath.Join(c.workspace, "d")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("run B made no link d: %v %v", fi, err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rb, err := c.orchestratorAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: a.GetRunId()})
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := readWS(t, c.workspace, target); !ok || got != tc.content {
				t.Fatalf("the rollback changed %s through the link d: %q (exists %v); rollback %v", target, got, ok, rb)
			}
			if rb.GetStatus() != "failed" || len(rb.GetUndone()) != 0 || !strings.Contains(rb.GetMessage(), tc.refusal) {
				t.Errorf("rollback: %v", rb)
			}
			if fi, err := os.Lstat(filepath.Join(c.workspace, "d")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link d: %v %v", fi, err)
			}
		})
	}
}
