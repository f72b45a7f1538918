package executor

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// hostGit runs the host's git in dir as the next human would, with a
// home and configuration of its own; it returns the combined output.
func hostGit(tb testing.TB, dir string, args ...string) (string, error) {
	tb.Helper()
	cmd := osexec.Command("git", args...)
	cmd.Dir = dir
	home := tb.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=h", "GIT_AUTHOR_EMAIL=h@example.com", "GIT_COMMITTER_NAME=h", "GIT_COMMITTER_EMAIL=h@example.com"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestProtectedRefsThroughALinkedDirectory: a hook names its script
// through a directory that is a symbolic link a human made: `sh
// ci/check.sh` with ci -> tools, and `sh shared/run.sh` with shared
// leading out of the workspace (a checkout shared between projects).
// The first held on main (a link is checked as where it leads, and
// tools/ holds the hook's script). The second did not: the word leads
// out, so nothing was protected, and fs.delete of the link shared (a
// link is deleted itself) and fs.move of the model's own directory to
// shared were allowed: the next human's `git commit` ran the model's
// shared/run.sh. Now every link on the way from a protected entry to
// what it runs, in the workspace, is protected as a target is, also
// when it leads out: not moved, deleted or replaced by the fs tools.
func TestProtectedRefsThroughALinkedDirectory(t *testing.T) {
	if _, err := osexec.LookPath("git"); err != nil {
		t.Skip("no git on this host")
	}
	sb := newSandbox(t)
	if out, err := hostGit(t, sb.ws, "init", "-q", "-b", "main"); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	shared := filepath.Join(sb.dir, "shared-ci")
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/hooks/pre-commit": "#!/bin/sh\nsh ci/check.sh && sh shared/run.sh\n",
		"tools/check.sh":        "echo tools-check-ran\n",
		"src/main.go":           "package main\n",
	})
	writeFiles(t, shared, 0o755, map[string]string{"run.sh": "echo shared-run-ran\n"})
	must(t, os.Symlink("tools", filepath.Join(sb.ws, "ci")))
	must(t, os.Symlink(shared, filepath.Join(sb.ws, "shared")))
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	if r := exec(t, s, "fs.write", map[string]any{"path": "evil/check.sh", "content": "touch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write evil/check.sh: %v", r)
	}
	if r := exec(t, s, "fs.write", map[string]any{"path": "evil2/run.sh", "content": "touch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write evil2/run.sh: %v", r)
	}
	var done []string
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.move", map[string]any{"from": "ci", "to": "ci-old"}},
		{"fs.move", map[string]any{"from": "evil", "to": "ci"}},
		{"fs.delete", map[string]any{"path": "shared"}},
		{"fs.move", map[string]any{"from": "evil2", "to": "shared"}},
	} {
		r := exec(t, s, c.tool, c.args)
		if codeOf(r) == "" {
			done = append(done, c.tool+" "+strings.Join([]string{anyString(c.args["from"]), anyString(c.args["path"]), anyString(c.args["to"])}, " "))
			continue
		}
		if codeOf(r) != string(wire.CodePermissionDenied) && codeOf(r) != string(wire.CodeInvalidArgument) {
			t.Errorf("%s %v: %v", c.tool, c.args, r)
		}
	}
	// The next human commits: the hook runs.
	out, err := hostGit(t, sb.ws, "commit", "-q", "--allow-empty", "-m", "x")
	if _, serr := os.Stat(mark); serr == nil {
		t.Fatalf("the next human's git commit ran the model's script (the fs tools did %v): %s", done, out)
	}
	if len(done) > 0 {
		t.Errorf("the fs tools moved or deleted a link a hook's script is reached through: %v", done)
	}
	if err != nil || !strings.Contains(out, "tools-check-ran") || !strings.Contains(out, "shared-run-ran") {
		t.Errorf("git commit: %v %s", err, out)
	}
	// Links no protected entry goes through stay the model's to move.
	must(t, os.Symlink("src", filepath.Join(sb.ws, "srclink")))
	expireLinkTargets(s)
	if r := exec(t, s, "fs.move", map[string]any{"from": "srclink", "to": "srclink2"}); codeOf(r) != "" {
		t.Errorf("fs.move srclink: %v", r)
	}
}

func anyString(v any) string {
	s, _ := v.(string)
	return s
}
