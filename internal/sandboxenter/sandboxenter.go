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
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
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
	// Unprotected: a protected entry is not the read-only mount it
	// should be at its place.
	Unprotected = "unprotected"
)

// CheckPrefix begins an argument naming a protected entry to check
// (Check), between MAX-AS and PROGRAM: a program's path begins with "/".
const CheckPrefix = "="

// ScopeAbstractUnix is the argument, between MAX-AS and PROGRAM, that has
// Enter put the program in a Landlock domain scoped for abstract Unix
// sockets (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, Landlock ABI 6, Linux
// 6.12): it and everything it starts can connect to no abstract socket
// made outside the domain (the host's, when the sandbox shares the
// host's network namespace: an X server's @/tmp/.X11-unix/X0, a session
// bus), only to those made within it. The executor passes it only when
// LandlockABI says the kernel has the scope; Enter then refuses to start
// the program without it.
const ScopeAbstractUnix = "+scope-abstract-unix"

// RefuseTCPBind is the argument, between MAX-AS and PROGRAM, that has
// Enter put the program in a Landlock domain handling TCP binds
// (LANDLOCK_ACCESS_NET_BIND_TCP, Landlock ABI 4, Linux 6.7) with one
// rule, port 0: it and everything it starts can bind no TCP port by
// number, only one the kernel picks. A program of a sandbox that shares
// the host's network namespace could otherwise listen on a loopback port
// another program dials (a restarting service's, a tool server's) and
// answer it: be sent its password, its call. Connections out are not
// handled. The executor passes it only when LandlockABI says the kernel
// has network rules; Enter then refuses to start the program without it.
const RefuseTCPBind = "+refuse-tcp-bind"

// Check is the argument that has Enter check, before the program runs,
// that the protected entry at path dest (absolute, in the sandbox) is
// still the entry the executor found there, in the directory parent
// (DirID), with inode ino, and is read-only. bubblewrap mounts it by that
// path, after the executor found it: another program of the workspace
// renaming its directory (or it) in between had the mount land on a new
// entry of that name, and the real one, under its new name, stayed
// writable (session 13, attack13).
func Check(parent string, ino uint64, dest string) string {
	return CheckPrefix + parent + ":" + strconv.FormatUint(ino, 10) + ":" + dest
}

func init() {
	if len(os.Args) < 5 || os.Args[0] != Path {
		return
	}
	os.Exit(Enter(os.Args[1:], os.Environ()))
}

// Enter is what the binary does when started as Path, with arguments
// REPORT-FD DEV:INO MAX-AS [CHECK... ScopeAbstractUnix RefuseTCPBind] PROGRAM ARGS...:
// the program is executed in the working directory if that is the
// directory DEV:INO and every Check holds (it does not return then), with
// its address space limited to MAX-AS bytes (0: not limited here), in the
// Landlock scope of abstract Unix sockets and with TCP binds refused
// when asked; otherwise the
// refusal is written on REPORT-FD and the exit status returned. The address space limit is set here, not before: the Go
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
	report := func(what string) int {
		_, _ = syscall.Write(fd, []byte(what))
		return 125
	}
	var checks []string
	scope, noBind := false, false
	for len(args) > 4 && len(args[3]) > 0 && (args[3][:1] == CheckPrefix || args[3] == ScopeAbstractUnix || args[3] == RefuseTCPBind) {
		switch args[3] {
		case ScopeAbstractUnix:
			scope = true
		case RefuseTCPBind:
			noBind = true
		default:
			checks = append(checks, args[3][1:])
		}
		args = append(args[:3:3], args[4:]...)
	}
	args = append(args[:2:2], args[3:]...)
	var st syscall.Stat_t
	if err := syscall.Stat(".", &st); err != nil || DirID(st.Dev, st.Ino) != args[1] {
		return report(Moved)
	}
	for _, c := range checks {
		if why := checkProtected(c); why != "" {
			return report(Unprotected + ": " + why)
		}
	}
	if maxAS > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: maxAS, Max: maxAS}); err != nil {
			return report(NotStarted + ": address space limit: " + err.Error())
		}
	}
	if scope || noBind {
		// The domain is the calling thread's, and execve keeps the
		// calling thread's: the same thread from here to the exec.
		runtime.LockOSThread()
		if err := restrict(scope, noBind); err != nil {
			return report(NotStarted + ": Landlock domain (abstract Unix sockets scoped " + strconv.FormatBool(scope) +
				", TCP binds refused " + strconv.FormatBool(noBind) + "): " + err.Error())
		}
	}
	// The program never holds the report descriptor.
	syscall.CloseOnExec(fd)
	err = syscall.Exec(args[2], args[2:], env) //nolint:gosec // the executor names the program (allow-listed, resolved at load) and its checked arguments
	return report(NotStarted + ": " + err.Error())
}

// Landlock's system calls (the same numbers on every architecture) and
// constants (linux/landlock.h).
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
	landlockCreateVersion    = 1 << 0 // LANDLOCK_CREATE_RULESET_VERSION
	landlockScopeAbstract    = 1 << 0 // LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	landlockNetBindTCP       = 1 << 0 // LANDLOCK_ACCESS_NET_BIND_TCP
	landlockRuleNetPort      = 2      // LANDLOCK_RULE_NET_PORT
	prSetNoNewPrivs          = 38     // PR_SET_NO_NEW_PRIVS
	// LandlockNetABI is the first Landlock ABI with network rules.
	LandlockNetABI = 4
	// LandlockScopeABI is the first Landlock ABI with scopes.
	LandlockScopeABI = 6
)

// LandlockABI is the kernel's Landlock ABI version: 0 where it has none
// (before Linux 5.13, or Landlock not enabled at boot).
func LandlockABI() int {
	v, _, errno := syscall.Syscall(sysLandlockCreateRuleset, 0, 0, landlockCreateVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// restrict restricts the calling thread (and what it executes) to a
// Landlock domain that handles no file system access, scopes abstract
// Unix sockets when scope, and refuses TCP binds but to port 0 when
// noBind.
func restrict(scope, noBind bool) error {
	// struct landlock_ruleset_attr: handled_access_fs, handled_access_net,
	// scoped. A kernel of ABI 4 or 5 knows only the first two fields and
	// takes the larger struct when the rest is zero.
	var attr [3]uint64
	if scope {
		attr[2] = landlockScopeAbstract
	}
	if noBind {
		attr[1] = landlockNetBindTCP
	}
	rfd, _, errno := syscall.Syscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0) //nolint:gosec // the kernel reads the struct during the call
	if errno != 0 {
		return errno
	}
	defer func() { _ = syscall.Close(int(rfd)) }()
	if noBind {
		// struct landlock_net_port_attr: allowed_access, port. Port 0
		// is a bind to a port the kernel picks (a client's own, a
		// browser's debugging port), never one a client waits on.
		rule := [2]uint64{landlockNetBindTCP, 0}
		if _, _, errno := syscall.Syscall6(sysLandlockAddRule, rfd, landlockRuleNetPort, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 { //nolint:gosec // the kernel reads the struct during the call
			return errno
		}
	}
	// bubblewrap sets it already (its seccomp filter needs it); without
	// it an unprivileged process may not restrict itself.
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); errno != 0 {
		return errno
	}
	if _, _, errno := syscall.RawSyscall(sysLandlockRestrictSelf, rfd, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// checkProtected checks one Check argument (without its prefix):
// PDEV:PINO:INO:DEST. It returns "" or why not.
func checkProtected(c string) string {
	var f [3]uint64
	for i := range f {
		j := 0
		for j < len(c) && c[j] != ':' {
			j++
		}
		n, err := strconv.ParseUint(c[:j], 10, 64)
		if err != nil || j == len(c) {
			return "bad check"
		}
		f[i], c = n, c[j+1:]
	}
	dest := c
	k := len(dest) - 1
	for k > 0 && dest[k] != '/' {
		k--
	}
	if k <= 0 || k == len(dest)-1 {
		return "bad check"
	}
	parent, base := dest[:k], dest[k+1:]
	// Its directory is the one the executor found it in.
	var st syscall.Stat_t
	if err := syscall.Stat(parent, &st); err != nil || DirID(st.Dev, st.Ino) != DirID(f[0], f[1]) {
		return dest + ": its directory was moved or replaced"
	}
	// The entry of that name there is the one found (the inode under
	// any mount: what the directory itself lists).
	ino, err := direntIno(parent, base)
	if err != nil || ino != f[2] {
		return dest + ": it was moved or replaced"
	}
	// And it is on a read-only mount (its own: the workspace's is not).
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dest, &sfs); err != nil || sfs.Flags&stRdonly == 0 {
		return dest + ": it is not read-only"
	}
	return ""
}

// stRdonly is ST_RDONLY of statfs(2)'s f_flags: the mount is read-only.
const stRdonly = 1

// direntIno returns the inode the directory dir lists for name: that of
// the entry itself, not of what is mounted over it.
func direntIno(dir, name string) (uint64, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = syscall.Close(fd) }()
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return 0, err
		}
		if n <= 0 {
			return 0, syscall.ENOENT
		}
		for off := 0; off+19 <= n; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			ino := binary.NativeEndian.Uint64(buf[off:])
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return 0, syscall.EINVAL
			}
			nm := buf[off+19 : off+reclen]
			for i, b := range nm {
				if b == 0 {
					nm = nm[:i]
					break
				}
			}
			if string(nm) == name {
				return ino, nil
			}
			off += reclen
		}
	}
}

// DirID names a directory by its device and inode.
func DirID(dev, ino uint64) string {
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}
