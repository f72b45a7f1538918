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
func enter(t *testing.T, dirID, program string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	code := Enter([]string{strconv.Itoa(int(w.Fd())), dirID, "0", program}, nil)
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
	if code := Enter([]string{"x", here, "0", "/bin/true"}, nil); code != 125 {
		t.Fatalf("a bad descriptor: %d", code)
	}
	if code := Enter([]string{"9", here, "lots", "/bin/true"}, nil); code != 125 {
		t.Fatalf("a bad address space limit: %d", code)
	}
}
