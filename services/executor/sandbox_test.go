package executor

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// requireSandbox skips a test that needs bubblewrap where it cannot make a
// sandbox, saying why; under make test (XCT_REQUIRE_SANDBOX=1) it fails.
func requireSandbox(tb testing.TB) {
	tb.Helper()
	if err := SandboxAvailable(); err != nil {
		if os.Getenv("XCT_REQUIRE_SANDBOX") == "1" {
			tb.Fatalf("XCT_REQUIRE_SANDBOX=1 but no OS sandbox here: %v (install bubblewrap: make test-deps; and allow user namespaces)", err)
		}
		tb.Skipf("no OS sandbox here: %v (make test requires it)", err)
	}
}

// sandboxProbeArg makes the test binary a small probe program run inside
// the sandbox (see TestMain): "dial ADDR" connects, "read PATH" reads.
const sandboxProbeArg = "xct-sandbox-probe"

func sandboxProbe(args []string) int {
	switch args[0] {
	case "dial":
		c, err := net.DialTimeout("tcp", args[1], 2*time.Second)
		if err != nil {
			fmt.Println("dial failed:", err)
			return 1
		}
		_ = c.Close()
		fmt.Println("connected")
		return 0
	case "syscall":
		// A raw system call with arguments that make it fail harmlessly
		// where it is allowed; prints the errno.
		nr := probeSyscalls[runtime.GOARCH][args[1]]
		a1 := ^uintptr(0) // an invalid command, flags or size
		if args[1] == "ptrace" {
			a1 = 0 // PTRACE_TRACEME: succeeds where allowed
		}
		_, _, errno := syscall.Syscall6(nr, a1, 0, 0, 0, 0, 0)
		fmt.Println(args[1], int(errno))
		return 0
	case "dialunix":
		// An abstract Unix socket ("@name"): the host's, or with "self"
		// one this process listens on itself.
		name := args[1]
		if name == "self" {
			name = fmt.Sprintf("@xct-probe-self-%d", os.Getpid())
			l, err := net.Listen("unix", name)
			if err != nil {
				fmt.Println("listen failed:", err)
				return 1
			}
			defer func() { _ = l.Close() }()
		}
		c, err := net.DialTimeout("unix", name, 2*time.Second)
		if err != nil {
			fmt.Println("dial failed:", err)
			return 1
		}
		_ = c.Close()
		fmt.Println("connected")
		return 0
	case "listen":
		// Binds a TCP address (a port another program connects to) and
		// says whether it could.
		l, err := net.Listen("tcp", args[1])
		if err != nil {
			fmt.Println("listen failed:", err)
			return 1
		}
		_ = l.Close()
		fmt.Println("listening")
		return 0
	case "listenmptcp":
		// The same through an MPTCP socket (an IPv4 loopback port), which
		// TCP clients reach too.
		host, port, _ := net.SplitHostPort(args[1])
		p, _ := strconv.Atoi(port)
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 262) // IPPROTO_MPTCP
		if err == nil {
			defer func() { _ = syscall.Close(fd) }()
			sa := &syscall.SockaddrInet4{Port: p}
			copy(sa.Addr[:], net.ParseIP(host).To4())
			if err = syscall.Bind(fd, sa); err == nil {
				err = syscall.Listen(fd, 1)
			}
		}
		if err != nil {
			fmt.Println("listen failed:", err)
			return 1
		}
		fmt.Println("listening")
		return 0
	case "memfd":
		// Fills memory files (memfd_create: shared memory, counted by no
		// tmpfs size and not by RLIMIT_AS) with the number of bytes
		// given, 1 MiB each, holding them open.
		n, _ := strconv.Atoi(args[1])
		chunk := make([]byte, 1<<20)
		for held := 0; held < n; held += len(chunk) {
			fd, _, errno := syscall.Syscall(probeSyscalls[runtime.GOARCH]["memfd_create"], uintptr(unsafe.Pointer(&[]byte("xct\x00")[0])), 0, 0) //nolint:gosec // a NUL-terminated name the kernel reads during the call
			if errno != 0 {
				fmt.Println("memfd_create failed:", errno)
				return 1
			}
			if _, err := syscall.Write(int(fd), chunk); err != nil {
				fmt.Println("write failed:", err)
				return 1
			}
		}
		fmt.Println("held", n)
		return 0
	case "read":
		b, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Println("read failed:", err)
			return 1
		}
		fmt.Print(string(b))
		return 0
	}
	return 2
}

// probeSyscalls are system call numbers the probe tries.
var probeSyscalls = map[string]map[string]uintptr{
	"amd64": {"ptrace": 101, "keyctl": 250, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "perf_event_open": 298, "memfd_create": 319},
	"arm64": {"ptrace": 117, "keyctl": 219, "bpf": 280, "userfaultfd": 282, "io_uring_setup": 425, "perf_event_open": 241, "memfd_create": 279},
}

// TestSandboxSeccomp: inside the sandbox the kernel's riskier doors answer
// EPERM (outside, the same calls fail otherwise or succeed), and no
// nested user namespace can be made.
func TestSandboxSeccomp(t *testing.T) {
	requireSandbox(t)
	if probeSyscalls[runtime.GOARCH] == nil {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	sb := newSandbox(t)
	s := permissiveShell(t, sb, 10*time.Second, `  sandbox: {max_memory_bytes: -1}`)
	for _, name := range []string{"keyctl", "bpf", "userfaultfd", "io_uring_setup", "perf_event_open", "ptrace"} {
		res := resultAs[ShellResult](t, shell(t, s, "probe", sandboxProbeArg, "syscall", name))
		if res.Stdout != fmt.Sprintf("%s %d\n", name, int(syscall.EPERM)) {
			t.Errorf("%s in the sandbox: %+v", name, res)
		}
		if name == "ptrace" {
			continue // not on the test process itself
		}
		// The control: the same call, here, fails differently.
		nr := probeSyscalls[runtime.GOARCH][name]
		if _, _, errno := syscall.Syscall6(nr, ^uintptr(0), 0, 0, 0, 0, 0); errno == syscall.EPERM {
			t.Errorf("%s gives EPERM outside the sandbox too: the test proves nothing", name)
		}
	}
	for _, argv := range [][]any{{"sh", "-c", "unshare -U true"}, {"sh", "-c", "unshare -r true"}} {
		if res := resultAs[ShellResult](t, shell(t, s, argv...)); res.ExitCode == 0 {
			t.Errorf("%v made a user namespace: %+v", argv, res)
		}
	}
}

// permissiveShell is a shell.exec configuration that allows what an
// allow-list should never allow (sh with any flag, the test binary as a
// network and file probe), so that only the sandbox stands in the way.
func permissiveShell(tb testing.TB, sb sandbox, timeout time.Duration, sandboxYAML string) *Service {
	tb.Helper()
	self, err := os.Executable()
	must(tb, err)
	text := fmt.Sprintf(`shell:
  timeout: %s
  binaries:
    - {name: sh, any_flags: true}
    - {name: git, any_flags: true}
    - {name: awk, any_flags: true}
    - {name: probe, path: %s, any_flags: true}
%s`, timeout, self, sandboxYAML)
	cfg, err := ParseToolsConfig("tools.yaml", []byte(text))
	must(tb, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(tb))
	must(tb, err)
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// TestSandboxConfinement runs what an allow-list would let through and
// shows the sandbox stopping it: no file outside the workspace is read or
// written, the host's network is unreachable, nothing outlives the step,
// and the rlimits hold.
func TestSandboxConfinement(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	sb.links(t)
	// No address space limit here: the probe is a Go test binary (with
	// the race detector, it reserves terabytes); "memory limit" below
	// has its own.
	s := permissiveShell(t, sb, 10*time.Second, `  sandbox: {max_file_bytes: 1048576, max_memory_bytes: -1}`)
	sh := func(script string) ShellResult {
		t.Helper()
		return resultAs[ShellResult](t, shell(t, s, "sh", "-c", script))
	}

	t.Run("files outside the workspace do not exist", func(t *testing.T) {
		for _, p := range []string{sb.outside, filepath.Join(sb.outdir, "f.txt"), "link-abs", "link-rel", "dirlink-abs/f.txt", "up/outside.txt", "/etc/passwd", "/etc/shadow", "/root", os.Getenv("HOME")} {
			res := resultAs[ShellResult](t, shell(t, s, "probe", sandboxProbeArg, "read", p))
			if res.ExitCode != 1 || !strings.HasPrefix(res.Stdout, "read failed") || strings.Contains(res.Stdout, secret) {
				t.Errorf("read %s from the sandbox: %+v", p, res)
			}
		}
	})
	t.Run("nothing outside the workspace is writable", func(t *testing.T) {
		res := sh(fmt.Sprintf("echo x > %s; echo y > %s/new; touch /usr/pwned /etc/pwned /pwned; rm -f %s; rm -rf %s", sb.outside, sb.outdir, sb.outside, sb.outdir))
		if !strings.Contains(res.Stderr, "Read-only file system") {
			t.Fatalf("writes outside: %+v", res)
		}
		sb.untouched(t)
		for _, p := range []string{"/usr/pwned", "/etc/pwned", "/pwned"} {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("%s created", p)
			}
		}
		// The workspace itself is writable.
		if res := sh("echo in > inside.txt && cat inside.txt"); res.Stdout != "in\n" {
			t.Fatalf("workspace write: %+v", res)
		}
	})
	t.Run("no network", func(t *testing.T) {
		ln := listenClosing(t)
		// The same probe connects from the host, not from the sandbox.
		if sandboxProbe([]string{"dial", ln.Addr().String()}) != 0 {
			t.Fatal("the probe cannot connect from the host")
		}
		res := resultAs[ShellResult](t, shell(t, s, "probe", sandboxProbeArg, "dial", ln.Addr().String()))
		if res.ExitCode == 0 || !strings.Contains(res.Stdout, "dial failed") {
			t.Fatalf("the sandbox reached the host's loopback: %+v", res)
		}
	})
	t.Run("no capability, not root", func(t *testing.T) {
		res := sh("id -u; grep CapEff /proc/self/status")
		if !strings.HasPrefix(res.Stdout, "1000\n") || !strings.Contains(res.Stdout, "CapEff:\t0000000000000000") {
			t.Fatalf("identity: %+v", res)
		}
	})
	t.Run("a setsid daemon does not outlive the step", func(t *testing.T) {
		res := sh("setsid sleep 987651 >/dev/null 2>&1 & echo started")
		if res.Stdout != "started\n" {
			t.Fatalf("%+v", res)
		}
		noProcess(t, "sleep 987651")
	})
	t.Run("file size limit", func(t *testing.T) {
		sh("head -c 3000000 /dev/zero > big")
		fi, err := os.Stat(filepath.Join(sb.ws, "big"))
		must(t, err)
		if fi.Size() > 1<<20 {
			t.Fatalf("wrote %d bytes past the 1 MiB limit", fi.Size())
		}
	})
	t.Run("tmp size limit", func(t *testing.T) {
		// Files in /tmp are memory: bounded as a whole, not per file.
		// Session 14 (attack14): bwrap's /dev and its root are tmpfs
		// too, half the host's memory each, and on main a program wrote
		// files there and in /dev/shm, each up to RLIMIT_FSIZE, as many
		// as it liked (an MCP server's read-only instance keeps them
		// between calls). Now /dev/shm is sized as /tmp is, and /dev and
		// the root are read-only.
		s := permissiveShell(t, sb, 10*time.Second, `  sandbox: {max_tmp_bytes: 1048576, max_memory_bytes: -1}`)
		for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
			res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", fmt.Sprintf("head -c 700000 /dev/zero > %[1]s/a && head -c 700000 /dev/zero > %[1]s/b && echo wrote", dir)))
			if strings.Contains(res.Stdout, "wrote") || !strings.Contains(res.Stderr, "No space left on device") {
				t.Errorf("1.4 MB in %s under a 1 MiB tmpfs: %+v", dir, res)
			}
		}
		res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo x > /dev/shm/small && head -c 4 /dev/urandom > /dev/null && echo ok; head -c 700000 /dev/zero > /dev/a && echo wrote"))
		if res.Stdout != "ok\n" || !strings.Contains(res.Stderr, "Read-only file system") {
			t.Errorf("/dev: %+v", res)
		}
		// Memory files (memfd_create) are shared memory no tmpfs size
		// bounds: on main a program held 16 MiB of them under a 1 MiB
		// max_tmp_bytes (as many as RLIMIT_NOFILE, each up to
		// RLIMIT_FSIZE). Now memfd_create is refused as a kernel
		// without it refuses it (ENOSYS): callers fall back to
		// /dev/shm, which is sized.
		res = resultAs[ShellResult](t, shell(t, s, "probe", sandboxProbeArg, "memfd", "16777216"))
		if res.Stdout != fmt.Sprintf("memfd_create failed: %v\n", syscall.ENOSYS) {
			t.Errorf("memory files past max_tmp_bytes: %+v", res)
		}
		// So was the sandbox's root, where bwrap makes the workspace's
		// parent directories (outside /tmp): now read-only once the
		// mounts are made.
		res = resultAs[ShellResult](t, shell(t, s, "sh", "-c", "head -c 700000 /dev/zero > /xct-a && echo wrote"))
		if strings.Contains(res.Stdout, "wrote") || !strings.Contains(res.Stderr, "Read-only file system") {
			t.Errorf("a file in /: %+v", res)
		}
	})
	t.Run("memory limit", func(t *testing.T) {
		s := permissiveShell(t, sb, 10*time.Second, `  sandbox: {max_memory_bytes: 268435456}`)
		if res := resultAs[ShellResult](t, shell(t, s, "awk", `BEGIN { s = "x"; while (length(s) < 4194304) s = s s; print length(s) }`)); res.Stdout != "4194304\n" {
			t.Fatalf("4 MB under a 256 MiB limit: %+v", res)
		}
		res := resultAs[ShellResult](t, shell(t, s, "awk", `BEGIN { s = "x"; while (length(s) < 536870912) s = s s; print length(s) }`))
		if res.ExitCode == 0 || strings.Contains(res.Stdout, "536870912") {
			t.Fatalf("allocated 400 MB under a 256 MiB limit: %+v", res)
		}
		// With a working directory the program starts through the
		// executor's check (internal/sandboxenter), which sets the limit
		// itself: the Go runtime could not start under it.
		must(t, os.MkdirAll(filepath.Join(sb.ws, "memsub"), 0o755))
		inSub := func(script string) ShellResult {
			return resultAs[ShellResult](t, exec(t, s, "shell.exec", map[string]any{"argv": []any{"awk", script}, "cwd": "memsub"}))
		}
		if res := inSub(`BEGIN { s = "x"; while (length(s) < 4194304) s = s s; print length(s) }`); res.Stdout != "4194304\n" {
			t.Fatalf("4 MB under a 256 MiB limit, in a working directory: %+v", res)
		}
		if res := inSub(`BEGIN { s = "x"; while (length(s) < 536870912) s = s s; print length(s) }`); res.ExitCode == 0 || strings.Contains(res.Stdout, "536870912") {
			t.Fatalf("allocated 400 MB under a 256 MiB limit, in a working directory: %+v", res)
		}
	})
}

// noProcess waits until no host process has marker in its command line.
func noProcess(tb testing.TB, marker string) {
	tb.Helper()
	testutil.Eventually(tb, 30*time.Second, func() error {
		des, _ := os.ReadDir("/proc")
		for _, de := range des {
			cmdline, err := os.ReadFile("/proc/" + de.Name() + "/cmdline")
			if err == nil && strings.Contains(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})), marker) && alive(atoi(de.Name())) {
				return fmt.Errorf("process %s (%q) is alive", de.Name(), marker)
			}
		}
		return nil
	})
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestSandboxDeadline: at the deadline the sandbox is killed with its
// whole PID namespace, a setsid'd grandchild included.
func TestSandboxDeadline(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	s := permissiveShell(t, sb, time.Second, "")
	r := shell(t, s, "sh", "-c", "setsid sleep 987652 >/dev/null 2>&1 & (sleep 987653 &) ; sleep 987654")
	if codeOf(r) != string(wire.CodeTimeout) {
		t.Fatalf("%v", r)
	}
	for _, m := range []string{"sleep 987652", "sleep 987653", "sleep 987654"} {
		noProcess(t, m)
	}
}

// TestSandboxProtectedPathsReadOnly: a malicious .git/config already in
// the workspace (an alias and core.fsmonitor that run commands) runs, if
// at all, inside the sandbox: it reaches nothing outside the workspace,
// and .git itself is read-only there, so git config cannot be rewritten
// through shell.exec either.
func TestSandboxProtectedPathsReadOnly(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, ".git"), 0o755))
	s := permissiveShell(t, sb, 10*time.Second, "")
	if res := resultAs[ShellResult](t, shell(t, s, "git", "init", "-q", ".")); res.ExitCode == 0 {
		t.Fatalf("git init wrote into the read-only .git: %+v", res)
	}
	// A repository made on the host, then the attack's config.
	gitInit(t, sb.ws)
	payload := fmt.Sprintf("cat %s > stolen.txt; echo pwned > %s; echo pwned > %s/new.txt", sb.outside, sb.outside, sb.outdir)
	cfg := fmt.Sprintf("[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"%s\"\n[alias]\n\tst = \"!%s\"\n", payload, payload)
	must(t, os.WriteFile(filepath.Join(sb.ws, ".git", "config"), []byte(cfg), 0o644))

	for _, argv := range [][]any{{"git", "st"}, {"git", "status"}} {
		r := shell(t, s, argv...)
		if codeOf(r) != "" {
			t.Fatalf("%v: %v", argv, r.GetError())
		}
		sb.untouched(t)
		if b, err := os.ReadFile(filepath.Join(sb.ws, "stolen.txt")); err == nil && strings.Contains(string(b), secret) {
			t.Fatalf("%v read the file outside the workspace", argv)
		}
	}
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo '[alias] x = !id' >> .git/config; rm -rf .git/hooks; touch .git/pwned; mv .git moved"))
	if res.ExitCode == 0 {
		t.Fatalf(".git is writable in the sandbox: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(sb.ws, ".git", "config")); string(b) != cfg {
		t.Fatalf(".git/config changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(sb.ws, ".git", "pwned")); err == nil {
		t.Fatal(".git/pwned created")
	}
	if _, err := os.Stat(filepath.Join(sb.ws, "moved")); err == nil {
		t.Fatal(".git was moved away")
	}
}

func gitInit(tb testing.TB, dir string) {
	tb.Helper()
	must(tb, os.MkdirAll(filepath.Join(dir, ".git", "objects"), 0o755))
	must(tb, os.MkdirAll(filepath.Join(dir, ".git", "refs", "heads"), 0o755))
	must(tb, os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
}

// TestSandboxFailsClosed: without bubblewrap, shell.exec is served but
// every call is refused, saying why, and nothing runs.
func TestSandboxFailsClosed(t *testing.T) {
	sb := newSandbox(t)
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  binaries:\n    - {name: sh, any_flags: true}\n"))
	must(t, err)
	t.Setenv("PATH", t.TempDir()) // no bwrap, no prlimit
	var logs testutil.Buffer
	s, err := New(Config{Workspace: sb.ws, Tools: cfg}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	r := shell(t, s, "sh", "-c", "touch ran")
	e := r.GetError()
	if e.GetCode() != string(wire.CodeToolFailure) || !strings.Contains(e.GetMessage(), "sandbox") || !strings.Contains(e.GetMessage(), "nothing was run") {
		t.Fatalf("got %v", r)
	}
	if e.GetDetails().AsMap()["outcome_unknown"] != false {
		t.Fatalf("a refused call must be definite: %v", e.GetDetails())
	}
	if _, err := os.Stat(filepath.Join(sb.ws, "ran")); err == nil {
		t.Fatal("the program ran")
	}
	if !strings.Contains(logs.String(), "shell.exec is refused until its sandbox can be set up") {
		t.Fatalf("not logged at startup:\n%s", logs.String())
	}
}

// TestSandboxNoneIsLoud: "sandbox: none" is logged at startup and on
// every call.
func TestSandboxNoneIsLoud(t *testing.T) {
	sb := newSandbox(t)
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: echo}\n"))
	must(t, err)
	var logs testutil.Buffer
	s, err := New(Config{Workspace: sb.ws, Tools: cfg}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if n := strings.Count(logs.String(), "WITHOUT a sandbox"); n != 1 {
		t.Fatalf("startup: %d warnings:\n%s", n, logs.String())
	}
	for range 2 {
		resultAs[ShellResult](t, shell(t, s, "echo", "x"))
	}
	if n := strings.Count(logs.String(), "WITHOUT a sandbox"); n != 3 {
		t.Fatalf("after two calls: %d warnings:\n%s", n, logs.String())
	}
}

func TestSandboxConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"shell:\n  sandbox: chroot\n  binaries: [{name: echo}]\n", `sandbox "chroot"`},
		{"shell:\n  sandbox: {mode: none, network: true}\n  binaries: [{name: echo}]\n", "sandbox none takes no other setting"},
		{"shell:\n  sandbox: {read_only: [relative]}\n  binaries: [{name: echo}]\n", "clean absolute path"},
		{"shell:\n  sandbox: {max_processes: -2}\n  binaries: [{name: echo}]\n", "must not be negative"},
		{"mcp:\n  - {name: x, url: \"http://127.0.0.1:1/\", sandbox: none}\n", "applies to a command"},
		{"fs:\n  protected_paths: [a/b]\n", "must be a file name"},
		{"shell:\n  binaries: [{name: git, subcommands: [-c]}]\n", "is not a subcommand"},
	} {
		_, err := ParseToolsConfig("tools.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}

// BenchmarkShellSandbox is what the sandbox costs a program: true, run
// with and without it.
func BenchmarkShellSandbox(b *testing.B) {
	for _, mode := range []string{"bwrap", "none", "bwrap-4k-files", "bwrap-60k-files", "bwrap-git", "bwrap-network"} {
		b.Run(mode, func(b *testing.B) {
			if mode != "none" {
				requireSandbox(b)
			}
			sb := newSandbox(b)
			// The closure runs more than once (b.N grows): mode stays the
			// sub-benchmark's name (before session 11 it was set to
			// "bwrap" here, so the runs after the first had no files).
			sandbox := mode
			if n := map[string]int{"bwrap-4k-files": 64, "bwrap-60k-files": 245}[mode]; n > 0 {
				// A workspace the protected-path scan reads whole before
				// and after the program: n*n files in n directories.
				for d := range n {
					dir := filepath.Join(sb.ws, fmt.Sprintf("d%03d", d), "sub")
					must(b, os.MkdirAll(dir, 0o755))
					for f := range n {
						must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), nil, 0o644))
					}
				}
				sandbox = "bwrap"
			}
			if mode == "bwrap-git" {
				// A protected entry to mount (the usual workspace): the
				// program starts through the check of its mount (session
				// 13, attack13).
				must(b, os.Mkdir(filepath.Join(sb.ws, ".git"), 0o755))
				sandbox = "bwrap"
			}
			if mode == "bwrap-network" {
				// The host's network: the program starts through the
				// Landlock scope of abstract Unix sockets where the
				// kernel has it (session 15, attack15a).
				sandbox = "{network: true}"
			}
			cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: "+sandbox+"\n  binaries: [{name: \"true\"}]\n"))
			must(b, err)
			s, err := New(Config{Workspace: sb.ws, Tools: cfg}, nil, nil)
			must(b, err)
			b.Cleanup(func() { _ = s.Stop(context.Background()) })
			b.ResetTimer()
			for range b.N {
				if r := run(b, s, "shell.exec", map[string]any{"argv": []any{"true"}}); codeOf(r) != "" {
					b.Fatal(r)
				}
			}
		})
	}
}

// TestSandboxPlantedProtectedLink: a program plants ".git -> /" (and
// ".npmrc" -> an outside file) in the workspace; the next call's sandbox
// mounts protected paths through descriptors opened without following
// links, so the host's root never appears under the workspace.
func TestSandboxPlantedProtectedLink(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	s := permissiveShell(t, sb, 10*time.Second, "")
	if res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "ln -s / .git && ln -s "+sb.outside+" .npmrc && echo planted")); res.Stdout != "planted\n" ||
		len(res.ProtectedMoved) != 2 {
		t.Fatalf("%+v", res)
	}
	// A program made them, so they were moved aside (session 10,
	// trust10a); planted so where the scan meets them:
	must(t, os.Symlink("/", filepath.Join(sb.ws, ".git")))
	must(t, os.Symlink(sb.outside, filepath.Join(sb.ws, ".npmrc")))
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "cat .git"+sb.outside+"; cat .npmrc"))
	if strings.Contains(res.Stdout, secret) || !strings.Contains(res.Stderr, "No such file") {
		t.Fatalf("the host's files appeared in the sandbox: %+v", res)
	}
	// A real protected file is mounted read-only, a directory too.
	must(t, os.Remove(filepath.Join(sb.ws, ".git")))
	must(t, os.Remove(filepath.Join(sb.ws, ".npmrc")))
	must(t, os.Mkdir(filepath.Join(sb.ws, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(sb.ws, ".npmrc"), []byte("registry=x\n"), 0o644))
	res = resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo evil >> .npmrc; touch .git/x; cat .npmrc"))
	if res.Stdout != "registry=x\n" || strings.Count(res.Stderr, "Read-only file system") != 2 {
		t.Fatalf("%+v", res)
	}
}

// TestSandboxSetupFailsAtRunTime: a sandbox that cannot be set up when a
// call is made (here the workspace moved away under the executor) is a
// definite failure, "nothing was run", not a program's exit status.
func TestSandboxSetupFailsAtRunTime(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	s := permissiveShell(t, sb, 10*time.Second, "")
	// The executor holds the workspace open; bwrap mounts it by its path,
	// which is gone.
	must(t, os.Rename(sb.ws, sb.ws+".moved"))
	e := shell(t, s, "sh", "-c", "touch ran").GetError()
	if e.GetCode() != string(wire.CodeToolFailure) || !strings.Contains(e.GetMessage(), "could not be set up; nothing was run") ||
		e.GetDetails().AsMap()["outcome_unknown"] != false {
		t.Fatalf("got %v", e)
	}
	if _, err := os.Stat(filepath.Join(sb.ws+".moved", "ran")); err == nil {
		t.Fatal("the program ran")
	}
}

// TestSandboxNoInheritedDescriptor: a descriptor the executor inherited
// without close-on-exec (here opened so on purpose, to a file outside the
// workspace) does not reach the sandboxed program.
func TestSandboxNoInheritedDescriptor(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	fd, err := syscall.Open(sb.outside, syscall.O_RDONLY, 0) // no O_CLOEXEC
	must(t, err)
	defer func() { _ = syscall.Close(fd) }()
	s := permissiveShell(t, sb, 10*time.Second, "")
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", fmt.Sprintf("cat /proc/self/fd/%d; cat <&%d", fd, fd)))
	if strings.Contains(res.Stdout, secret) || res.ExitCode == 0 {
		t.Fatalf("the inherited descriptor reached the sandbox: %+v", res)
	}
}

// TestSandboxNestedProtectedReadOnly: a repository in a subdirectory (and
// a tool config file there) is read-only for programs too, at any depth
// (session 11, trust11a: the scan stopped 3 directories down, and a
// program wrote a/b/c/d/e/.git/deep).
func TestSandboxNestedProtectedReadOnly(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	for _, d := range []string{"a/.git", "a/b/c/.git", "a/b/c/d/e/.git"} {
		must(t, os.MkdirAll(filepath.Join(sb.ws, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(sb.ws, "a", ".npmrc"), []byte("x\n"), 0o644))
	s := permissiveShell(t, sb, 10*time.Second, "")
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "touch a/.git/x a/b/c/.git/x a/.npmrc 2>&1; mv a/.git a/moved 2>&1; touch a/b/c/d/e/.git/deep"))
	if n := strings.Count(res.Stdout, "Read-only file system"); n != 3 {
		t.Fatalf("%d read-only refusals: %+v", n, res)
	}
	if !strings.Contains(res.Stderr, "Read-only file system") {
		t.Fatalf("the deep touch: %+v", res)
	}
	for _, p := range []string{"a/.git/x", "a/b/c/.git/x", "a/moved", "a/b/c/d/e/.git/deep"} {
		if _, err := os.Stat(filepath.Join(sb.ws, p)); err == nil {
			t.Fatalf("%s created", p)
		}
	}
}

// TestSandboxReadProgramSeesReadOnlyWorkspace: a program whose effect
// class is read reads the workspace and cannot change it, whatever it is
// made to run (a model-written config it reads from its working
// directory); its private /tmp stays writable. A program of another class
// writes as before.
func TestSandboxReadProgramSeesReadOnlyWorkspace(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	must(t, os.WriteFile(filepath.Join(sb.ws, "keep.txt"), []byte("keep\n"), 0o644))
	cfg, err := ParseToolsConfig("tools.yaml", []byte(`shell:
  binaries:
    - {name: sh, effect: read, any_flags: true}
    - {name: shw, path: /bin/sh, effect: reversible, any_flags: true}
`))
	must(t, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "cat keep.txt; echo x > /tmp/t && cat /tmp/t; echo y > new.txt; rm -f keep.txt; mkdir d; ln -s /etc l"))
	if res.Stdout != "keep\nx\n" || !strings.Contains(res.Stderr, "Read-only file system") {
		t.Fatalf("read program: %+v", res)
	}
	if got := names(t, sb.ws); fmt.Sprint(got) != "[keep.txt]" {
		t.Fatalf("a read program changed the workspace: %v", got)
	}
	res = resultAs[ShellResult](t, shell(t, s, "shw", "-c", "echo y > new.txt && cat new.txt"))
	if res.Stdout != "y\n" {
		t.Fatalf("reversible program: %+v", res)
	}
}

// TestSandboxReadProgramLeavesWritableDirsAlone (session 15, attack15a):
// a sandbox's writable: directories outlive the step and the run, and a
// program trusts what it finds there later (a build cache, a tool's
// state). A read program, whatever the model's files made it run (a
// configuration it honors from the workspace: attack14's python -c
// "import tool"), wrote there on main: poison left by a step the default
// policy runs with no human, outside the workspace (no record, no undo).
// Now a read program gets them read-only, and reads them; so does a
// reversible one (also run with no human, and no undo covers what it
// leaves outside the workspace: it wrote there on main too); an
// irreversible program (a human approves each call under the default
// policy) writes there as before.
func TestSandboxReadProgramLeavesWritableDirsAlone(t *testing.T) {
	requireSandbox(t)
	sb := newSandbox(t)
	cache := t.TempDir()
	must(t, os.WriteFile(filepath.Join(cache, "entry"), []byte("good\n"), 0o644))
	cfg, err := ParseToolsConfig("tools.yaml", []byte(fmt.Sprintf(`shell:
  binaries:
    - {name: sh, effect: read, any_flags: true}
    - {name: shw, path: /bin/sh, effect: reversible, any_flags: true}
    - {name: shx, path: /bin/sh, effect: irreversible, any_flags: true}
  sandbox: {writable: [%s]}
`, cache)))
	must(t, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "cat "+cache+"/entry; echo poison > "+cache+"/entry; echo poison > "+cache+"/new"))
	if res.Stdout != "good\n" || !strings.Contains(res.Stderr, "Read-only file system") {
		t.Fatalf("read program: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(cache, "entry")); string(b) != "good\n" {
		t.Fatalf("a read program changed its writable directory: entry is %q", b)
	}
	if got := names(t, cache); fmt.Sprint(got) != "[entry]" {
		t.Fatalf("a read program wrote in its writable directory: %v", got)
	}
	res = resultAs[ShellResult](t, shell(t, s, "shw", "-c", "echo ws > ws.txt; cat "+cache+"/entry; echo poison > "+cache+"/entry"))
	if res.Stdout != "good\n" || !strings.Contains(res.Stderr, "Read-only file system") {
		t.Fatalf("reversible program: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(sb.ws, "ws.txt")); string(b) != "ws\n" {
		t.Fatalf("the reversible program did not write the workspace: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cache, "entry")); string(b) != "good\n" {
		t.Fatalf("a reversible program changed its writable directory: entry is %q", b)
	}
	res = resultAs[ShellResult](t, shell(t, s, "shx", "-c", "echo new > "+cache+"/entry && cat "+cache+"/entry"))
	if res.Stdout != "new\n" {
		t.Fatalf("irreversible program: %+v", res)
	}
}

// Names of the multi-call program the test binary plays (multicall), as
// busybox does: started as multicallLs it lists; started by its own file
// name it runs the program its first argument names.
const (
	multicallLs    = "xct-applet-ls"
	multicallShell = "xct-applet-sh"
)

func multicall(args []string) (int, bool) {
	switch {
	case filepath.Base(args[0]) == multicallLs:
		fmt.Println("the ls applet ran")
		return 0, true
	case len(args) > 1 && args[1] == multicallShell:
		fmt.Println("the shell applet ran")
		return 0, true
	}
	return 0, false
}

// TestSandboxProgramStartedByItsName (session 11, trust11a): the sandbox
// started a program by the file it resolved to (links followed when the
// configuration is loaded), so a multi-call program saw another argv[0]
// than its configured name: busybox, given its own name, takes the first
// argument for the program to run. With ls configured as a link to such a
// program and a file named like a shell in the workspace (fs.write made
// it), "ls <that file>" ran the shell on main. Now the program is started
// through a link named as configured (its argv[0]), as without a sandbox.
func TestSandboxProgramStartedByItsName(t *testing.T) {
	self, err := os.Executable()
	must(t, err)
	link := filepath.Join(t.TempDir(), multicallLs)
	must(t, os.Symlink(self, link))
	for _, sandbox := range []string{"{max_memory_bytes: -1}", "none"} {
		t.Run(sandbox, func(t *testing.T) {
			if sandbox != "none" {
				requireSandbox(t)
			}
			sb := newSandbox(t)
			must(t, os.WriteFile(filepath.Join(sb.ws, multicallShell), []byte("x\n"), 0o644))
			cfg, err := ParseToolsConfig("tools.yaml", []byte(fmt.Sprintf(
				"shell:\n  sandbox: %s\n  binaries:\n    - {name: %s, path: %s, effect: read, path_args: true, max_args: 1}\n", sandbox, multicallLs, link)))
			must(t, err)
			s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
			must(t, err)
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			res := resultAs[ShellResult](t, shell(t, s, multicallLs, multicallShell))
			if res.Stdout != "the ls applet ran\n" {
				t.Fatalf("ls %s: %+v", multicallShell, res)
			}
		})
	}
}

// TestSandboxScriptStartedByItsPath: a configured script (here under
// another name than its file's) is started by its file's path, so it
// finds what lies beside it by $0, as before session 11.
func TestSandboxScriptStartedByItsPath(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\ncat \"$(dirname \"$0\")/data.txt\"\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "data.txt"), []byte("beside\n"), 0o644))
	must(t, os.Symlink(filepath.Join(dir, "tool.sh"), filepath.Join(dir, "tool")))
	sb := newSandbox(t)
	cfg, err := ParseToolsConfig("tools.yaml", []byte(fmt.Sprintf("shell:\n  sandbox: {read_only: [%s]}\n  binaries:\n    - {name: tool, path: %s, effect: read}\n", dir, filepath.Join(dir, "tool"))))
	must(t, err)
	s, err := New(Config{Workspace: sb.ws, Tools: cfg, MaxOutputBytes: 1 << 20}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if res := resultAs[ShellResult](t, shell(t, s, "tool")); res.Stdout != "beside\n" {
		t.Fatalf("the script: %+v", res)
	}
}

// listenClosing listens on a free loopback port and closes every
// connection it accepts (a server a sandboxed program may or may not
// reach) until the test ends.
func listenClosing(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln
}
