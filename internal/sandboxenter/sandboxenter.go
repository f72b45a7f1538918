// Package sandboxenter is the executor's own first step inside the sandbox
// of a shell.exec program that runs in a directory of the workspace.
//
// bubblewrap changes to the working directory by its path (--chdir), after
// the executor opened and checked that directory: another writer of the
// workspace (a program of a concurrent run) that swaps a symbolic link or
// another directory onto the path in between would start the program
// elsewhere (docs/status.md, Issue 11, Session 9 (race9), and Session 10
// (trust10a)). So the executor mounts its own binary read-only at Path in
// the sandbox and has bubblewrap start it there instead of the program:
// this package's init sees itself started as Path, checks that the working
// directory it was given is the very directory the executor checked (the
// same device and inode), and only then executes the program in it (the
// working directory is then held by the process, not named by a path).
// Otherwise it reports the refusal on a descriptor the executor reads,
// and the program is never started.
//
// It imports only the standard library, so that its init runs before the
// executor's heavier packages are initialized: the step costs one exec of
// the runtime, not the start of the whole binary.
package sandboxenter

import (
	"os"
	"strconv"
	"syscall"
)

// Path is where the executor's binary is mounted in the sandbox, and the
// argv[0] bubblewrap starts it with.
const Path = "/.xct/enter"

// Reports written on the report descriptor; nothing is written when the
// program was started.
const (
	// Moved: the working directory is not the one checked.
	Moved = "moved"
	// NotStarted: the program could not be executed.
	NotStarted = "not-started"
)

func init() {
	if len(os.Args) < 5 || os.Args[0] != Path {
		return
	}
	os.Exit(Enter(os.Args[1:], os.Environ()))
}

// Enter is what the binary does when started as Path, with arguments
// REPORT-FD DEV:INO MAX-AS PROGRAM ARGS...: the program is executed in the
// working directory if that is the directory DEV:INO (it does not return
// then), with its address space limited to MAX-AS bytes (0: not limited
// here); otherwise the refusal is written on REPORT-FD and the exit status
// returned. The address space limit is set here, not before: the Go
// runtime reserves more address space at its start than a program may be
// given.
func Enter(args []string, env []string) int {
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 || len(args) < 4 {
		_, _ = os.Stderr.WriteString("xct sandbox: bad arguments\n")
		return 125
	}
	maxAS, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		_, _ = os.Stderr.WriteString("xct sandbox: bad address space limit\n")
		return 125
	}
	args = append(args[:2:2], args[3:]...)
	report := func(what string) int {
		_, _ = syscall.Write(fd, []byte(what))
		return 125
	}
	var st syscall.Stat_t
	if err := syscall.Stat(".", &st); err != nil || DirID(st.Dev, st.Ino) != args[1] {
		return report(Moved)
	}
	if maxAS > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: maxAS, Max: maxAS}); err != nil {
			return report(NotStarted + ": address space limit: " + err.Error())
		}
	}
	// The program never holds the report descriptor.
	syscall.CloseOnExec(fd)
	err = syscall.Exec(args[2], args[2:], env) //nolint:gosec // the executor names the program (allow-listed, resolved at load) and its checked arguments
	return report(NotStarted + ": " + err.Error())
}

// DirID names a directory by its device and inode.
func DirID(dev, ino uint64) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}
