package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// renamer renames dir a to b and back in the workspace ws, as another
// run's program can while a write program's scan runs, until stopped
// (or a bound of renames): it returns the stop function, which reports
// how many renames were done. With a marker, it starts once that file
// of the workspace exists (polled, or it stops first).
func renamer(t *testing.T, ws, a, b, marker string) (stop func() int) {
	t.Helper()
	var done atomic.Bool
	count := make(chan int, 1)
	go func() {
		n := 0
		pa, pb := filepath.Join(ws, a), filepath.Join(ws, b)
		for marker != "" && !done.Load() {
			if _, err := os.Lstat(filepath.Join(ws, marker)); err == nil {
				break
			}
		}
		for ; n < 20_000_000 && !done.Load(); n += 2 {
			e1, e2 := os.Rename(pa, pb), os.Rename(pb, pa)
			if e1 != nil && e2 != nil {
				// Both names are taken: bwrap made the missing
				// destination of a mount (a directory and an empty
				// .git) while the other was renamed away. The empty
				// one goes (os.Remove removes no directory that holds
				// anything), and the renaming goes on.
				for _, p := range []string{pa, pb} {
					if os.Remove(filepath.Join(p, ".git")) == nil {
						_ = os.Remove(p)
					}
				}
			}
		}
		count <- n
	}()
	var once atomic.Bool
	var n int
	stop = func() int {
		if once.CompareAndSwap(false, true) {
			done.Store(true)
			n = <-count
		}
		return n
	}
	t.Cleanup(func() { stop() })
	return stop
}

// readAt reads the file name of the directory dir (an open descriptor:
// the directory wherever it was moved since).
func readAt(t *testing.T, dir *os.File, name string) string {
	t.Helper()
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	must(t, err)
	f := os.NewFile(uintptr(fd), name)
	defer func() { _ = f.Close() }()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	return string(b[:n])
}

// TestScanRaceRenamer: the scan for protected entries before a write
// program is not fooled by a directory renamed while it runs. On main a
// directory renamed between its parent's read and its own open was
// skipped ("gone"), and one moved from a directory not yet read into
// one already read was never listed: the nested repository's .git in it
// was then not mounted read-only, and the program wrote its config
// (session 13, attack13). Now a scan checks every directory it read
// once more after reading all (identity and change time) and refuses
// to be taken as the workspace's state when one changed: it is done
// again a few times, then the program is refused.
func TestScanRaceRenamer(t *testing.T) {
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, "sub", ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(sb.ws, "sub", ".git", "config"), []byte("[core]\n"), 0o644))
	git, err := os.Open(filepath.Join(sb.ws, "sub", ".git"))
	must(t, err)
	defer func() { _ = git.Close() }()
	s := shellService(t, sb, 20*time.Second)
	stop := renamer(t, sb.ws, "sub", "sub2", "")
	ran, refused := 0, 0
	for range 48 {
		resp := shell(t, s, "sh", "-c", "for p in sub sub2; do echo 'fsmonitor = evil' >> $p/.git/config; done 2>/dev/null; true")
		if resp.GetError() == nil {
			ran++
		} else {
			// Refused (the scan met the renaming, the check in the
			// sandbox found a mount mislanded, or bwrap could not mount
			// on a path renamed away): nothing ran.
			refused++
			if resp.GetError().GetDetails().AsMap()["outcome_unknown"] != false {
				t.Errorf("a refusal that does not say nothing ran: %v", resp.GetError())
			}
		}
		if strings.Contains(readAt(t, git, "config"), "evil") {
			break
		}
	}
	n := stop()
	t.Logf("%d programs ran, %d were refused, %d renames", ran, refused, n)
	if c := readAt(t, git, "config"); strings.Contains(c, "evil") {
		t.Fatalf("the nested repository's config was written while its directory was being renamed: %q", c)
	}
	// Once nothing renames, write programs run again, the .git read-only
	// to them, and it was not moved aside. The renaming may have ended
	// with the directory at sub2, and a directory bwrap made for a mount
	// (an empty .git) at sub: that one goes, the other back to sub.
	// Such an empty .git may also have been moved aside after a program
	// (a protected entry new since its scan): that one goes too (seen
	// twice at load 20-35: "rename sub2 sub: file exists").
	for _, p := range []string{"sub", "sub2"} {
		aside, _ := filepath.Glob(filepath.Join(sb.ws, p, ".xct-*-protected-git"))
		for _, a := range aside {
			_ = os.Remove(a) // only if empty: what bwrap made
		}
		if os.Remove(filepath.Join(sb.ws, p, ".git")) == nil || len(aside) > 0 {
			_ = os.Remove(filepath.Join(sb.ws, p))
		}
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, "sub2")); err == nil {
		must(t, os.Rename(filepath.Join(sb.ws, "sub2"), filepath.Join(sb.ws, "sub")))
	}
	var gst, st unix.Stat_t
	must(t, unix.Fstat(int(git.Fd()), &gst))
	if err := unix.Lstat(filepath.Join(sb.ws, "sub", ".git"), &st); err != nil || st.Ino != gst.Ino {
		var names []string
		_ = filepath.WalkDir(sb.ws, func(p string, _ os.DirEntry, _ error) error { names = append(names, p); return nil })
		t.Fatalf("the .git is no longer at sub/.git (%v): moved aside? the workspace: %q", err, names)
	}
	resp := shell(t, s, "sh", "-c", "echo 'fsmonitor = evil' >> sub/.git/config 2>/dev/null; true")
	if resp.GetError() != nil {
		t.Fatalf("a write program after the renaming stopped: %v", resp.GetError())
	}
	if c := readAt(t, git, "config"); c != "[core]\n" {
		t.Errorf("the config: %q", c)
	}
}

// TestScanRaceRenamerAfter: a protected entry a write program made is
// not left in place because a directory was renamed while the scan after
// it ran. On main, such a scan could skip the directory holding it (a
// .husky/pre-commit: code for whoever commits next); the next scan took
// it for one that was there. Now the scan after is done again a few
// times, then the program's result flags it (protected_unchecked) and it
// is remembered: the next program that may write is run only once a scan
// reads the whole workspace and what is new since is moved aside.
func TestScanRaceRenamerAfter(t *testing.T) {
	sb := newSandbox(t)
	must(t, os.Mkdir(filepath.Join(sb.ws, "sub"), 0o755))
	s := shellService(t, sb, 20*time.Second)
	flagged := 0
	for i := range 40 {
		stop := renamer(t, sb.ws, "sub", "sub2", "go")
		resp := shell(t, s, "sh", "-c", "mkdir -p sub/.husky && echo evil > sub/.husky/pre-commit && touch go; i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done")
		n := stop()
		must(t, os.Remove(filepath.Join(sb.ws, "go")))
		if e := resp.GetError(); e != nil {
			t.Fatalf("round %d (%d renames): %v", i, n, e)
		}
		if strings.Contains(resultAs[ShellResult](t, resp).ProtectedUnchecked, "changed while it was scanned") {
			flagged++
		}
		// The next program that may write: the scan before it must not
		// take a .husky the last one made for one that was there.
		if resp := shell(t, s, "true"); resp.GetError() != nil {
			t.Fatalf("round %d: a write program once nothing renames: %v", i, resp.GetError())
		}
		for _, p := range []string{"sub", "sub2"} {
			if _, err := os.Lstat(filepath.Join(sb.ws, p, ".husky")); err == nil {
				t.Fatalf("round %d (%d renames): %s/.husky, made by a program while its directory was renamed, is still in place", i, n, p)
			}
		}
	}
	t.Logf("%d of 40 scans after a program were flagged", flagged)
}

// TestMCPProtectedMountMislanded: a stdio MCP server's instance for a
// call of a tool that may write mounts the protected entries read-only by
// their paths; a directory renamed between the scan that found them and
// the mounts (another run's program: here, deterministically, the
// sandboxStartHook) made the mount land on a new, empty .git bwrap made,
// the real one writable. On main the call wrote the nested repository's
// config; its instance did not start through the check in the sandbox
// that shell.exec's programs do (session 13, attack13). Now it does, and
// the call is refused, nothing sent.
func TestMCPProtectedMountMislanded(t *testing.T) {
	requireSandbox(t)
	self, err := os.Executable()
	must(t, err)
	ws := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ws, "sub", ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "sub", ".git", "config"), []byte("[core]\n"), 0o644))
	git, err := os.Open(filepath.Join(ws, "sub", ".git"))
	must(t, err)
	defer func() { _ = git.Close() }()
	s := mcpServiceIn(t, ws, "name: local\ncommand: "+self+"\nargs: [-test.run=^$]\nset_env: {"+mcpStdioEnv+": \"1\"}\ntimeout: 10s\ntools:\n  mkfile: {effect: reversible}")
	sandboxStartHook = func() { must(t, os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub2"))) }
	r := exec(t, s, "mcp.local.mkfile", map[string]any{"text": "sub2/.git/config"})
	sandboxStartHook = nil
	if c := readAt(t, git, "config"); c != "[core]\n" {
		t.Fatalf("the nested repository's config was written through a mislanded mount: %q (the call: %v)", c, r)
	}
	if e := r.GetError(); e == nil || !strings.Contains(e.GetMessage(), "not where it was found") || e.GetDetails().AsMap()["outcome_unknown"] != false {
		t.Errorf("the call: %v", r)
	}
	// The real one is at sub2, not moved aside; sub is what bwrap made
	// for the mount (its empty .git moved aside). Put back, the next
	// call runs, the .git read-only to it.
	var gst, st unix.Stat_t
	must(t, unix.Fstat(int(git.Fd()), &gst))
	if err := unix.Lstat(filepath.Join(ws, "sub2", ".git"), &st); err != nil || st.Ino != gst.Ino {
		t.Fatalf("the .git is no longer at sub2/.git (%v)", err)
	}
	must(t, os.RemoveAll(filepath.Join(ws, "sub")))
	must(t, os.Rename(filepath.Join(ws, "sub2"), filepath.Join(ws, "sub")))
	r = exec(t, s, "mcp.local.mkfile", map[string]any{"text": "sub/.git/config"})
	if c := readAt(t, git, "config"); c != "[core]\n" {
		t.Fatalf("the config was written: %q (the call: %v)", c, r)
	}
	if r = exec(t, s, "mcp.local.mkfile", map[string]any{"text": "sub/notes.txt"}); r.GetError() != nil {
		t.Errorf("a call once nothing renames: %v", r)
	}
}

// TestProtectedUnmovedSurvivesRestart: what the executor remembers of a
// protected entry a program made and that could not be moved aside (a
// full disk) survives its restart. On main it was the process's only: a
// restarted executor ran the next write program, whose scan took the
// .husky for one that was there, and it stayed, code for whoever commits
// next. Now it is kept in the step store (NATS, as the step records):
// the restarted executor refuses write programs while it cannot be
// moved, and moves it aside once it can.
func TestProtectedUnmovedSurvivesRestart(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	text := strings.Replace(strings.Replace(shellConfig, "TIMEOUT", "10s", 1), "SANDBOX", "", 1)
	cfg, err := ParseToolsConfig("tools.yaml", []byte(text))
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() *Service {
		s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nc, testLogger(t))
		must(t, err)
		must(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s
	}
	s := start()
	moveAsideFault = func(string) error { return unix.ENOSPC }
	t.Cleanup(func() { moveAsideFault = nil })
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "mkdir .husky && echo evil > .husky/pre-commit"))
	if !strings.Contains(res.ProtectedUnchecked, ".husky could not be moved aside") {
		t.Fatalf("the result says nothing of .husky: %+v", res)
	}
	must(t, s.Stop(ctx))

	// Restarted, the disk still full: refused.
	s = start()
	resp := shell(t, s, "sh", "-c", "echo ran > ran.txt")
	if e := resp.GetError(); e.GetCode() != string(wire.CodePermissionDenied) || !strings.Contains(e.GetMessage(), ".husky") {
		t.Errorf("after a restart, a write program with .husky still there: %v", resp)
	}
	if _, err := os.Stat(filepath.Join(sb.ws, "ran.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused program ran: %v", err)
	}
	must(t, s.Stop(ctx))

	// Restarted again, the disk freed: moved aside, then the program runs.
	moveAsideFault = nil
	s = start()
	if resp := shell(t, s, "sh", "-c", "echo ran > ran.txt"); resp.GetError() != nil {
		t.Errorf("once it can be moved: %v", resp.GetError())
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, ".husky")); !os.IsNotExist(err) {
		t.Errorf(".husky is still in place after a restart: %v", err)
	}
	// Forgotten once moved: a later restart does not refuse.
	must(t, s.Stop(ctx))
	s = start()
	if resp := shell(t, s, "sh", "-c", "echo again >> ran.txt"); resp.GetError() != nil {
		t.Errorf("a write program after the entry was moved and the executor restarted: %v", resp.GetError())
	}
}

// TestUnmovedFoundUnderAnotherName: a protected entry a program made that
// could not be moved aside is remembered by name and identity. When a
// directory above it was renamed since (another program's renaming, put
// back meanwhile), it is not under its name: it is looked for by its
// identity and moved aside where it is, not forgotten. On main it was
// forgotten, and the next program that may write ran with it in place
// (TestScanRaceRenamerAfter, round 19 of a clean-clone CI run: sub/.husky
// remembered as sub2/.husky). One that a whole scan does not find is gone
// and forgotten.
func TestUnmovedFoundUnderAnotherName(t *testing.T) {
	dir := t.TempDir()
	w, err := openWorkspace(dir)
	must(t, err)
	defer func() { _ = w.close() }()
	must(t, os.MkdirAll(filepath.Join(dir, "sub", ".husky"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", ".husky", "pre-commit"), []byte("evil\n"), 0o755))
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "sub", ".husky"), &st))
	w.unmoved.add("sub2/.husky", entryID{dev: uint64(st.Dev), ino: st.Ino}) //nolint:unconvert // Dev is not uint64 everywhere
	w.unmoved.add("gone/.husky", entryID{dev: uint64(st.Dev), ino: st.Ino + 1_000_000})
	if why := w.retryUnmoved(context.Background(), testLogger(t)); why != "" {
		t.Fatalf("retry: %s", why)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub", ".husky")); err == nil {
		t.Fatal("sub/.husky, remembered as sub2/.husky, is still in place")
	}
	aside, err := filepath.Glob(filepath.Join(dir, "sub", ".xct-*-protected-husky"))
	if err != nil || len(aside) != 1 {
		t.Fatalf("moved aside: %q, %v", aside, err)
	}
	if n := len(w.unmoved.set); n != 0 {
		t.Errorf("still remembered: %v", w.unmoved.set)
	}
}
