package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// scanWS is a test's own workspace and its directory, closed when the
// test ends; its protected scan's listings are trusted however recent
// (trustAll) or by the default margin.
func scanWS(tb testing.TB, trustAll bool) (*workspace, string) {
	tb.Helper()
	dir := tb.TempDir()
	w, err := openWorkspace(dir)
	must(tb, err)
	tb.Cleanup(func() { _ = w.close() })
	if trustAll {
		w.protected.cache.margin = -time.Hour
	}
	return w, dir
}

// scanFinds scans w whole and returns the protected entries found and
// the directories read.
func scanFinds(tb testing.TB, w *workspace) (protectedSet, int) {
	tb.Helper()
	before := w.protected.cache.reads
	set, cut := w.protectedNames(-1)
	if cut != "" {
		tb.Fatalf("scan cut: %s", cut)
	}
	return set, w.protected.cache.reads - before
}

func mkdirs(tb testing.TB, root string, names ...string) {
	tb.Helper()
	for _, n := range names {
		must(tb, os.MkdirAll(filepath.Join(root, n), 0o755))
	}
}

// TestScanCacheRereadsOnlyChanged: a rescan reads again only the
// directories whose listing changed (it stats every one).
func TestScanCacheRereadsOnlyChanged(t *testing.T) {
	t.Parallel()
	w, dir := scanWS(t, true)
	mkdirs(t, dir, "a/b/c", "a/d", "e/f/.git", "g")
	must(t, os.WriteFile(filepath.Join(dir, "a/b/x"), nil, 0o644))
	set, n := scanFinds(t, w)
	if n != 8 || len(set) != 1 || set["e/f/.git"] == (entryID{}) {
		t.Fatalf("first scan: %d read, %v", n, set)
	}
	if _, n = scanFinds(t, w); n != 0 {
		t.Fatalf("unchanged rescan read %d directories", n)
	}
	must(t, os.WriteFile(filepath.Join(dir, "a/b/y"), nil, 0o644))
	if _, n = scanFinds(t, w); n != 1 {
		t.Fatalf("rescan after one change read %d directories", n)
	}
}

// TestScanCacheAttacks: after a scan that cached every listing (trusted
// however recent: the ctime alone decides), each way of making a
// protected entry the cache could hide is found by the rescan.
func TestScanCacheAttacks(t *testing.T) {
	t.Parallel()
	attacks := []struct {
		name  string
		setup []string // directories before the warm scan ("a/lib": a file, "a/l": a link)
		do    func(t *testing.T, dir, outside string)
		want  string
	}{
		{"made deep in an unchanged tree", []string{"a/b/c/d"}, func(t *testing.T, dir, _ string) {
			mkdirs(t, dir, "a/b/c/d/.husky")
		}, "a/b/c/d/.husky"},
		{"a file renamed to a protected name", []string{"a/b"}, func(t *testing.T, dir, _ string) {
			must(t, os.WriteFile(filepath.Join(dir, "a/b/x"), nil, 0o644))
			must(t, os.Rename(filepath.Join(dir, "a/b/x"), filepath.Join(dir, "a/b/.npmrc")))
		}, "a/b/.npmrc"},
		{"a cached directory moved elsewhere in the workspace", []string{"a/b/lib/.git", "z/y"}, func(t *testing.T, dir, _ string) {
			must(t, os.Rename(filepath.Join(dir, "a/b/lib"), filepath.Join(dir, "z/y/lib")))
		}, "z/y/lib/.git"},
		{"a directory moved in from outside the workspace", []string{"a/b"}, func(t *testing.T, dir, outside string) {
			mkdirs(t, outside, "m/n/.vscode")
			must(t, os.Rename(filepath.Join(outside, "m"), filepath.Join(dir, "a/b/m")))
		}, "a/b/m/n/.vscode"},
		{"a file replaced by a directory of the same name", []string{"a/lib"}, func(t *testing.T, dir, _ string) {
			must(t, os.Remove(filepath.Join(dir, "a/lib")))
			mkdirs(t, dir, "a/lib/.idea")
		}, "a/lib/.idea"},
		{"a directory removed and made again (its inode reused)", []string{"a/b/c"}, func(t *testing.T, dir, _ string) {
			must(t, os.RemoveAll(filepath.Join(dir, "a/b")))
			mkdirs(t, dir, "a/b/c/.git")
		}, "a/b/c/.git"},
		{"a directory's contents swapped by renames (two changes)", []string{"a/p", "a/q/.git"}, func(t *testing.T, dir, _ string) {
			must(t, os.Rename(filepath.Join(dir, "a/p"), filepath.Join(dir, "a/t")))
			must(t, os.Rename(filepath.Join(dir, "a/q"), filepath.Join(dir, "a/p")))
			must(t, os.Rename(filepath.Join(dir, "a/t"), filepath.Join(dir, "a/q")))
		}, "a/p/.git"},
		{"two cached directories exchanged in one rename (RENAME_EXCHANGE)", []string{"a/p", "b/q/.git"}, func(t *testing.T, dir, _ string) {
			must(t, unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "a/p"), unix.AT_FDCWD, filepath.Join(dir, "b/q"), unix.RENAME_EXCHANGE))
		}, "a/p/.git"},
		{"a cached leaf directory replaced by a link to a repository", []string{"a/leaf"}, func(t *testing.T, dir, outside string) {
			mkdirs(t, outside, "o/.git")
			must(t, os.Remove(filepath.Join(dir, "a/leaf")))
			must(t, os.Symlink(filepath.Join(outside, "o"), filepath.Join(dir, "a/leaf")))
		}, ""}, // never followed: nothing found there, as a cold scan
		{"a link replaced by a directory", []string{"a/l"}, func(t *testing.T, dir, _ string) {
			must(t, os.Remove(filepath.Join(dir, "a/l")))
			mkdirs(t, dir, "a/l/.ssh")
		}, "a/l/.ssh"},
	}
	// On the test's temporary directory's file system, and on tmpfs.
	roots := []string{""}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		roots = append(roots, "/dev/shm")
	}
	for _, root := range roots {
		for _, a := range attacks {
			t.Run(root+"/"+a.name, func(t *testing.T) {
				t.Parallel()
				testScanCacheAttack(t, root, a.setup, a.do, a.want)
			})
		}
	}
}

// testScanCacheAttack runs one attack of TestScanCacheAttacks in a
// workspace under root ("": the test's temporary directory).
func testScanCacheAttack(t *testing.T, root string, setup []string, do func(t *testing.T, dir, outside string), want string) {
	var w *workspace
	var dir, outside string
	if root == "" {
		w, dir = scanWS(t, true)
		outside = t.TempDir()
	} else {
		base, err := os.MkdirTemp(root, "xct-scan-test-")
		must(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(base) })
		dir, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
		mkdirs(t, base, "ws", "outside")
		w, err = openWorkspace(dir)
		must(t, err)
		t.Cleanup(func() { _ = w.close() })
		w.protected.cache.margin = -time.Hour
	}
	for _, d := range setup {
		switch filepath.Base(d) {
		case "lib":
			mkdirs(t, dir, filepath.Dir(d))
			must(t, os.WriteFile(filepath.Join(dir, d), nil, 0o644))
		case "l":
			mkdirs(t, dir, filepath.Dir(d))
			must(t, os.Symlink("/", filepath.Join(dir, d)))
		default:
			mkdirs(t, dir, d)
		}
	}
	before, _ := scanFinds(t, w)
	if _, n := scanFinds(t, w); n != 0 {
		t.Fatalf("the warm rescan read %d directories", n)
	}
	do(t, dir, outside)
	after, _ := scanFinds(t, w)
	if _, ok := after[want]; !ok && want != "" {
		t.Fatalf("%s not found after: %v (before %v)", want, after, before)
	}
	// What a cold scan finds, the warm one finds.
	cold, err := openWorkspace(dir)
	must(t, err)
	t.Cleanup(func() { _ = cold.close() })
	fresh, _ := scanFinds(t, cold)
	if len(fresh) != len(after) {
		t.Fatalf("warm %v, cold %v", after, fresh)
	}
	for k, v := range fresh {
		if after[k] != v {
			t.Fatalf("warm %v, cold %v", after, fresh)
		}
	}
}

// TestScanCacheRecentNotTrusted: with the default margin, a directory
// changed within the margin before the scan that read it is read again
// next time: a program that changes it within the same timestamp tick as
// the read (its ctime unchanged on a coarse clock) is still seen.
func TestScanCacheRecentNotTrusted(t *testing.T) {
	t.Parallel()
	w, dir := scanWS(t, false)
	mkdirs(t, dir, "a/b")
	if _, n := scanFinds(t, w); n != 3 {
		t.Fatalf("first scan read %d", n)
	}
	mkdirs(t, dir, "a/b/.git")
	set, n := scanFinds(t, w)
	if n != 3 {
		t.Fatalf("a recent directory was taken from the cache: %d read", n)
	}
	if _, ok := set["a/b/.git"]; !ok {
		t.Fatalf("a/b/.git not found: %v", set)
	}
	if len(w.protected.cache.dirs) != 0 {
		t.Fatalf("recent listings kept: %d", len(w.protected.cache.dirs))
	}
}

// TestScanCacheForgetsRemoved: what a whole scan no longer meets is
// forgotten (the cache holds only the workspace's directories).
func TestScanCacheForgetsRemoved(t *testing.T) {
	t.Parallel()
	w, dir := scanWS(t, true)
	mkdirs(t, dir, "a/b/c", "d")
	scanFinds(t, w)
	if n := len(w.protected.cache.dirs); n != 5 {
		t.Fatalf("%d listings", n)
	}
	must(t, os.RemoveAll(filepath.Join(dir, "a")))
	scanFinds(t, w)
	if n := len(w.protected.cache.dirs); n != 2 {
		t.Fatalf("%d listings after removing a/", n)
	}
}

// TestMatchNameBytes: the allocation-free match agrees with matchName.
func TestMatchNameBytes(t *testing.T) {
	t.Parallel()
	p := newProtectedPaths([]string{"Secrets/", "deploy.key"})
	for _, n := range []string{".git", ".GIT", ".git.", ".git ..", ".git:x", ".git::$DATA", ":x", "a.git", "git", ".npmrc", ".NpmRc",
		"secrets", "SECRETS", "deploy.key", "deploy.KEY.", "x\\.git", ".\u017fsh", ".\u212aeep", ".gıt", strings.Repeat("a", 70), strings.Repeat("A", 64) + ".git", "node_modules", ""} {
		if got, want := p.matchNameBytes([]byte(n)), p.matchName(n); got != want {
			t.Errorf("%q: matchNameBytes %v, matchName %v", n, got, want)
		}
	}
}

// TestSandboxScanCacheWarm: in the sandbox, with every listing cached
// (trusted however recent), a protected entry made on the host between
// calls deep in a cached tree is mounted read-only for the next program,
// and one that program makes deep down is moved aside after it.
func TestSandboxScanCacheWarm(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	mkdirs(t, sb.ws, "a/b/c/.git", "a/b/c/d", "a/b/e")
	s := permissiveShell(t, sb, 10*time.Second, "")
	s.ws.protected.cache.margin = -time.Hour
	if res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "touch a/b/c/.git/x 2>&1; echo warm")); !strings.Contains(res.Stdout, "Read-only file system") {
		t.Fatalf("the warm call: %+v", res)
	}
	mkdirs(t, sb.ws, "a/b/c/d/.git")
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "touch a/b/c/d/.git/x 2>&1; mkdir -p a/b/e/f/.husky; echo done"))
	if !strings.Contains(res.Stdout, "Read-only file system") || !strings.Contains(res.Stdout, "done") {
		t.Fatalf("a/b/c/d/.git made between calls is writable: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, "a/b/c/d/.git/x")); err == nil {
		t.Fatal("a/b/c/d/.git/x made")
	}
	if _, ok := res.ProtectedMoved["a/b/e/f/.husky"]; !ok {
		t.Fatalf("a/b/e/f/.husky not moved aside: %+v", res)
	}
}

// TestScanCacheClockStepped: after the wall clock went back (against the
// monotonic one) since the last scan, a change could get the ctime a kept
// listing has (on a file system of seconds): every listing is forgotten
// and read again.
func TestScanCacheClockStepped(t *testing.T) {
	t.Parallel()
	w, dir := scanWS(t, true)
	mkdirs(t, dir, "a/b", "c")
	scanFinds(t, w)
	if _, n := scanFinds(t, w); n != 0 {
		t.Fatalf("the warm rescan read %d", n)
	}
	// As if the last scan had run with the wall clock 10 s ahead.
	w.protected.cache.lastWall += int64(10 * time.Second)
	if _, n := scanFinds(t, w); n != 4 {
		t.Fatalf("after a step back of the clock, %d directories read, not all 4", n)
	}
	if _, n := scanFinds(t, w); n != 0 {
		t.Fatalf("the next rescan read %d", n)
	}
}

// TestSandboxWriteInLargeWorkspace: a program that may write runs in a
// workspace of more names than the scan's old bound (65,536: refused
// before session 12), twice (the second time from the cache), a
// protected entry there read-only to it and one it makes moved aside.
func TestSandboxWriteInLargeWorkspace(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	for d := range 70 {
		dir := filepath.Join(sb.ws, "node_modules", fmt.Sprintf("p%02d", d))
		must(t, os.MkdirAll(dir, 0o755))
		for i := range 1000 {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.js", i)), nil, 0o644))
		}
	}
	mkdirs(t, sb.ws, "node_modules/p42/.git")
	s := permissiveShell(t, sb, 30*time.Second, "")
	for i := range 2 {
		res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", fmt.Sprintf("touch node_modules/p42/.git/x 2>&1; mkdir -p node_modules/p07/d%d/.husky; echo done", i)))
		if !strings.Contains(res.Stdout, "Read-only file system") || !strings.Contains(res.Stdout, "done") {
			t.Fatalf("call %d: %+v", i, res)
		}
		if _, ok := res.ProtectedMoved[fmt.Sprintf("node_modules/p07/d%d/.husky", i)]; !ok {
			t.Fatalf("call %d: the .husky made is not moved aside: %+v", i, res)
		}
	}
}
