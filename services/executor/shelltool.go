package executor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/sandboxenter"
	"github.com/xct-dev/xct/internal/wire"
)

// Defaults of shell.exec.
const (
	shellDefaultMaxOutput = 64 << 10
	shellDefaultMaxStdin  = 1 << 20
	shellDefaultMaxArgs   = 64
	shellMaxArgBytes      = 8 << 10
	// shellWaitDelay bounds the wait for the output pipes after the
	// process group was killed (only a process that left the group can
	// keep them open).
	shellWaitDelay = 2 * time.Second
)

// ShellResult is the result of shell.exec.
type ShellResult struct {
	// ExitCode is the program's exit status; -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the program, if one did.
	Signal string `json:"signal,omitempty"`
	// Stdout and Stderr are what the program wrote, up to the cap: the
	// text itself when valid UTF-8, otherwise base64 (see the encodings).
	Stdout          string `json:"stdout"`
	StdoutEncoding  string `json:"stdout_encoding"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	Stderr          string `json:"stderr"`
	StderrEncoding  string `json:"stderr_encoding"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// ProtectedMoved are protected paths at the top of the workspace that
	// appeared while the program ran (they were not there before): no
	// tool may make one (a .git, .husky or .pre-commit-config.yaml would
	// run code for whoever uses the workspace next), so the executor
	// renamed each aside, to the name given, where nothing reads it.
	ProtectedMoved map[string]string `json:"protected_moved,omitempty"`
	// ProtectedUnchecked says why the workspace could not be scanned
	// whole for protected paths after the program ran (it made more
	// entries, or deeper, than a scan can read): one it made may remain.
	// Logged as a security error; the next program that may write is
	// refused until the workspace is scannable again.
	ProtectedUnchecked string `json:"protected_unchecked,omitempty"`
}

// shellTool is the shell.exec tool. It runs only allow-listed programs,
// by their absolute path, with the arguments as an argv array (never
// through a shell), in a directory of the workspace, with a scrubbed
// environment, in its own process group that is killed entirely at the
// deadline and when the program exits.
//
// Every program runs inside an OS sandbox (bubblewrap, see sandbox.go):
// only the workspace is writable, the system's directories read-only, no
// network unless configured, its own PID namespace, rlimits. If the
// sandbox cannot be set up, every call is refused. Only "sandbox: none"
// in the configuration runs programs unconfined, logged on every call.
// The allow-lists below stay as a second line.
type shellTool struct {
	ws        *workspace
	sb        *osSandbox // nil: sandbox none
	log       *slog.Logger
	wsDir     string
	procFD    bool // chdir through /proc/self/fd: no race with the workspace
	bins      map[string]*BinaryConfig
	names     []string
	env       []string
	timeout   time.Duration
	maxOut    int64
	maxStdin  int64
	maxResult int64
}

func newShellTool(cfg *ShellConfig, ws *workspace, wsDir string, defTimeout time.Duration, log *slog.Logger) *shellTool {
	t := &shellTool{ws: ws, wsDir: wsDir, log: log, bins: map[string]*BinaryConfig{}, timeout: cfg.Timeout, maxOut: cfg.MaxOutputBytes, maxStdin: cfg.MaxStdinBytes}
	if cfg.Sandbox.disabled() {
		log.Error("SECURITY: shell.exec runs programs WITHOUT a sandbox (sandbox: none in the tools configuration): " +
			"an allowed program can read and change everything the executor's user can, and reach the network")
	} else {
		t.sb = newOSSandbox(cfg.Sandbox, wsDir, sandboxDefaultMemory)
		if t.sb.err != nil {
			log.Error("shell.exec is refused until its sandbox can be set up", "error", t.sb.err)
		} else if !t.sb.tmpSized {
			log.Warn("this bubblewrap cannot size a tmpfs (--size needs 0.7 or later): the sandbox's /tmp is not bounded by max_tmp_bytes")
		}
		t.sb.logScope(log, "shell.exec's sandbox")
	}
	if _, err := os.Stat("/proc/self/fd"); err == nil {
		t.procFD = true
	}
	for i := range cfg.Binaries {
		b := &cfg.Binaries[i]
		t.bins[b.Name] = b
		t.names = append(t.names, b.Name)
	}
	slices.Sort(t.names)
	names := cfg.Env
	if names == nil {
		names = []string{"PATH"}
	}
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			if _, set := cfg.SetEnv[n]; !set {
				t.env = append(t.env, n+"="+v)
			}
		}
	}
	for k, v := range cfg.SetEnv {
		t.env = append(t.env, k+"="+v)
	}
	searchLists(t.env, wsDir)
	if t.sb != nil && !slices.ContainsFunc(t.env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		// The host's home is not in the sandbox; an empty, private one is.
		t.env = append(t.env, "HOME=/tmp")
	}
	t.env = withInterpreterDefaults(t.env)
	slices.Sort(t.env)
	if t.timeout == 0 {
		t.timeout = defTimeout
	}
	if t.maxOut == 0 {
		t.maxOut = shellDefaultMaxOutput
	}
	if t.maxStdin == 0 {
		t.maxStdin = shellDefaultMaxStdin
	}
	// Two capped streams, possibly base64, and the rest of the result.
	t.maxResult = 2*(t.maxOut*4/3+16) + 4096
	return t
}

func (t *shellTool) Descriptor() *xctv1.ToolDescriptor {
	names, _ := json.Marshal(t.names)
	schema := `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "argv": {"type": "array", "minItems": 1, "maxItems": 257, "prefixItems": [{"enum": ` + string(names) + `}],
             "items": {"type": "string", "maxLength": 8192},
             "description": "The program (one of the allowed names) and its arguments, passed as they are: no shell, no expansion."},
    "cwd": {"type": "string", "minLength": 1, "maxLength": 4096, "default": ".", "description": "Working directory, relative to the workspace."},
    "stdin": {"type": "string", "description": "Text given on standard input."}
  },
  "required": ["argv"],
  "additionalProperties": false
}`
	effect, idem := xctv1.Effect_EFFECT_READ, true
	for _, b := range t.bins {
		e, i := b.Effect.proto(xctv1.Effect_EFFECT_IRREVERSIBLE), b.Idempotent
		if e > effect {
			effect = e
		}
		idem = idem && i
	}
	return &xctv1.ToolDescriptor{
		Name: "shell.exec",
		Description: "Run one allowed program (" + strings.Join(t.names, ", ") + ") with arguments, in a directory of the workspace, " +
			"without a shell. Returns exit_code, signal, stdout and stderr (each with its encoding and whether it was truncated).",
		InputSchema:    schema,
		Effect:         effect, // the worst of the programs'; each call is recorded with its own
		Idempotent:     idem,
		Timeout:        durationpb.New(t.timeout),
		MaxOutputBytes: t.maxResult,
	}
}

// classify returns the effect class and idempotency of the call's program.
func (t *shellTool) classify(args map[string]any) (xctv1.Effect, bool) {
	if argv, ok := args["argv"].([]any); ok && len(argv) > 0 {
		if name, ok := argv[0].(string); ok {
			if b, ok := t.bins[name]; ok {
				return b.Effect.proto(xctv1.Effect_EFFECT_IRREVERSIBLE), b.Idempotent
			}
		}
	}
	return xctv1.Effect_EFFECT_IRREVERSIBLE, false
}

func (t *shellTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "argv", "cwd", "stdin"); e != nil {
		return nil, e
	}
	argv, e := t.argv(args["argv"])
	if e != nil {
		return nil, e
	}
	bin := t.bins[argv[0]]
	dot, empty := ".", ""
	cwd, e := stringArg(args, "cwd", &dot)
	if e != nil {
		return nil, e
	}
	stdin, e := stringArg(args, "stdin", &empty)
	if e != nil {
		return nil, e
	}
	if int64(len(stdin)) > t.maxStdin {
		return nil, argErr("stdin", "stdin is %d bytes, the limit is %d", len(stdin), t.maxStdin)
	}
	dirName, e := t.ws.clean(cwd)
	if e != nil {
		return nil, e
	}
	if e := t.ws.direct(cwd, dirName, true); e != nil {
		return nil, e
	}
	// Path operands are relative to the working directory.
	if e := t.checkArgs(bin, argv[1:], dirName); e != nil {
		return nil, e
	}
	if t.sb != nil && t.sb.err != nil {
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"shell.exec is refused: its sandbox cannot be set up on this executor (%v); nothing was run", t.sb.err),
			map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
	}
	if t.sb == nil {
		t.log.WarnContext(ctx, "SECURITY: shell.exec runs a program WITHOUT a sandbox (sandbox: none)", "program", argv[0])
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	// The directory is opened without following a symbolic link on the
	// way (a link swapped in after the check above makes the call fail),
	// and without a sandbox the program starts in that very directory
	// (/proc/self/fd/N). In the sandbox, bubblewrap changes to it by its
	// path (--chdir), and the program is started by the executor's own
	// binary only if that is this directory (internal/sandboxenter).
	dir, err := t.ws.open(dirName)
	if err != nil {
		return nil, t.ws.refuse(cwd, dirName, true, err)
	}
	defer func() { _ = dir.Close() }()
	if fi, err := dir.Stat(); err != nil || !fi.IsDir() {
		return nil, pathErr(wire.CodeInvalidArgument, cwd, "cwd %q is not a directory", cwd)
	}
	chdir := filepath.Join(t.wsDir, dirName)
	var cmd *osexec.Cmd
	var status *sandboxStatus
	var enter *enterReport
	// A program that may write could make a protected path that is not
	// there yet, or change one the scan did not find (the sandbox mounts
	// read-only those it finds): the whole workspace is scanned before
	// (a program is not run in one the scan cannot read whole) and after.
	var protectedBefore protectedSet
	if bin.Effect != EffectRead {
		if why := t.ws.retryUnmoved(ctx, t.log); why != "" {
			return nil, unmovedRefused(argv[0], why)
		}
	}
	if t.sb == nil && bin.Effect != EffectRead {
		var cut string
		if protectedBefore, cut = t.ws.protectedNames(t.ws.protected.scanBudget()); cut != "" {
			return nil, scanRefused(argv[0], cut, t.ws.protected.scanBudget())
		}
	}
	if t.sb != nil {
		// The sandbox's own root holds only the workspace: the directory
		// is named by its path there, and protected paths at the top of
		// the workspace are mounted read-only over it.
		var sbx *osSandbox
		if bin.Effect == EffectRead {
			// The verdict allowed a read: the program gets to read, the
			// whole workspace read-only (nothing to look for), and its
			// writable: directories: they outlive the step (and the
			// run), and another program trusts what is there later (a
			// cache, a tool's state), while a read leaves nothing.
			sbx, _, _ = t.sb.withProtected(nil, 4) // fd 3 is the status pipe
			sbx.readOnlyWorkspace, sbx.readOnlyWritable = true, true
		} else {
			var cut string
			sbx, protectedBefore, cut = t.sb.withProtected(t.ws.protected, 4)
			if cut != "" {
				sbx.closeExtra()
				return nil, scanRefused(argv[0], cut, t.ws.protected.scanBudget())
			}
			// A reversible program's effect is the workspace: what it
			// would leave in a writable: directory no undo covers, and
			// the default policy runs it with no human.
			sbx.readOnlyWritable = bin.Effect == EffectReversible
		}
		defer sbx.closeExtra()
		if dirName != "." || len(sbx.extra) > 0 || sbx.needsEnter() {
			// bubblewrap changes to the directory by its path: the
			// program starts through a check that it is the directory
			// opened above (internal/sandboxenter). The workspace itself
			// is not the model's to swap. It mounts the protected entries
			// by their paths too: the check also sees that each is the
			// entry found, read-only, where it was found (another
			// program renaming its directory meanwhile left the real one
			// writable: session 13, attack13). A sandbox with the host's
			// network starts through it for the Landlock scope of
			// abstract Unix sockets.
			var err error
			if sbx.enter, enter, err = newSandboxEnter(dir); err != nil {
				return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "the sandbox of %s could not be prepared: %v; nothing was run", argv[0], err),
					map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
			}
			defer func() { _ = enter.r.Close() }()
		}
		if sbx.err != nil {
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "the sandbox of %s could not be prepared: %v; nothing was run", argv[0], sbx.err),
				map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
		}
		sa := sbx.argv(bin.resolved, argv[0], argv[1:], chdir, t.env)
		cmd = osexec.CommandContext(ctx, sa[0], sa[1:]...) //nolint:gosec // prlimit and bwrap, resolved; the program allow-listed, argv checked above
		cmd.Env = []string{}
		cmd.Dir = "/"
		sr, sw, err := os.Pipe()
		if err != nil {
			return nil, wire.Errorf(wire.CodeToolFailure, "sandbox status pipe: %v", err)
		}
		defer func() { _ = sw.Close() }()
		cmd.ExtraFiles = append([]*os.File{sw}, sbx.extraFiles()...) // fd 3: bwrap's --json-status-fd
		status = readSandboxStatus(sr)
	} else {
		if t.procFD {
			chdir = fmt.Sprintf("/proc/self/fd/%d", dir.Fd())
		}
		cmd = osexec.CommandContext(ctx, bin.resolved) //nolint:gosec // an allow-listed program, resolved at load; argv checked above
		cmd.Args = argv
		cmd.Env = t.env
		if cmd.Env == nil {
			cmd.Env = []string{} // nil would mean the executor's environment
		}
		cmd.Dir = chdir
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin) // else /dev/null
	}
	// Its own process group, killed as a whole; and killed if the executor
	// dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	// Output goes through pipes the tool reads itself, so waiting for the
	// program does not wait for children that keep the pipes open.
	stdout, stderr := &cappedBuffer{limit: t.maxOut}, &cappedBuffer{limit: t.maxOut}
	pipes, e := startPipes(cmd, stdout, stderr)
	if e != nil {
		return nil, e
	}
	defer pipes.close()

	if e := Commit(ctx); e != nil {
		return nil, e
	}
	closeOnExecInherited()
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return nil, wire.Errorf(wire.CodeTimeout, "the step's deadline passed before %s started; nothing was run", argv[0])
		}
		return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "%s could not be started: %v", argv[0], err),
			map[string]any{"program": argv[0]})
	}
	pgid := cmd.Process.Pid
	pipes.started()
	for _, f := range cmd.ExtraFiles {
		_ = f.Close() // the child has them; the status pipe ends when bwrap does
	}
	err = cmd.Wait()
	// Children left behind in the group (a background job, a daemonized
	// grandchild) do not outlive the step.
	_ = killGroup(pgid)
	pipes.drain(shellWaitDelay)

	res := ShellResult{ExitCode: cmd.ProcessState.ExitCode()}
	if bin.Effect != EffectRead {
		var cut string
		res.ProtectedMoved, cut = t.ws.moveNewProtected(ctx, t.log, protectedBefore, "program "+argv[0])
		res.ProtectedUnchecked = cut
	}
	res.Stdout, res.StdoutEncoding, res.StdoutTruncated = stdout.text()
	res.Stderr, res.StderrEncoding, res.StderrTruncated = stderr.text()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal().String()
	}
	if enter != nil {
		switch rep := enter.wait(shellWaitDelay); {
		case strings.HasPrefix(rep, sandboxenter.Unprotected):
			return nil, wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"a protected entry was not where it was found when %s's sandbox was set up (%s: another program renamed it or its directory meanwhile); nothing was run", argv[0], head(strings.TrimPrefix(rep, sandboxenter.Unprotected+": "), 512)),
				map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
		case strings.HasPrefix(rep, sandboxenter.Moved):
			// Another writer put a link or another directory on the
			// path after the check: the program did not start.
			return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"cwd %q is no longer the directory that was checked (a symbolic link or another directory was put on its path meanwhile); nothing was run", cwd),
				map[string]any{"argument": "cwd", "path": cwd, "program": argv[0], "outcome_unknown": false})
		case rep != "":
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "%s could not be started in the sandbox (%s); nothing was run", argv[0], head(rep, 512)),
				map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
		}
	}
	if status != nil && ctx.Err() == nil {
		ran, code := status.wait(shellWaitDelay)
		if !ran {
			// bwrap reports an exit code only for a program it started:
			// the sandbox could not be set up, nothing ran.
			return nil, wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
				"the sandbox of %s could not be set up; nothing was run: %s", argv[0], head(strings.TrimSpace(res.Stderr), 1024)),
				map[string]any{"program": argv[0], "sandbox": SandboxBwrap, "outcome_unknown": false})
		}
		res.ExitCode = code
		// bwrap reports a program killed by a signal as 128+n, as shells do.
		if code > 128 && code < 128+65 {
			res.ExitCode, res.Signal = -1, syscall.Signal(code-128).String()
		}
	}
	if ctx.Err() != nil {
		// It ran until it was killed: what it did by then is unknown
		// (the executor makes that a plain error for a read-only or
		// idempotent call, a step in doubt for any other).
		return nil, wire.WithDetails(wire.Errorf(wire.CodeTimeout,
			"%s did not finish within %v; its process group was killed, and what it did before is unknown", argv[0], t.timeout),
			map[string]any{"program": argv[0], "timeout_ms": t.timeout.Milliseconds(), "pgid": pgid,
				"stdout": head(res.Stdout, 4096), "stderr": head(res.Stderr, 4096), "outcome_unknown": true})
	}
	var ee *osexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, wire.Errorf(wire.CodeToolFailure, "%s: %v", argv[0], err)
	}
	return res, nil
}

// searchListVars are the environment variables that list where a
// program, its loader or its interpreter looks for code: PATH, the
// dynamic loader's libraries, Python's, Node's, Perl's, Ruby's and Java's
// modules. An empty entry in most of them is the working directory.
var searchListVars = []string{"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_PATH", "PERL5LIB", "PERLLIB", "RUBYLIB", "GEM_PATH", "CLASSPATH"}

// searchLists rewrites in env ("K=V", in place) each of searchListVars
// through searchPath: a child process started in the workspace looks for
// code only outside it.
func searchLists(env []string, wsDir string) {
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(searchListVars, k) {
			env[i] = k + "=" + searchPath(v, wsDir)
		}
	}
}

// searchPath is a PATH for the programs shell.exec runs: only absolute
// directories outside the workspace. An empty entry or "." is the working
// directory, another relative entry or a workspace directory a place the
// model writes: a program's own lookups (git running ssh or a pager, make
// running cc) would run what the model put there.
func searchPath(path, wsDir string) string {
	var keep []string
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		if c := filepath.Clean(d); c == wsDir || strings.HasPrefix(c, wsDir+string(filepath.Separator)) {
			continue
		}
		keep = append(keep, d)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// argv checks the argv argument: allowed program, strings without NUL.
func (t *shellTool) argv(v any) ([]string, *xctv1.Error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, argErr("argv", "argv must be a non-empty array of strings")
	}
	argv := make([]string, len(list))
	for i, a := range list {
		s, ok := a.(string)
		if !ok {
			return nil, argErr("argv", "argv[%d] must be a string", i)
		}
		if strings.IndexByte(s, 0) >= 0 {
			return nil, argErr("argv", "argv[%d] contains a NUL byte", i)
		}
		if len(s) > shellMaxArgBytes {
			return nil, argErr("argv", "argv[%d] is %d bytes, the limit is %d", i, len(s), shellMaxArgBytes)
		}
		argv[i] = s
	}
	if _, ok := t.bins[argv[0]]; !ok {
		return nil, wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
			"program %q is not allowed: argv[0] must be one of %s", argv[0], strings.Join(t.names, ", ")),
			map[string]any{"argument": "argv", "program": argv[0], "allowed": toAny(t.names)})
	}
	return argv, nil
}

// checkArgs applies the program's argument rules: options only from its
// list (argument injection), operands inside the workspace if required.
func (t *shellTool) checkArgs(b *BinaryConfig, args []string, cwd string) *xctv1.Error {
	limit := b.MaxArgs
	if limit == 0 {
		limit = shellDefaultMaxArgs
	}
	if len(args) > limit {
		return argErr("argv", "%s takes at most %d arguments, got %d", b.Name, limit, len(args))
	}
	// Every argument that starts with "-" is an option to check, also
	// after "--": programs do not agree on what "--" ends ("find -- .
	// -exec" still runs -exec). A file named "-x" is "./-x".
	operands := 0
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			if !b.AnyFlags && !flagAllowed(b.AllowFlags, a) {
				return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
					"argument %q of %s is not allowed: options must be one of %v (every argument starting with \"-\" is an option, also after \"--\"; name a file \"./-x\")", a, b.Name, b.AllowFlags),
					map[string]any{"argument": "argv", "index": i + 1, "value": a})
			}
			continue
		}
		operands++
		if operands == 1 && len(b.Subcommands) > 0 {
			if !slices.Contains(b.Subcommands, a) {
				return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
					"subcommand %q of %s is not allowed: it must be one of %v", a, b.Name, b.Subcommands),
					map[string]any{"argument": "argv", "index": i + 1, "value": a})
			}
			continue
		}
		if b.PathArgs {
			if e := t.localPath(b, i, cwd, a); e != nil {
				return e
			}
		}
	}
	return nil
}

// localPath checks an operand of a path_args program: a relative path
// inside the workspace, written so and also after following the symbolic
// links on it from the working directory cwd (an in-workspace link to
// /etc is outside). As the fs tools take a path, it takes one only in
// clean form ("./" may begin it, to name a file "./-x"), and not through
// a symbolic link: a policy judged the operand as written, and the kernel
// reads "pub/../secret/key" or "pub/l/key" (l -> ../secret) as another
// path, "l/../x" (l -> /etc/ssl) as one outside the workspace. Nor a
// file with other hard links.
func (t *shellTool) localPath(b *BinaryConfig, i int, cwd, a string) *xctv1.Error {
	details := map[string]any{"argument": "argv", "index": i + 1, "value": a}
	outside := func() *xctv1.Error {
		return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
			"argument %q of %s must be a path inside the workspace", a, b.Name), details)
	}
	if a == "" || filepath.IsAbs(a) || !filepath.IsLocal(a) {
		return outside()
	}
	w := strings.TrimPrefix(a, "./")
	if c := filepath.Clean(w); c != w {
		details["clean"] = c
		return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"argument %q of %s is not a path in clean form: write it as %q (no \".\" or \"..\" segments, no repeated or trailing \"/\")", a, b.Name, c), details)
	}
	name := filepath.Join(cwd, w)
	real, ok := t.ws.resolve(name)
	if !ok {
		return outside()
	}
	if real != name {
		details["real"] = filepath.ToSlash(real)
		return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"argument %q of %s goes through a symbolic link: it is %q in the workspace; name that path (the policy judges the path as written)",
			a, b.Name, filepath.ToSlash(real)), details)
	}
	// A program that may write does not get a protected path to write
	// (the sandbox mounts read-only only those that exist, at the top and
	// three levels down): touch sub/.envrc, mkdir lib/.git.
	if b.Effect != EffectRead {
		if e := t.ws.checkProtectedAs(a, name, false); e != nil {
			return e
		}
	}
	if name == "." {
		return nil // the workspace itself
	}
	// A file with other names is another path's file too (a hard link
	// public/h to secret/key.txt): refused as fs.read refuses it.
	if fi, err := t.ws.root.Lstat(name); err == nil {
		if e := notHardLinked(a, fi); e != nil {
			return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"argument %q of %s is a file with other hard links, which may be paths the policy judges otherwise; it is not used", a, b.Name), details)
		}
	}
	return nil
}

func flagAllowed(allowed []string, a string) bool {
	for _, f := range allowed {
		if a == f || strings.HasSuffix(f, "=") && strings.HasPrefix(a, f) {
			return true
		}
	}
	return false
}

// outputPipes are the stdout and stderr pipes of a program and the
// goroutines that copy them into capped buffers.
type outputPipes struct {
	readers, writers []*os.File
	bufs             []*cappedBuffer
	done             chan struct{}
}

// startPipes gives cmd a stdout and a stderr pipe.
func startPipes(cmd *osexec.Cmd, stdout, stderr *cappedBuffer) (*outputPipes, *xctv1.Error) {
	p := &outputPipes{bufs: []*cappedBuffer{stdout, stderr}, done: make(chan struct{})}
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			p.close()
			return nil, wire.Errorf(wire.CodeToolFailure, "output pipe: %v", err)
		}
		p.readers, p.writers = append(p.readers, r), append(p.writers, w)
	}
	cmd.Stdout, cmd.Stderr = p.writers[0], p.writers[1]
	return p, nil
}

// started closes the parent's write ends and starts copying.
func (p *outputPipes) started() {
	for _, w := range p.writers {
		_ = w.Close()
	}
	p.writers = nil
	var wg sync.WaitGroup
	for i, r := range p.readers {
		wg.Go(func() { _, _ = io.Copy(p.bufs[i], r) })
	}
	go func() {
		wg.Wait()
		close(p.done)
	}()
}

// drain waits until every writer has gone (the group was killed), at most
// for delay: a process that left the group could keep a pipe open.
func (p *outputPipes) drain(delay time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		for _, r := range p.readers {
			_ = r.Close()
		}
		<-p.done
	}
}

func (p *outputPipes) close() {
	for _, f := range append(p.readers, p.writers...) {
		_ = f.Close()
	}
}

// killGroup kills a process group; a group that is gone is fine.
func killGroup(pgid int) error {
	if pgid <= 0 {
		return nil
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// cappedBuffer keeps the first limit bytes written and counts the rest.
type cappedBuffer struct {
	buf       bytes.Buffer
	limit     int64
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.limit - int64(c.buf.Len())
	if int64(len(p)) > room {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
	} else {
		c.buf.Write(p)
	}
	return len(p), nil // the rest is discarded, not an error for the program
}

// text returns the kept bytes as text or base64, and whether some were
// discarded.
func (c *cappedBuffer) text() (string, string, bool) {
	data := c.buf.Bytes()
	if utf8.Valid(data) {
		return string(data), EncodingUTF8, c.truncated
	}
	return base64.StdEncoding.EncodeToString(data), EncodingBase64, c.truncated
}

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// scanRefused is the refusal of a program that may write in a workspace
// the scan for protected paths cannot read whole (why: cut): a protected
// entry it did not find would be writable in the sandbox, and one the
// program made there would stay. Nothing was run.
func scanRefused(program, cut string, budget int) *xctv1.Error {
	if strings.HasPrefix(cut, workspaceUnreadable) {
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "the sandbox of %s could not be set up; nothing was run: %s", program, cut),
			map[string]any{"program": program, "outcome_unknown": false})
	}
	if strings.HasPrefix(cut, scanChanged) {
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"%s may write, and %s, %d times in a row (another program is renaming or moving its directories): a protected entry it moved would be missed, and writable, so the program was not run; nothing was run (try again once the other is done)", program, cut, scanAttempts),
			map[string]any{"program": program, "reason": cut, "outcome_unknown": false})
	}
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%s may write, and the workspace cannot be scanned whole for protected paths (%s; the scan reads at most %d names, fs.protected_scan_entries): "+
			"one it did not find would be writable, so the program was not run; nothing was run", program, cut, budget),
		map[string]any{"program": program, "reason": cut, "limit": budget, "outcome_unknown": false})
}
