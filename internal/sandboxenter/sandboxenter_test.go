package sandboxenter

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// enter runs Enter with a report pipe and returns its status and report.
func enter(t *testing.T, dirID string, program ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	code := Enter(append([]string{strconv.Itoa(int(w.Fd())), dirID, "0"}, program...), nil)
	_ = w.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// TestEnterRefuses: a working directory that is not the one named is
// reported as moved and nothing is executed; a program that cannot be
// executed is reported; a bad report descriptor is refused. (The
// successful case replaces the process: the executor's sandbox tests run
// it, TestShellExec's working directory and TestSwapRace.)
func TestEnterRefuses(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat(".", &st); err != nil {
		t.Fatal(err)
	}
	here := DirID(uint64(st.Dev), uint64(st.Ino))    //nolint:unconvert // Dev is not uint64 everywhere
	other := DirID(uint64(st.Dev), uint64(st.Ino)+1) //nolint:unconvert // as above
	if code, rep := enter(t, other, "/bin/true"); code != 125 || rep != Moved {
		t.Fatalf("another directory: %d %q", code, rep)
	}
	if code, rep := enter(t, here, "/nonexistent/program"); code != 125 || !strings.HasPrefix(rep, NotStarted+": ") {
		t.Fatalf("a program that cannot be executed: %d %q", code, rep)
	}
	// The scope's argument is an option, not the program (and nothing is
	// scoped before the checks pass: this process stays as it was).
	if code, rep := enter(t, other, ScopeAbstractUnix, "/bin/true"); code != 125 || rep != Moved {
		t.Fatalf("the scope's argument as the program: %d %q", code, rep)
	}
	if code, rep := enter(t, here, ScopeAbstractUnix); code != 125 || !strings.HasPrefix(rep, NotStarted+": ") {
		t.Fatalf("the scope's argument and no program: %d %q", code, rep)
	}
	if LandlockABI() < 0 {
		t.Fatal("a negative Landlock ABI")
	}
	if code := Enter([]string{"x", here, "0", "/bin/true"}, nil); code != 125 {
		t.Fatalf("a bad descriptor: %d", code)
	}
	if code := Enter([]string{"9", here, "lots", "/bin/true"}, nil); code != 125 {
		t.Fatalf("a bad address space limit: %d", code)
	}
}

// TestCheckProtected: each way a protected entry's check fails is named
// (its directory another, the entry another, not on a read-only mount),
// and Enter reports it, running nothing. The read-only case passes in
// the executor's sandbox tests (TestShellProtectedMountRace and every
// write program with a protected entry).
func TestCheckProtected(t *testing.T) {
	dir := t.TempDir()
	dest := dir + "/.git"
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	var pst, st syscall.Stat_t
	if syscall.Stat(dir, &pst) != nil || syscall.Stat(dest, &st) != nil {
		t.Fatal("stat")
	}
	parent := DirID(uint64(pst.Dev), uint64(pst.Ino)) //nolint:unconvert // Dev is not uint64 everywhere
	for _, c := range []struct{ check, want string }{
		{Check(parent, st.Ino, dest)[1:], "not read-only"},
		{Check(DirID(uint64(pst.Dev), uint64(pst.Ino)+1), st.Ino, dest)[1:], "its directory was moved or replaced"}, //nolint:unconvert // as above
		{Check(parent, st.Ino+1, dest)[1:], "it was moved or replaced"},
		{Check(parent, st.Ino, dir+"/gone")[1:], "it was moved or replaced"},
		{"1:2:x", "bad check"},
	} {
		if got := checkProtected(c.check); !strings.Contains(got, c.want) {
			t.Errorf("%q: %q, want %q", c.check, got, c.want)
		}
	}
	var cwd syscall.Stat_t
	if err := syscall.Stat(".", &cwd); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	code := Enter([]string{strconv.Itoa(int(w.Fd())), DirID(uint64(cwd.Dev), uint64(cwd.Ino)), "0", Check(parent, st.Ino, dest), "/bin/true"}, nil) //nolint:unconvert // as above
	_ = w.Close()
	b, _ := io.ReadAll(r)
	if code != 125 || !strings.HasPrefix(string(b), Unprotected+": ") {
		t.Fatalf("Enter with a failing check: %d %q", code, b)
	}
}
