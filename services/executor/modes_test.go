package executor

import (
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// nonRootEnv marks the test binary run again as a non-root user by
// asNonRoot.
const nonRootEnv = "XCT_TEST_AS_NON_ROOT"

// nonRootUID is who asNonRoot runs a test as: nobody, as the Kubernetes
// executor runs as a user of no privilege (65532).
const nonRootUID = 65534

// asNonRoot runs the test t again, alone, in a copy of the test binary
// as a user of no privilege, when the test process is root (root's
// permission checks pass whatever a file's mode says, so what the mode
// of a directory does to a non-root executor cannot be seen as root).
// It reports whether it did: then the caller returns, the child's
// outcome being t's. Not root, it returns false and the test runs here.
func asNonRoot(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv(nonRootEnv) == "1" {
		return false
	}
	self, err := os.Executable()
	must(t, err)
	dir, err := os.MkdirTemp("", "xct-nonroot-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o1777))
	bin := filepath.Join(dir, "executor.test")
	in, err := os.Open(self)
	must(t, err)
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	_ = in.Close()
	must(t, err)
	must(t, out.Close())
	tmp := filepath.Join(dir, "tmp")
	must(t, os.Mkdir(tmp, 0o1777))
	must(t, os.Chmod(tmp, 0o1777))
	cmd := osexec.Command(bin, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = []string{nonRootEnv + "=1", "TMPDIR=" + tmp, "PATH=" + os.Getenv("PATH"), "XCT_REQUIRE_SANDBOX=" + os.Getenv("XCT_REQUIRE_SANDBOX")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRootUID, Gid: nonRootUID}}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "\n--- PASS: "+t.Name()) {
		t.Fatalf("as uid %d: %v\n%s", nonRootUID, err, b)
	}
	t.Logf("as uid %d:\n%s", nonRootUID, b)
	return true
}

// TestShellProtectedHiddenByModes (session 13, attack13): a program that
// may write makes protected entries, then takes away its own (the
// executor's) permissions on the directories that hold them: no write
// on the parent (the move aside fails), no read or no search (the scan
// after cannot see in, or stops there before reaching others). On main
// each stayed where it was made: a nested repository's fsmonitor and a
// .husky hook for the next human, reported nowhere (the first two) or
// only as "unchecked". Run as a non-root user, as the executor runs in
// Kubernetes: root's permission checks ignore modes.
func TestShellProtectedHiddenByModes(t *testing.T) {
	if asNonRoot(t) {
		return
	}
	t.Run("sandboxed", func(t *testing.T) { testShellProtectedHiddenByModes(t, true) })
	t.Run("sandbox none", func(t *testing.T) { testShellProtectedHiddenByModes(t, false) })
}

func testShellProtectedHiddenByModes(t *testing.T, sandboxed bool) {
	for _, c := range []struct {
		name, script string
		made         []string // protected entries the program made
	}{
		{"parent not writable", "mkdir -p sub/.git && echo '[core] fsmonitor = evil' > sub/.git/config && chmod 555 sub", []string{"sub/.git"}},
		{"parent not searchable", "mkdir -p sub/.git && echo '[core] fsmonitor = evil' > sub/.git/config && chmod 600 sub", []string{"sub/.git"}},
		{"parent not readable", "mkdir -p sub/.git && echo '[core] fsmonitor = evil' > sub/.git/config && chmod 311 sub", []string{"sub/.git"}},
		{"an earlier directory closed", "mkdir -p aaa zzz/.git && echo x > zzz/.git/config && mkdir -p zzz/pkg && echo 'node-options=--require ./x.js' > zzz/pkg/.npmrc && chmod 0 aaa", []string{"zzz/.git", "zzz/pkg/.npmrc"}},
		{"nested closed", "mkdir -p a/b/c/.husky && echo evil > a/b/c/.husky/pre-commit && chmod 0 a/b/c && chmod 100 a/b && chmod 500 a", []string{"a/b/c/.husky"}},
		{"the top closed", "mkdir .husky && echo evil > .husky/pre-commit && chmod 311 .", []string{".husky"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t)
			t.Cleanup(func() {
				_ = filepath.WalkDir(sb.dir, func(p string, _ os.DirEntry, _ error) error { _ = os.Chmod(p, 0o755); return nil })
			})
			var s *Service
			if sandboxed {
				s = shellService(t, sb, 10*time.Second)
			} else {
				s = shellServiceUnsandboxed(t, sb, 10*time.Second)
			}
			resp := shell(t, s, "sh", "-c", c.script)
			if resp.GetError() != nil {
				t.Fatalf("the program: %v", resp.GetError())
			}
			res := resultAs[ShellResult](t, resp)
			if res.ExitCode != 0 {
				t.Fatalf("the program: %+v", res)
			}
			if res.ProtectedUnchecked != "" {
				t.Errorf("the scan after could not read everything: %s", res.ProtectedUnchecked)
			}
			for _, name := range c.made {
				if _, err := os.Lstat(filepath.Join(sb.ws, name)); !os.IsNotExist(err) {
					t.Errorf("%s is still there (%v); moved aside: %v", name, err, res.ProtectedMoved)
				}
				if res.ProtectedMoved[name] == "" {
					t.Errorf("%s not reported moved aside: %v", name, res.ProtectedMoved)
				}
			}
			if c.name == "parent not writable" {
				// Written for the move aside only: its mode as the program left it.
				if fi, err := os.Stat(filepath.Join(sb.ws, "sub")); err != nil || fi.Mode().Perm() != 0o555 {
					t.Errorf("sub after the move aside: %v %v", fi.Mode(), err)
				}
			}
			// The workspace is usable by the next write program.
			if resp := shell(t, s, "sh", "-c", "echo ok > later.txt"); resp.GetError() != nil {
				t.Errorf("the next write program: %v", resp.GetError())
			}
		})
	}
}

// TestShellProtectedDeepOrLong (session 13, attack13): a protected entry
// a program made where its workspace path is longer than a path the
// kernel takes whole (PATH_MAX: 18 directories of 250 bytes), or whose
// name, configured by the operator, left no room for the name it is moved
// aside to: on main the rename aside failed (ENAMETOOLONG), was logged
// only, and the entry stayed, reported nowhere; the next scan took it for
// one that was there.
func TestShellProtectedDeepOrLong(t *testing.T) {
	long := ".agent-" + strings.Repeat("h", 230)
	deep := strings.Repeat("d", 250)
	for _, c := range []struct {
		name, script string
		made         string
	}{
		// Made short, then renamed from the bottom up: a shell cannot
		// name the path whole either.
		{"deep", `p=""; for i in $(seq 18); do p="${p}a/"; done; mkdir -p "${p}.git" && echo '[core] fsmonitor = evil' > "${p}.git/config" || exit 1; ` +
			`q="$p"; for i in $(seq 18); do q="${q%a/}"; mv "${q}a" "${q}` + deep + `" || exit 1; done`,
			strings.Repeat(deep+"/", 18) + ".git"},
		{"long name", "mkdir " + long + " && echo evil > " + long + "/run", long},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, sandboxed := range []bool{true, false} {
				sb := newSandbox(t)
				line := "fs:\n  protected_paths: [" + long + "/]\n"
				if !sandboxed {
					line = "  sandbox: none\n" + line
				} else {
					requireSandbox(t)
				}
				s := shellServiceWith(t, sb, 10*time.Second, line)
				resp := shell(t, s, "sh", "-c", c.script)
				if resp.GetError() != nil {
					t.Fatalf("sandboxed %v, the program: %v", sandboxed, resp.GetError())
				}
				// The deep one's result names a path of 4.5 KB: over the
				// test's output bound, it is not kept; the log says where
				// it went. What counts is that it is gone.
				root, err := os.OpenRoot(sb.ws)
				must(t, err)
				if _, err := root.Lstat(c.made); !os.IsNotExist(err) {
					t.Errorf("sandboxed %v: %s is still there (%v): %v", sandboxed, c.made, err, resp.GetSuccess().GetResult())
				}
				_ = root.Close()
				if res := resultAs[map[string]any](t, resp); res["result_not_kept"] == nil {
					if moved, _ := res["protected_moved"].(map[string]any); moved[c.made] == nil || res["protected_unchecked"] != nil {
						t.Errorf("sandboxed %v: %v", sandboxed, res)
					}
				}
				if resp := shell(t, s, "sh", "-c", "echo ok > later.txt"); resp.GetError() != nil {
					t.Errorf("sandboxed %v, the next write program: %v", sandboxed, resp.GetError())
				}
			}
		})
	}
}

// TestProtectedUnmovedIsRemembered (session 13, attack13): a protected
// entry a program made that could not be moved aside (a full disk: the
// name aside is longer, ext4 may need a new block for it) was logged and
// left; the scan before the next program found it and took it for one
// that was there (mounted it read-only, compared against it), so it
// stayed for good, and the result said nothing. Now the result names it
// (protected_unchecked), and no program that may write runs until it is
// moved aside, which is tried again before each.
func TestProtectedUnmovedIsRemembered(t *testing.T) {
	for _, sandboxed := range []bool{true, false} {
		sb := newSandbox(t)
		var s *Service
		if sandboxed {
			s = shellService(t, sb, 10*time.Second)
		} else {
			s = shellServiceUnsandboxed(t, sb, 10*time.Second)
		}
		moveAsideFault = func(string) error { return unix.ENOSPC }
		res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "mkdir .husky && echo evil > .husky/pre-commit"))
		if !strings.Contains(res.ProtectedUnchecked, ".husky could not be moved aside") {
			t.Errorf("sandboxed %v: the result says nothing of .husky: %+v", sandboxed, res)
		}
		resp := shell(t, s, "sh", "-c", "echo ran > ran.txt")
		if e := resp.GetError(); e.GetCode() != string(wire.CodePermissionDenied) || !strings.Contains(e.GetMessage(), ".husky") {
			t.Errorf("sandboxed %v: the next write program with .husky still there: %v", sandboxed, resp)
		}
		if _, err := os.Stat(filepath.Join(sb.ws, "ran.txt")); !os.IsNotExist(err) {
			t.Errorf("sandboxed %v: the refused program ran: %v", sandboxed, err)
		}
		// A read program still runs (the workspace is read-only to it).
		if resp := shell(t, s, "ls", "-a"); resp.GetError() != nil {
			t.Errorf("sandboxed %v: a read program: %v", sandboxed, resp.GetError())
		}
		moveAsideFault = nil
		if resp := shell(t, s, "sh", "-c", "echo ran > ran.txt"); resp.GetError() != nil {
			t.Errorf("sandboxed %v: once it can be moved: %v", sandboxed, resp.GetError())
		}
		if _, err := os.Lstat(filepath.Join(sb.ws, ".husky")); !os.IsNotExist(err) {
			t.Errorf("sandboxed %v: .husky is still there: %v", sandboxed, err)
		}
		if b, err := os.ReadFile(filepath.Join(sb.ws, "ran.txt")); err != nil || string(b) != "ran\n" {
			t.Errorf("sandboxed %v: the program once allowed: %q %v", sandboxed, b, err)
		}
	}
}

// TestShellProtectedMountRace (session 13, attack13): bubblewrap mounts
// each protected entry read-only by its path, after the executor found
// it. Another run's write program renaming a nested repository's
// directory back and forth (sub <-> sub2; the .git itself is a mount
// point in its sandbox, its parent is not) made the mount of a program
// started meanwhile land on a new, empty sub/.git that bubblewrap made,
// and the real .git, then at sub2/.git, was writable to it: on main its
// fsmonitor reached the repository's config (2 runs of 2). Now the
// program starts through a check in the sandbox that each protected
// entry is the one found, in the directory it was found in, on a
// read-only mount; otherwise nothing is run.
func TestShellProtectedMountRace(t *testing.T) {
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, "sub", ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(sb.ws, "sub", ".git", "config"), []byte("[core]\n"), 0o644))
	s := shellService(t, sb, 20*time.Second)
	done := make(chan *xctv1.Response)
	go func() {
		done <- exec(t, s, "shell.exec", map[string]any{"argv": []any{"sh", "-c",
			"end=$(($(date +%s)+6)); while [ $(date +%s) -lt $end ]; do mv -T sub sub2; mv -T sub2 sub; done 2>/dev/null; true"}})
	}()
	refused, ran := 0, 0
	for range 200 {
		resp := shell(t, s, "sh", "-c", "for p in sub sub2; do echo 'fsmonitor = evil' >> $p/.git/config; done 2>/dev/null; true")
		switch e := resp.GetError(); {
		case e == nil:
			ran++
		case strings.Contains(e.GetMessage(), "not where it was found"):
			refused++
		}
	}
	if r := <-done; r.GetError() != nil {
		t.Fatalf("the renaming program: %v", r.GetError())
	}
	t.Logf("%d programs ran, %d were refused", ran, refused)
	for _, p := range []string{"sub", "sub2"} {
		if b, err := os.ReadFile(filepath.Join(sb.ws, p, ".git", "config")); err == nil && strings.Contains(string(b), "evil") {
			t.Errorf("the nested repository's config was written: %s/.git/config: %q", p, b)
		}
	}
	if ran == 0 {
		t.Errorf("no program ran at all")
	}
}
