package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/xct-dev/xct/internal/sandboxenter"
)

// Sandbox modes of the tools configuration.
const (
	// SandboxBwrap runs every subprocess inside bubblewrap (the default).
	SandboxBwrap = "bwrap"
	// SandboxNone runs subprocesses with the executor's own view of the
	// system: only when the configuration says so, logged at startup and
	// on every call.
	SandboxNone = "none"
)

// Defaults of the sandbox's resource limits (rlimits of the sandboxed
// process and everything it starts).
const (
	sandboxDefaultMemory    = 2 << 30 // RLIMIT_AS of shell.exec programs
	sandboxDefaultProcesses = 256     // RLIMIT_NPROC
	sandboxDefaultFileBytes = 1 << 30 // RLIMIT_FSIZE: the largest file written
	sandboxDefaultOpenFiles = 1024    // RLIMIT_NOFILE
	sandboxDefaultTmpBytes  = 1 << 30 // each of /tmp and /var/tmp (tmpfs)
	// sandboxUID and sandboxGID are the ids a sandboxed program has inside
	// its user namespace (mapped to the executor's own ids outside): not
	// root, so it holds no capability even inside the namespace.
	sandboxUID = 1000
	sandboxGID = 1000
)

// SandboxConfig is the OS sandbox of the subprocesses of shell.exec or of
// one stdio MCP server. In the file it is a mapping, or just a mode:
//
//	sandbox: none                  # explicit: no sandbox (logged loudly)
//	sandbox:
//	  mode: bwrap                  # the default
//	  network: false               # share the host's network (default: none at all)
//	  read_only: [/opt/tool]       # more host paths, mounted read-only
//	  writable: []                 # host paths mounted writable (besides the workspace)
//	  max_memory_bytes: 2147483648 # RLIMIT_AS; -1: no limit
//	  max_processes: 256           # RLIMIT_NPROC (see docs/security.md for root)
//	  max_file_bytes: 1073741824   # RLIMIT_FSIZE
//	  max_open_files: 1024         # RLIMIT_NOFILE
//	  max_tmp_bytes: 1073741824    # size of the private /tmp, /var/tmp and /dev/shm (each)
type SandboxConfig struct {
	// Mode is SandboxBwrap (default) or SandboxNone.
	Mode string `yaml:"mode"`
	// Network shares the executor's network namespace with the sandbox;
	// without it the program has no network at all (only its own
	// loopback), and /etc/resolv.conf, /etc/hosts and the CA certificates
	// are not mounted.
	Network bool `yaml:"network"`
	// ReadOnly are more host paths mounted read-only at the same place
	// (libraries or data outside /usr a program needs).
	ReadOnly []string `yaml:"read_only"`
	// Writable are host paths mounted writable at the same place: every
	// such path widens what a program can change; keep it empty. A
	// shell.exec program whose effect class is read or reversible gets
	// them read-only (they outlive the step: what it left there a later
	// program would trust, and no undo covers it).
	Writable []string `yaml:"writable"`
	// MaxMemoryBytes is the address space limit (RLIMIT_AS); 0 is the
	// default (2 GiB for shell.exec, none for MCP servers), -1 none.
	MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
	// MaxProcesses is RLIMIT_NPROC (default 256).
	MaxProcesses int64 `yaml:"max_processes"`
	// MaxFileBytes is the largest file a program may write, RLIMIT_FSIZE
	// (default 1 GiB).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxOpenFiles is RLIMIT_NOFILE (default 1024).
	MaxOpenFiles int64 `yaml:"max_open_files"`
	// MaxTmpBytes is the size of the private /tmp, /var/tmp and /dev/shm,
	// each a tmpfs (default 1 GiB): what is written there is memory,
	// which no rlimit counts. The rest of /dev is read-only.
	MaxTmpBytes int64 `yaml:"max_tmp_bytes"`
}

// UnmarshalYAML accepts "sandbox: none" (or "bwrap") as well as a mapping.
func (c *SandboxConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&c.Mode)
	}
	type plain SandboxConfig
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = SandboxConfig(p)
	return nil
}

// disabled says that the configuration asked for no sandbox.
func (c *SandboxConfig) disabled() bool { return c != nil && c.Mode == SandboxNone }

// checkSandbox checks a sandbox section; p is its place in the file.
func (v *configCheck) checkSandbox(p []any, c *SandboxConfig) {
	if c == nil {
		return
	}
	switch c.Mode {
	case "", SandboxBwrap, SandboxNone:
	default:
		v.fail(append(p, "mode"), "sandbox %q: want %s (the default) or %s", c.Mode, SandboxBwrap, SandboxNone)
	}
	if c.Mode == SandboxNone && (c.Network || len(c.ReadOnly)+len(c.Writable) > 0) {
		v.fail(p, "sandbox none takes no other setting")
	}
	for _, list := range []struct {
		key   string
		paths []string
	}{{"read_only", c.ReadOnly}, {"writable", c.Writable}} {
		for i, hostPath := range list.paths {
			if !filepath.IsAbs(hostPath) || filepath.Clean(hostPath) != hostPath || hostPath == "/" {
				v.fail(append(p, list.key, i), "%q must be a clean absolute path other than /", hostPath)
			}
		}
	}
	if c.MaxMemoryBytes < -1 || c.MaxProcesses < 0 || c.MaxFileBytes < 0 || c.MaxOpenFiles < 0 || c.MaxTmpBytes < 0 {
		v.fail(p, "sandbox limits must not be negative (max_memory_bytes -1 means no limit)")
	}
}

// sandbox runs programs inside bubblewrap: a new user, mount, PID, IPC,
// UTS, cgroup and (unless allowed) network namespace; a root file system
// that holds only the system's read-only directories, the program, and the
// workspace (the only writable place besides a private /tmp); no
// capabilities; a clean environment; and rlimits set by prlimit before
// bwrap starts. When the program exits, or bwrap is killed at the
// deadline, the kernel kills everything left in its PID namespace, a
// setsid'd daemon included.
type osSandbox struct {
	cfg   SandboxConfig
	bwrap string // resolved path of bwrap
	prlim string // resolved path of prlimit
	wsDir string // the workspace, mounted writable at the same path
	// extra are protected paths of the workspace, opened without
	// following links (O_PATH), mounted read-only over it; firstFD is the
	// descriptor number the first of them has in the child.
	extra   []protectedMount
	firstFD int
	// seccomp is the filter bwrap reads (descriptor firstFD), nil where
	// there is none for this architecture.
	seccomp *os.File
	memory  int64 // effective RLIMIT_AS, 0: none
	// tmpSized: this bwrap sizes a tmpfs (--size, bubblewrap 0.7); an
	// older one mounts /tmp unbounded (logged).
	tmpSized bool
	// readOnlyWorkspace mounts the workspace read-only: the program's
	// effect class is read, and the sandbox keeps it to that.
	readOnlyWorkspace bool
	// readOnlyWritable mounts the configured writable directories
	// read-only too: a shell.exec program whose effect class is read or
	// reversible (the default policy runs both with no human) leaves
	// nothing outside the workspace for a later program to trust (a
	// cache it poisoned), and no effect no undo covers. A stdio MCP
	// server's instances keep them writable: its launcher needs its
	// cache to start at all.
	readOnlyWritable bool
	// noUnixSockets refuses socket(AF_UNIX) (seccompProgram): for a
	// sandbox that lives between calls.
	noUnixSockets bool
	// ownDir, when set, is an empty directory outside the workspace
	// (a stdio MCP server's: mcpServer.dir), mounted read-only at its
	// path after everything else: the program starts there, where the
	// model has put nothing for a launcher to find.
	ownDir string
	// enter, when set, starts the program through the executor's own
	// binary (internal/sandboxenter), which checks that the working
	// directory is the one the executor checked before it executes it.
	enter *sandboxEnter
	// scopeAbstract: the sandbox shares the host's network namespace,
	// and with it the host's abstract Unix sockets, and the kernel can
	// scope them away (Landlock ABI 6): every start goes through enter,
	// which puts the program in a Landlock domain that reaches only the
	// abstract sockets made within it (sandboxenter.ScopeAbstractUnix).
	scopeAbstract bool
	// refuseBind: the sandbox shares the host's network namespace, and
	// with it the host's loopback ports, and the kernel can refuse TCP
	// binds (Landlock ABI 4): every start goes through enter, which puts
	// the program in a Landlock domain where it binds no TCP port but one
	// the kernel picks (sandboxenter.RefuseTCPBind): it cannot listen on
	// a port another program dials.
	refuseBind bool
	// landlockABI is the kernel's Landlock ABI, read at setup.
	landlockABI int

	// err is why the sandbox cannot be used (found at setup): every call
	// of a tool that needs it is refused with it.
	err error
}

// sandboxSystemDirs are mounted read-only when present (symbolic links,
// as on merged-/usr systems, are recreated as links).
var sandboxSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// sandboxEtc is the part of /etc a program gets: the dynamic loader's
// cache, Debian's alternatives links, the locale and time zone, and the
// system configuration of the programs the examples run (git).
var sandboxEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/locale.alias", "/etc/nsswitch.conf", "/etc/gitconfig",
}

// sandboxNetEtc is added when the sandbox has the network.
var sandboxNetEtc = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates", "/etc/pki"}

// newSandbox prepares a sandbox over the workspace wsDir; defMemory is
// the address space limit when the configuration sets none (0: none).
// It never fails: a sandbox that cannot be set up keeps the reason, and
// every program it would run is refused with it (fail closed).
func newOSSandbox(cfg *SandboxConfig, wsDir string, defMemory int64) *osSandbox {
	s := &osSandbox{wsDir: wsDir}
	if cfg != nil {
		s.cfg = *cfg
	}
	switch s.cfg.MaxMemoryBytes {
	case 0:
		s.memory = defMemory
	case -1:
		s.memory = 0
	default:
		s.memory = s.cfg.MaxMemoryBytes
	}
	if s.cfg.MaxProcesses == 0 {
		s.cfg.MaxProcesses = sandboxDefaultProcesses
	}
	if s.cfg.MaxFileBytes == 0 {
		s.cfg.MaxFileBytes = sandboxDefaultFileBytes
	}
	if s.cfg.MaxOpenFiles == 0 {
		s.cfg.MaxOpenFiles = sandboxDefaultOpenFiles
	}
	if s.cfg.MaxTmpBytes == 0 {
		s.cfg.MaxTmpBytes = sandboxDefaultTmpBytes
	}
	var err error
	if s.bwrap, err = resolveProgram("bwrap"); err != nil {
		s.err = fmt.Errorf("bubblewrap (bwrap) is not installed: %w (install the Debian package bubblewrap, or set sandbox: none to run without one)", err)
		return s
	}
	if s.prlim, err = resolveProgram("prlimit"); err != nil {
		s.err = fmt.Errorf("prlimit (util-linux) is not installed: %w", err)
		return s
	}
	s.tmpSized = bwrapSizesTmpfs(s.bwrap)
	if s.cfg.Network {
		s.landlockABI = sandboxenter.LandlockABI()
		s.scopeAbstract = s.landlockABI >= sandboxenter.LandlockScopeABI
		s.refuseBind = s.landlockABI >= sandboxenter.LandlockNetABI
	}
	s.err = s.probe()
	return s
}

// logScope says, once for the sandbox (at setup), when it shares the
// host's network namespace and the kernel cannot keep the host's
// abstract Unix sockets from its programs.
func (s *osSandbox) logScope(log *slog.Logger, what string) {
	if s.err != nil || !s.cfg.Network {
		return
	}
	if !s.refuseBind {
		log.Warn("SECURITY: "+what+" shares the host's network and this kernel's Landlock (ABI "+strconv.Itoa(s.landlockABI)+
			") cannot refuse TCP binds (ABI 4, Linux 6.7): its programs can listen on a loopback port another program dials",
			"landlock_abi", s.landlockABI)
	}
	if s.scopeAbstract {
		return
	}
	log.Warn("SECURITY: "+what+" shares the host's network and this kernel's Landlock (ABI "+strconv.Itoa(s.landlockABI)+
		") cannot scope abstract Unix sockets (ABI 6, Linux 6.12): its programs can connect to the host's abstract sockets (an X server, a session bus)",
		"landlock_abi", s.landlockABI)
}

// needsEnter says whether a start of this sandbox must go through
// enter (set it before argv).
func (s *osSandbox) needsEnter() bool { return s.scopeAbstract || s.refuseBind }

// errNoEnter refuses a start that should go through enter and does not
// (a caller that forgot it): never start without the scope.
var errNoEnter = errors.New("the sandbox shares the host's network and must start its program through its Landlock domain (abstract Unix sockets scoped, TCP binds refused), which was not prepared")

// bwrapSizesTmpfs reports whether the bwrap at path knows --size (0.7
// and later), asked once per path.
func bwrapSizesTmpfs(path string) bool {
	bwrapSizeMu.Lock()
	defer bwrapSizeMu.Unlock()
	if ok, seen := bwrapSize[path]; seen {
		return ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := osexec.CommandContext(ctx, path, "--help").CombinedOutput() //nolint:gosec // bwrap, resolved
	ok := bytes.Contains(out, []byte("--size"))
	bwrapSize[path] = ok
	return ok
}

var (
	bwrapSizeMu sync.Mutex
	bwrapSize   = map[string]bool{}
)

// SandboxAvailable reports whether bubblewrap can make a sandbox on this
// machine, and why not: tests and `xct dev` say so up front.
func SandboxAvailable() error {
	return newOSSandbox(nil, os.TempDir(), sandboxDefaultMemory).err
}

// probe runs bwrap itself inside a sandbox like the programs', to find
// out now (not at the first step) whether the kernel allows it.
func (s *osSandbox) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbx, _, _ := s.withProtected(nil, 4) // the seccomp filter too; fd 3 is the status
	defer sbx.closeExtra()
	argv := sbx.argv(s.bwrap, "bwrap", []string{"--version"}, s.wsDir, nil)
	cmd := osexec.CommandContext(ctx, argv[0], argv[1:]...) //nolint:gosec // bwrap and prlimit, resolved
	cmd.Env = []string{}
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	sr, sw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.ExtraFiles = append([]*os.File{sw}, sbx.extraFiles()...)
	status := readSandboxStatus(sr)
	err = cmd.Start()
	_ = sw.Close()
	if err == nil {
		err = cmd.Wait()
	}
	ran, code := status.wait(time.Second)
	if err == nil && (!ran || code != 0) {
		err = fmt.Errorf("the probe did not run (status: started %v, exit code %d)", ran, code)
	}
	if err != nil {
		return fmt.Errorf("bubblewrap cannot make a sandbox here (it needs unprivileged user namespaces, or CAP_SYS_ADMIN; see docs/security.md): %w: %s",
			err, strings.TrimSpace(head(out.String(), 512)))
	}
	return nil
}

// sandboxBin holds, in the sandbox, a link named as the configuration
// names a binary to the file it resolved to: the binary is started
// through it, so its argv[0] is its configured name.
const sandboxBin = "/.xct/bin"

// argv is the command line that runs program (the resolved file of the
// program configured as name) with args inside the sandbox, in directory
// dir (a host path inside the workspace, or ownDir), with the environment env
// ("K=V"). The status of bwrap goes to file descriptor 3. A binary whose
// file is named otherwise is started as sandboxBin/name, a link to it: a
// program that acts by the name it is started as (busybox, xz as unxz)
// does what its configured name says, not what its file is called
// (busybox, given its own name, takes the first argument for the program
// to be). A script is started by its file's path, as before: it finds
// what lies beside it by $0.
func (s *osSandbox) argv(program, name string, args []string, dir string, env []string) []string {
	a := []string{s.prlim, "--core=0",
		"--nproc=" + strconv.FormatInt(s.cfg.MaxProcesses, 10),
		"--fsize=" + strconv.FormatInt(s.cfg.MaxFileBytes, 10),
		"--nofile=" + strconv.FormatInt(s.cfg.MaxOpenFiles, 10)}
	if s.memory > 0 && s.enter == nil {
		// With the check of the working directory, the check sets it:
		// the Go runtime needs more address space to start than a
		// program may be given.
		a = append(a, "--as="+strconv.FormatInt(s.memory, 10))
	}
	a = append(a, "--", s.bwrap,
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(sandboxUID), "--gid", strconv.Itoa(sandboxGID),
		"--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "xct-sandbox",
		"--clearenv")
	if !s.cfg.Network {
		a = append(a, "--unshare-net")
	}
	for _, d := range sandboxSystemDirs {
		a = append(a, mountArgs(d, "--ro-bind")...)
	}
	etc := sandboxEtc
	if s.cfg.Network {
		etc = append(slices.Clone(etc), sandboxNetEtc...)
	}
	for _, f := range etc {
		a = append(a, mountArgs(f, "--ro-bind")...)
	}
	// The tmpfs mounts are memory: bounded, or one program could fill the
	// host's RAM with files (RLIMIT_AS and RLIMIT_FSIZE do not count them).
	// bwrap's /dev is such a tmpfs too (half the host's memory): its
	// shared memory directory is sized as /tmp is, and the rest is made
	// read-only (its device nodes still work).
	a = append(a, "--dev", "/dev", "--proc", "/proc")
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		if s.tmpSized {
			a = append(a, "--size", strconv.FormatInt(s.cfg.MaxTmpBytes, 10))
		}
		a = append(a, "--tmpfs", d)
	}
	a = append(a, "--remount-ro", "/dev")
	// The program itself, where it lives (a system directory already holds
	// most), and the configured extras.
	if !underAny(program, sandboxSystemDirs) {
		a = append(a, "--ro-bind", program, program)
	}
	for _, p := range s.cfg.ReadOnly {
		a = append(a, "--ro-bind-try", p, p)
	}
	for _, p := range s.cfg.Writable {
		if s.readOnlyWritable {
			a = append(a, "--ro-bind-try", p, p)
		} else {
			a = append(a, "--bind-try", p, p)
		}
	}
	// The workspace last: nothing above may cover it. A program whose
	// effect class is read gets it read-only: whatever the program can be
	// made to run (a configuration file the model wrote, read from the
	// working directory) cannot change what a read was allowed to leave
	// alone.
	wsBind := "--bind"
	if s.readOnlyWorkspace {
		wsBind = "--ro-bind"
	}
	a = append(a, wsBind, s.wsDir, s.wsDir)
	if s.ownDir != "" {
		a = append(a, "--ro-bind", s.ownDir, s.ownDir)
	}
	fd := s.firstFD
	if s.seccomp != nil {
		a = append(a, "--seccomp", strconv.Itoa(fd))
		fd++
	}
	for i, m := range s.extra {
		a = append(a, "--ro-bind-fd", strconv.Itoa(fd+i), m.dest)
	}
	fd += len(s.extra)
	if s.enter != nil {
		a = append(a, "--ro-bind-fd", strconv.Itoa(fd), sandboxenter.Path)
	}
	started := program
	if name != path.Base(program) && isELF(program) {
		started = path.Join(sandboxBin, name)
		a = append(a, "--symlink", program, started)
	}
	// bwrap's root is a tmpfs of half the host's memory, writable to
	// the program (the workspace's parent directories are made there):
	// read-only once every mount above is made.
	a = append(a, "--remount-ro", "/", "--chdir", dir)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--json-status-fd", "3", "--")
	if s.enter != nil {
		a = append(a, sandboxenter.Path, strconv.Itoa(fd+1), s.enter.dir, strconv.FormatInt(s.memory, 10))
		for _, m := range s.extra {
			a = append(a, sandboxenter.Check(m.parent, m.ino, m.dest))
		}
		if s.scopeAbstract {
			a = append(a, sandboxenter.ScopeAbstractUnix)
		}
		if s.refuseBind {
			a = append(a, sandboxenter.RefuseTCPBind)
		}
	}
	a = append(a, started)
	return append(a, args...)
}

// sandboxEnter is the check a program's start goes through in the
// sandbox: the executor's binary (exe, mounted at sandboxenter.Path)
// executes the program only in the directory dir (sandboxenter.DirID),
// and writes on report why it did not.
type sandboxEnter struct {
	exe    *os.File
	report *os.File
	dir    string
}

// newSandboxEnter prepares the check of a program's start in the
// directory dir (opened, checked): the executor's own binary, opened
// through /proc/self/exe (the program that is running, even if its file
// was replaced since), and the report pipe, whose reading end it returns
// already being read. The caller closes both ends.
func newSandboxEnter(dir *os.File) (*sandboxEnter, *enterReport, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(dir.Fd()), &st); err != nil {
		return nil, nil, err
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, nil, fmt.Errorf("the executor's own binary: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		_ = exe.Close()
		return nil, nil, err
	}
	rep := &enterReport{done: make(chan struct{}), r: r}
	go func() {
		defer close(rep.done)
		b, _ := io.ReadAll(io.LimitReader(r, 4096))
		rep.text = string(b)
	}()
	return &sandboxEnter{exe: exe, report: w, dir: sandboxenter.DirID(uint64(st.Dev), uint64(st.Ino))}, rep, nil //nolint:unconvert // Dev is not uint64 everywhere
}

// enterReport is what the check of a program's start wrote: nothing when
// the program was started.
type enterReport struct {
	done chan struct{}
	r    *os.File
	text string
}

// wait returns the report once every writer closed it (the sandbox
// exited), waiting at most d.
func (e *enterReport) wait(d time.Duration) string {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.done:
		return e.text
	case <-t.C:
		_ = e.r.Close()
		<-e.done
		return e.text
	}
}

// mountArgs mounts a host path at the same place: a symbolic link is
// recreated (merged /usr), a missing path is skipped.
func mountArgs(p, bind string) []string {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return nil
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return nil
		}
		return []string{"--symlink", target, p}
	}
	return []string{bind, p, p}
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if real, err := filepath.EvalSymlinks(d); err == nil && (p == real || strings.HasPrefix(p, real+"/")) {
			return true
		}
	}
	return false
}

// oPath is Linux's O_PATH (the syscall package does not name it): a
// descriptor that names a file without opening it for reading.
const oPath = 0x200000

// protectedMount is a protected entry at the top of the workspace, held
// open so that what is mounted is what was checked.
type protectedMount struct {
	file *os.File
	dest string
	// parent and ino are the directory it was found in (DirID) and its
	// inode: checked in the sandbox before the program runs
	// (sandboxenter.Check).
	parent string
	ino    uint64
}

// withProtected returns a copy of the sandbox that also mounts, read-only
// over the workspace, the protected entries it finds anywhere in it (a
// scan of the whole workspace that reads at most fs.protected_scan_entries
// names): a program cannot change .git/config or a hook even through an
// allowed tool. Each is opened with O_PATH|O_NOFOLLOW, through
// directories opened with O_NOFOLLOW, and mounted through its descriptor
// (--ro-bind-fd): a symbolic link planted there (".git -> /") is not
// followed on the host, and cannot be swapped in after the check. It
// also returns the protected entries found (links included, which are
// not mounted: a link inside the sandbox resolves inside it), and "" when
// the scan read the whole workspace and every entry is mounted, otherwise
// why not: then some may be writable, and a program that may write must
// not run. The seccomp filter comes first: the files start at descriptor
// firstFD in the child; close them with closeExtra once the child
// started. With protected nil nothing is scanned.
func (s *osSandbox) withProtected(protected *protectedPaths, firstFD int) (*osSandbox, protectedSet, string) {
	c := *s
	c.extra, c.firstFD, c.seccomp = nil, firstFD, nil
	f, err := seccompFile(s.noUnixSockets)
	if err != nil {
		// Never run without the filter it should have (for a stdio MCP
		// server's read-only instance, the one that keeps Unix sockets
		// away): every start of this sandbox is refused.
		c.err = fmt.Errorf("its seccomp filter could not be made: %w", err)
	}
	c.seccomp = f
	if protected == nil {
		return &c, nil, ""
	}
	dir, err := openScanTop(s.wsDir)
	if err != nil {
		return &c, nil, workspaceUnreadable + err.Error()
	}
	defer func() { _ = dir.Close() }()
	var names protectedSet
	var cut string
	for range scanAttempts {
		for _, m := range c.extra {
			_ = m.file.Close()
		}
		c.extra = nil
		if names, cut = c.scanProtected(protected, dir); !strings.HasPrefix(cut, scanChanged) {
			break
		}
	}
	if cut == "stopped" {
		cut = fmt.Sprintf("the workspace holds more than %d protected entries to mount read-only", protectMaxMounts)
	}
	return &c, names, cut
}

// scanProtected scans the workspace dir for the protected entries, and
// adds each to the mounts of s.
func (s *osSandbox) scanProtected(protected *protectedPaths, dir *os.File) (protectedSet, string) {
	c := s
	names := protectedSet{}
	budget := protected.scanBudget()
	cut := protected.walk(dir, "", 0, &budget, func(d int, name, rel string) bool {
		names.add(d, name, rel)
		fd, err := syscall.Openat(d, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return true // gone
		}
		f := os.NewFile(uintptr(fd), name)
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			// A link inside the sandbox resolves inside it: nothing of
			// the host to protect, and never to mount.
			_ = f.Close()
			return true
		}
		if len(c.extra) >= protectMaxMounts {
			_ = f.Close()
			return false
		}
		var pst syscall.Stat_t
		if syscall.Fstat(d, &pst) != nil {
			_ = f.Close()
			return true // gone
		}
		c.extra = append(c.extra, protectedMount{file: f, dest: filepath.Join(s.wsDir, filepath.FromSlash(rel)),
			parent: sandboxenter.DirID(uint64(pst.Dev), pst.Ino), ino: st.Ino}) //nolint:unconvert // Dev is not uint64 everywhere
		return true
	})
	if cut != "" {
		return names, cut
	}
	// What the protected links lead to in the workspace (a hook linked
	// to scripts/pre-commit) is mounted read-only too, and known by its
	// identity: one the program makes or replaces there is new after it.
	root, err := rootAt(int(dir.Fd()))
	if err != nil {
		return names, workspaceUnreadable + err.Error()
	}
	defer func() { _ = root.Close() }()
	for target, link := range protected.linkTargets(root, s.wsDir, names) {
		if len(c.extra) >= protectMaxMounts {
			return names, "stopped"
		}
		m, id, ok := openTarget(int(dir.Fd()), target)
		if !ok {
			if fi, err := root.Lstat(target); err == nil && fi.Mode()&os.ModeSymlink == 0 {
				// There, and not to be mounted: never writable.
				return names, "the target " + target + " of the protected link " + link + " could not be opened"
			}
			continue // not there: one the program makes is moved aside after it
		}
		names[target] = id
		m.dest = filepath.Join(s.wsDir, filepath.FromSlash(target))
		c.extra = append(c.extra, m)
	}
	return names, cut
}

// openTarget opens the workspace entry rel (top: the workspace's
// descriptor) for a read-only mount, reached without following a link;
// ok is false when it is not there or is a link.
func openTarget(top int, rel string) (protectedMount, entryID, bool) {
	dir, base := path.Split(rel)
	if dir == "" {
		dir = "."
	}
	pfd, err := openat2(top, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return protectedMount{}, entryID{}, false
	}
	defer func() { _ = unix.Close(pfd) }()
	var pst, st unix.Stat_t
	fd, err := unix.Openat(pfd, base, oPath|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return protectedMount{}, entryID{}, false
	}
	if unix.Fstat(pfd, &pst) != nil || unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		_ = unix.Close(fd)
		return protectedMount{}, entryID{}, false
	}
	return protectedMount{file: os.NewFile(uintptr(fd), base), parent: sandboxenter.DirID(uint64(pst.Dev), pst.Ino), ino: st.Ino}, //nolint:unconvert // Dev is not uint64 everywhere
		entryID{dev: uint64(st.Dev), ino: st.Ino}, true //nolint:unconvert // Dev is not uint64 everywhere
}

// closeOnExecInherited marks every descriptor of the executor above 2
// close-on-exec. Go opens its own so; one inherited from whatever started
// the executor (a supervisor's pipe, a directory) may not be, and would
// otherwise pass through prlimit and bwrap into the sandbox: a door to the
// host. Called before every sandboxed start (descriptors can be inherited
// only at exec, but a library may open one without the flag).
func closeOnExecInherited() {
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, de := range des {
		fd, err := strconv.Atoi(de.Name())
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
}

// extraFiles are the descriptors to pass to the child, in order.
func (s *osSandbox) extraFiles() []*os.File {
	var out []*os.File
	if s.seccomp != nil {
		out = append(out, s.seccomp)
	}
	for _, m := range s.extra {
		out = append(out, m.file)
	}
	if s.enter != nil {
		out = append(out, s.enter.exe, s.enter.report)
	}
	return out
}

// closeExtra closes the parent's copies of the protected descriptors.
func (s *osSandbox) closeExtra() {
	if s.seccomp != nil {
		_ = s.seccomp.Close()
	}
	for _, m := range s.extra {
		_ = m.file.Close()
	}
	if s.enter != nil {
		_ = s.enter.exe.Close()
		_ = s.enter.report.Close()
	}
}

// sandboxStatus reads bwrap's JSON status lines: the first names the
// sandbox's init (its host pid), and the exit-code line, written only for
// a program that ran, says whether the program was started at all.
type sandboxStatus struct {
	mu       sync.Mutex
	exited   bool
	exitCode int
	childPID int
	// known is closed once the init's pid is read, or the pipe ended.
	known chan struct{}
	done  chan struct{}
}

func readSandboxStatus(r io.ReadCloser) *sandboxStatus {
	st := &sandboxStatus{known: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(st.done)
		defer func() { _ = r.Close() }()
		var once sync.Once
		defer once.Do(func() { close(st.known) })
		sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
		for sc.Scan() {
			var line struct {
				ExitCode *int `json:"exit-code"`
				ChildPID *int `json:"child-pid"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			st.mu.Lock()
			if line.ExitCode != nil {
				st.exited, st.exitCode = true, *line.ExitCode
			}
			if line.ChildPID != nil && st.childPID == 0 {
				st.childPID = *line.ChildPID
			}
			st.mu.Unlock()
			if line.ChildPID != nil {
				once.Do(func() { close(st.known) })
			}
		}
	}()
	return st
}

// wait waits for the status pipe to close (bwrap exited), at most d.
func (st *sandboxStatus) wait(d time.Duration) (exited bool, code int) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-st.done:
	case <-t.C:
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.exited, st.exitCode
}

// initPID is the host pid of the sandbox's init (PID 1 of its PID
// namespace), once bwrap said it; 0 if bwrap ended without making one.
func (st *sandboxStatus) initPID(ctx context.Context) (int, error) {
	select {
	case <-st.known:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.childPID, nil
}

// sandboxProc is a long-running program in a sandbox: bwrap as the
// executor started it, and the sandbox's init (PID 1 of its PID
// namespace) held by a pidfd. Killing the init kills every process of the
// namespace, however it detached itself (setsid, a double fork, signals
// ignored: SIGKILL from outside cannot be), and the init's exit completes
// only once every other process of the namespace is gone (the kernel
// reaps them first): when kill returns, nothing the program started runs,
// and no descriptor it held is open.
type sandboxProc struct {
	cmd    *osexec.Cmd
	status *sandboxStatus
	// sbx holds the descriptors the child inherits, statusW the writing
	// end of the status pipe: the parent's copies are closed once it
	// started.
	sbx     *osSandbox
	statusW *os.File

	mu    sync.Mutex
	pidfd int // -1: not held (not yet, or gone)
	// exitedEarly: the init had exited when hold looked for it.
	exitedEarly bool
	// killOnce makes kill act once; gone is what it found.
	killOnce sync.Once
	gone     bool
}

// startableSandboxProc prepares cmd (bwrap, from sbx.argv, with --json-status-fd 3) to
// run with the status pipe and sbx's descriptors.
func startableSandboxProc(cmd *osexec.Cmd, sbx *osSandbox) (*sandboxProc, error) {
	if sbx.err != nil {
		return nil, sbx.err
	}
	if sbx.needsEnter() && sbx.enter == nil {
		return nil, errNoEnter
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append([]*os.File{sw}, sbx.extraFiles()...) // fd 3: bwrap's --json-status-fd
	return &sandboxProc{cmd: cmd, status: readSandboxStatus(sr), sbx: sbx, statusW: sw, pidfd: -1}, nil
}

// started closes the parent's copies of what the child inherited (call
// it once the child started, or failed to).
func (p *sandboxProc) started() {
	_ = p.statusW.Close()
	p.sbx.closeExtra()
}

// ran says whether bwrap made the sandbox's init (the program may have
// run), false when it ended before (a mount it could not make): then
// nothing of the program ran.
func (p *sandboxProc) ran() bool {
	select {
	case <-p.status.known:
	default:
		return true // not said yet: assume the worst
	}
	p.status.mu.Lock()
	defer p.status.mu.Unlock()
	return p.status.childPID > 0
}

// hold opens a pidfd of the sandbox's init, which bwrap named on its
// status pipe, and checks that it is the child of the bwrap the executor
// started (not reaped yet, so its pid is not reused): the pidfd names
// that very process, whatever pid is reused later.
func (p *sandboxProc) hold(ctx context.Context) error {
	pid, err := p.status.initPID(ctx)
	if err != nil {
		return err
	}
	// bwrap (not waited for yet) keeps its pid: an init that is not its
	// child, or not there, has exited, and every process of its
	// namespace with it.
	if pid <= 0 {
		p.initGone()
		return errors.New("bubblewrap ended without starting the sandbox")
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		p.initGone()
		return fmt.Errorf("the sandbox's init (pid %d) is gone: %w", pid, err)
	case err != nil:
		// ENOSYS before Linux 5.3, EPERM under a seccomp profile that
		// refuses it: without it no instance can be stopped for sure.
		return fmt.Errorf("pidfd_open of the sandbox's init: %w (the executor needs pidfd_open and pidfd_send_signal, Linux 5.3)", err)
	}
	if ppid, err := parentPID(pid); err != nil || ppid != p.cmd.Process.Pid {
		_ = unix.Close(fd)
		p.initGone()
		if err == nil {
			err = fmt.Errorf("pid %d is now a child of %d", pid, ppid)
		}
		return fmt.Errorf("the sandbox's init (pid %d) is gone: %w", pid, err)
	}
	p.mu.Lock()
	p.pidfd = fd
	p.mu.Unlock()
	return nil
}

// sandboxKillWait bounds how long kill waits for a PID namespace to be
// gone: only a process stuck in the kernel (a hung file system) takes
// longer, and it dies as soon as it leaves it.
const sandboxKillWait = 10 * time.Second

// initGone records that the sandbox's init exited before it was held:
// kill has nothing left to wait for.
func (p *sandboxProc) initGone() {
	p.mu.Lock()
	p.exitedEarly = true
	p.mu.Unlock()
}

// kill kills the sandbox's init, and so every process of its PID
// namespace, and reports whether they are all gone (it waits for that,
// at most sandboxKillWait). Without a held init it kills bwrap, and the
// init dies with it (--die-with-parent), shortly after: that is not
// waited for, and it reports false. It acts once; a later call returns
// what the first found, once it is known.
func (p *sandboxProc) kill() bool {
	p.killOnce.Do(func() {
		p.mu.Lock()
		fd, early := p.pidfd, p.exitedEarly
		p.pidfd = -1
		p.mu.Unlock()
		if fd < 0 {
			p.gone = early
			// os.Process signals through a pidfd: never another
			// process that got bwrap's pid after it was waited for.
			if p.cmd.Process != nil {
				_ = p.cmd.Process.Kill()
			}
			return
		}
		defer func() { _ = unix.Close(fd) }()
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			_ = p.cmd.Process.Kill() // cannot happen: the executor's own child's child
		}
		p.gone = waitPidfd(fd, sandboxKillWait)
	})
	return p.gone
}

// waitPidfd waits, at most d, for the process of a pidfd to exit. A
// pidfd is readable once its process exited; for a PID namespace's init
// that is after the kernel killed and reaped every other process of the
// namespace.
func waitPidfd(fd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}} //nolint:gosec // a descriptor number
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		switch {
		case err == nil && n > 0:
			return true
		case err != nil && !errors.Is(err, unix.EINTR):
			return false
		}
	}
}

// parentPID is the parent's pid of process pid, from /proc.
func parentPID(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold anything but the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("unreadable /proc stat")
	}
	return strconv.Atoi(f[1])
}

// isELF reports whether the file at p is an ELF binary (a script is
// not: the kernel starts its interpreter, with the path as given).
func isELF(p string) bool {
	f, err := os.Open(p) //nolint:gosec // a configured program, resolved at load
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "\x7fELF"
}
