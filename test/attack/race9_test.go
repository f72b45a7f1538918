package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

// Session 9 (race9): a walk around the executor's refusal of a path
// through a symbolic link, by two runs in one workspace.

// Run B's allowed program (perl stands for any program that runs code the
// model can write: make, a test runner, an npm script) swaps the
// directory d with a link to .git, over and over, while run A's allowed
// fs.write steps write d/hookN. Each write checked its path (no link on
// it, nothing protected) and then opened it by name: when the link was
// swapped in between, the file landed in .git, which the fs tools never
// change (a hook there, or .git/config, is code a later git runs). The
// tools now resolve what they act on without following any link; the
// policy here allows everything, so the executor is what must stop it.
func TestAttackLinkSwappedInByAnotherRun(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	const writes = 900
	policy := "budgets: {max_steps: 1000, max_consecutive_errors: 0}\nrules:\n  - {id: allow-all, effect: allow, tools: [\"*\"]}\n"
	tools := "shell:\n  timeout: 2m\n  binaries:\n    - {name: perl, effect: reversible, allow_flags: [-e]}\n"
	c := startBindCluster(t, withTools(t, tools, policy))
	for _, d := range []string{".git", "d"} {
		if err := os.MkdirAll(filepath.Join(c.workspace, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".git", filepath.Join(c.workspace, "l")); err != nil {
		t.Fatal(err)
	}
	// Run B: exchange d (the directory) and l (the link) atomically
	// (renameat2 RENAME_EXCHANGE), holding the directory for a varying
	// while and the link for a tenth of it, until told to stop. The holds
	// go from nothing to a million turns of an empty loop (~60 ms here):
	// on a quiet machine the short ones alone outran every write (a write
	// under -race takes longer than 30,000 turns), so none succeeded and
	// the test could not tell a raced swap from a refusal of every write.
	sysRenameat2, ok := map[string]int{"amd64": 316, "arm64": 276}[runtime.GOARCH]
	if !ok {
		t.Fatalf("renameat2's number on %s is not known to this test", runtime.GOARCH)
	}
	flip := fmt.Sprintf(`open(my $f, ">", "flipping") or die; close $f; my $t = time; my @spin = (0, 50, 300, 1000, 3000, 10000, 30000, 100000, 300000, 1000000); my $n = 0; my ($d, $l) = ("d", "l");
until (-e "stop" || time - $t > 100) { syscall(%d, -100, $d, -100, $l, 2) == 0 or die "renameat2: $!"; $n++; my $k = $spin[int($n / 2) %% 10]; $k = int($k / 10) if $n %% 2; for (my $i = 0; $i < $k; $i++) {} }`, sysRenameat2)
	c.writeScript(t, "b.yaml", script(step("shell.exec", fmt.Sprintf(`{argv: [perl, -e, %q]}`, flip))))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	started, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "build", Model: "scripted:b.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		_, err := os.Stat(filepath.Join(c.workspace, "flipping"))
		return err // run B's program has not started swapping
	})

	// Run A: writes into d while it is swapped.
	var steps []string
	for i := range writes {
		steps = append(steps, step("fs.write", fmt.Sprintf(`{path: d/hook%d, content: "#!/bin/sh\n"}`, i)))
	}
	c.writeScript(t, "a.yaml", script(steps...))
	// 900 steps beside a busy loop: over 60 s under -race at load ~20.
	a := c.runToEndWithin(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml", MaxSteps: writes + 10}, 5*time.Minute)
	if err := os.WriteFile(filepath.Join(c.workspace, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := c.waitRun(t, "alice", started.GetRun().GetRunId())
	if got := stepErrors(b); len(got) != 1 || got[0] != "" {
		t.Fatalf("run B's program: %v %v", got, b.GetSteps())
	}

	codes := map[string]int{}
	for _, e := range stepErrors(a) {
		codes[e]++
	}
	inGit := 0
	des, err := os.ReadDir(filepath.Join(c.workspace, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "hook") {
			inGit++
		}
	}
	t.Logf("run A's %d writes: %v (step error codes); %d landed in .git", writes, codes, inGit)
	if n := len(stepErrors(a)); n != writes {
		t.Errorf("run A made %d steps, not %d", n, writes)
	}
	if codes[""] == 0 || codes[""] == writes {
		t.Errorf("run A's writes all succeeded or all failed: the swap was not raced (%v)", codes)
	}
	if inGit != 0 {
		t.Errorf("%d of run A's writes to d/hookN landed in .git through the link run B swapped in", inGit)
	}
}
