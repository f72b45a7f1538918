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
