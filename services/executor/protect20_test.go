package executor

import (
	"encoding/binary"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xct-dev/xct/internal/wire"
)

// hostGit runs the host's git in dir as the next human would, with a
// home and configuration of its own; it returns the combined output.
func hostGit(tb testing.TB, dir string, args ...string) (string, error) {
	tb.Helper()
	cmd := osexec.Command("git", args...)
	cmd.Dir = dir
	home := tb.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=h", "GIT_AUTHOR_EMAIL=h@example.com", "GIT_COMMITTER_NAME=h", "GIT_COMMITTER_EMAIL=h@example.com"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestProtectedRefsThroughALinkedDirectory: a hook names its script
// through a directory that is a symbolic link a human made: `sh
// ci/check.sh` with ci -> tools, and `sh shared/run.sh` with shared
// leading out of the workspace (a checkout shared between projects).
// The first held on main (a link is checked as where it leads, and
// tools/ holds the hook's script). The second did not: the word leads
// out, so nothing was protected, and fs.delete of the link shared (a
// link is deleted itself) and fs.move of the model's own directory to
// shared were allowed: the next human's `git commit` ran the model's
// shared/run.sh. Now every link on the way from a protected entry to
// what it runs, in the workspace, is protected as a target is, also
// when it leads out: not moved, deleted or replaced by the fs tools.
func TestProtectedRefsThroughALinkedDirectory(t *testing.T) {
	if _, err := osexec.LookPath("git"); err != nil {
		t.Skip("no git on this host")
	}
	sb := newSandbox(t)
	if out, err := hostGit(t, sb.ws, "init", "-q", "-b", "main"); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	shared := filepath.Join(sb.dir, "shared-ci")
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/hooks/pre-commit": "#!/bin/sh\nsh ci/check.sh && sh shared/run.sh\n",
		"tools/check.sh":        "echo tools-check-ran\n",
		"src/main.go":           "package main\n",
	})
	writeFiles(t, shared, 0o755, map[string]string{"run.sh": "echo shared-run-ran\n"})
	must(t, os.Symlink("tools", filepath.Join(sb.ws, "ci")))
	must(t, os.Symlink(shared, filepath.Join(sb.ws, "shared")))
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	if r := exec(t, s, "fs.write", map[string]any{"path": "evil/check.sh", "content": "touch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write evil/check.sh: %v", r)
	}
	if r := exec(t, s, "fs.write", map[string]any{"path": "evil2/run.sh", "content": "touch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write evil2/run.sh: %v", r)
	}
	var done []string
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.move", map[string]any{"from": "ci", "to": "ci-old"}},
		{"fs.move", map[string]any{"from": "evil", "to": "ci"}},
		{"fs.delete", map[string]any{"path": "shared"}},
		{"fs.move", map[string]any{"from": "evil2", "to": "shared"}},
	} {
		r := exec(t, s, c.tool, c.args)
		if codeOf(r) == "" {
			done = append(done, c.tool+" "+strings.Join([]string{anyString(c.args["from"]), anyString(c.args["path"]), anyString(c.args["to"])}, " "))
			continue
		}
		if codeOf(r) != string(wire.CodePermissionDenied) && codeOf(r) != string(wire.CodeInvalidArgument) {
			t.Errorf("%s %v: %v", c.tool, c.args, r)
		}
	}
	// The next human commits: the hook runs.
	out, err := hostGit(t, sb.ws, "commit", "-q", "--allow-empty", "-m", "x")
	if _, serr := os.Stat(mark); serr == nil {
		t.Fatalf("the next human's git commit ran the model's script (the fs tools did %v): %s", done, out)
	}
	if len(done) > 0 {
		t.Errorf("the fs tools moved or deleted a link a hook's script is reached through: %v", done)
	}
	if err != nil || !strings.Contains(out, "tools-check-ran") || !strings.Contains(out, "shared-run-ran") {
		t.Errorf("git commit: %v %s", err, out)
	}
	// Links no protected entry goes through stay the model's to move.
	must(t, os.Symlink("src", filepath.Join(sb.ws, "srclink")))
	expireLinkTargets(s)
	if r := exec(t, s, "fs.move", map[string]any{"from": "srclink", "to": "srclink2"}); codeOf(r) != "" {
		t.Errorf("fs.move srclink: %v", r)
	}
}

func anyString(v any) string {
	s, _ := v.(string)
	return s
}

// elfInit is an x86-64 ELF shared object made only of valid UTF-8 (so
// fs.write's text can be one) whose initialisation function, which the
// dynamic loader runs when the object is loaded (before anything looks
// for a symbol in it), creates the file mark (an ASCII path): the
// model's code run by whatever loads it. Every header field is below
// 0x80; the code builds the path on the stack two bytes at a time
// (push imm16) and calls open(path, O_WRONLY|O_CREAT) with ASCII
// instructions; its return (0xC3) is followed by a byte that makes
// the pair a two-byte sequence.
func elfInit(tb testing.TB, mark string) string {
	tb.Helper()
	b := make([]byte, 0x300)
	le := binary.LittleEndian
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	le.PutUint16(b[16:], 3)    // ET_DYN
	le.PutUint16(b[18:], 0x3e) // x86-64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], 0x40) // program headers
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 2)
	ph := func(at int, typ, flags uint32, off, size, align uint64) {
		le.PutUint32(b[at:], typ)
		le.PutUint32(b[at+4:], flags)
		for i := 8; i < 32; i += 8 {
			le.PutUint64(b[at+i:], off) // offset, address, physical address
		}
		le.PutUint64(b[at+32:], size)
		le.PutUint64(b[at+40:], size)
		le.PutUint64(b[at+48:], align)
	}
	ph(0x40, 1, 5, 0, 0x300, 0x1000) // PT_LOAD, read and execute
	ph(0x78, 2, 4, 0x100, 0x60, 8)   // PT_DYNAMIC
	// The dynamic section: INIT, STRTAB, SYMTAB, STRSZ, SYMENT.
	for i, kv := range [][2]uint64{{12, 0x200}, {5, 0x170}, {6, 0x178}, {10, 1}, {11, 24}} {
		le.PutUint64(b[0x100+16*i:], kv[0])
		le.PutUint64(b[0x108+16*i:], kv[1])
	}
	s := mark + "\x00"
	if len(s)%2 == 1 {
		s += "\x00"
	}
	code := []byte{0x55, 0x54, 0x5d} // push rbp; push rsp; pop rbp
	for i := len(s) - 2; i >= 0; i -= 2 {
		code = append(code, 0x66, 0x68, s[i], s[i+1]) // push imm16
	}
	code = append(code,
		0x54, 0x5f, // push rsp; pop rdi: the path
		0x6a, 0x41, 0x5e, // push 0x41; pop rsi: O_WRONLY|O_CREAT
		0x6a, 0x7f, 0x5a, // push 0x7f; pop rdx: a mode
		0x6a, 0x02, 0x58, // push 2; pop rax: open
		0x0f, 0x05, // syscall
		0x55, 0x5c, 0x5d, // push rbp; pop rsp; pop rbp
		0xc3, 0x90) // ret (and a byte after it)
	if 0x200+len(code) > len(b) {
		tb.Fatalf("the path %q is too long for the object", mark)
	}
	copy(b[0x200:], code)
	if !utf8.Valid(b) {
		tb.Fatal("the object is not valid UTF-8")
	}
	return string(b)
}

// TestNativeModulesAreNotWrittenByTheFSTools: a Python extension module
// (util.so next to util.py: the importer tries extensions before
// sources), a Node addon (build/Release/addon.node, node-gyp's output,
// which index.js requires) and a build's program (build/app, which a
// Makefile runs when it is newer than its sources) are ELF files, which
// git ignores (*.so, build/) and no diff shows; the dynamic loader runs
// an object's initialisation code as it loads it. An ELF object can be
// valid UTF-8 (elfInit): on main fs.write (reversible, no human) wrote
// util.so and addon.node, and replaced build/app keeping its mode, and
// the next human's `python3 main.py` and `node index.js` ran the model's
// code on the host. Now fs.write neither writes an ELF file nor replaces
// one (the build makes it; a program, the compiler, may).
func TestNativeModulesAreNotWrittenByTheFSTools(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{
		"app/main.py":  "import util\nprint('main ran')\n",
		"app/util.py":  "print('util ran')\n",
		"web/index.js": "try { require('./build/Release/addon.node') } catch (e) { console.log('no addon: ' + e.message) }\nconsole.log('index ran')\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	obj := elfInit(t, mark)
	// A program a build made (an ELF the test takes from the host: the
	// shape matters, not the content).
	real, err := os.ReadFile("/bin/true")
	must(t, err)
	writeFiles(t, sb.ws, 0o755, map[string]string{"build/app": string(real)})
	s := newService(t, sb.ws)
	var written []string
	for _, c := range []struct{ path, content string }{
		{"app/util.so", obj},
		{"web/build/Release/addon.node", obj},
		{"build/app", "#!/bin/sh\ntouch " + mark + "\n"},
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": c.path, "content": c.content})
		if codeOf(r) == "" {
			written = append(written, c.path)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "ELF") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (an ELF file)", c.path, r)
		}
	}
	// The next human runs the project's code on the host.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var outs []string
	for _, c := range []struct {
		dir  string
		argv []string
	}{
		{"app", []string{"python3", "main.py"}},
		{"web", []string{"node", "index.js"}},
		{".", []string{"./build/app"}},
	} {
		if _, err := osexec.LookPath(c.argv[0]); err != nil && !strings.HasPrefix(c.argv[0], "./") {
			t.Logf("no %s on this host", c.argv[0])
			continue
		}
		cmd := osexec.Command(c.argv[0], c.argv[1:]...)
		cmd.Dir = filepath.Join(sb.ws, c.dir)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		outs = append(outs, string(out))
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the next human's %v ran the model's code (fs.write wrote %v): %s", c.argv, written, out)
		}
	}
	if len(written) > 0 {
		t.Errorf("fs.write wrote %v", written)
	}
	if got := strings.Join(outs, ""); !strings.Contains(got, "util ran") {
		t.Errorf("the project's own code did not run: %s", got)
	}
	// Text stays writable, a script replacing a script too (its mode
	// kept), and an object is refused whatever its name.
	writeFiles(t, sb.ws, 0o755, map[string]string{"scripts/run.sh": "#!/bin/sh\n"})
	for _, c := range []struct{ path, content string }{
		{"app/util.py", "print('util changed')\n"},
		{"scripts/run.sh", "#!/bin/sh\necho run\n"},
		{"notes/elf.md", "An ELF file begins with 0x7f, then E, L, F.\n"},
	} {
		if r := exec(t, s, "fs.write", map[string]any{"path": c.path, "content": c.content}); codeOf(r) != "" {
			t.Errorf("fs.write %s: %v", c.path, r)
		}
	}
	if r := exec(t, s, "fs.write", map[string]any{"path": "notes/data.txt", "content": obj}); codeOf(r) != string(wire.CodePermissionDenied) {
		t.Errorf("fs.write of an ELF object named data.txt: %v", r)
	}
	// A static library (an ar archive) holds its objects after a
	// header: a build links the one defining a symbol it needs, and
	// its initialisation runs with the program (not linked here).
	member := fmt.Sprintf("%-16s%-12s%-6s%-6s%-8s%-10d`\n", "util.o/", "0", "0", "0", "644", len(obj))
	if r := exec(t, s, "fs.write", map[string]any{"path": "build/libutil.a", "content": "!<arch>\n" + member + obj}); codeOf(r) != string(wire.CodePermissionDenied) {
		t.Errorf("fs.write of a static library holding an ELF object: %v", r)
	}
}

// TestProtectedEnvrcSourcedPathDirs: an .envrc often keeps its settings
// in a script it sources (`source env/common.sh`, direnv's `source_env
// tools/env`, which runs the file from its own directory), and a
// PATH_add there puts a workspace directory first on the PATH of every
// shell that cds in, as one in the .envrc does (session 19,
// TestProtectedEnvrcPathDirs). On main the sourced script was protected
// and the directory it put on PATH was not: fs.write replaced the
// existing bin/deploy (keeping its mode), fs.move renamed it bin/git,
// and the next human's `git status` (every prompt that shows a branch
// runs one) ran the model's script. Now what a script an .envrc sources
// puts on PATH or PYTHONPATH is protected as the .envrc's own is (from
// the .envrc's directory and from the script's).
func TestProtectedEnvrcSourcedPathDirs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".envrc":         "source env/common.sh\nsource_env tools/env\n",
		"env/common.sh":  "PATH_add bin\nexport PYTHONPATH=\"$PWD/src\"\n. env/more.sh\n",
		"env/more.sh":    "PATH_add scripts\n",
		"tools/env":      "PATH_add bin\n",
		"bin/deploy":     "#!/bin/sh\necho deploying\n",
		"src/app.py":     "print('app')\n",
		"docs/readme.md": "x\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	payload := "#!/bin/sh\necho ran > " + mark + "\n"
	var done []string
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.write", map[string]any{"path": "bin/deploy", "content": payload}},
		{"fs.move", map[string]any{"from": "bin/deploy", "to": "bin/git"}},
	} {
		r := exec(t, s, c.tool, c.args)
		if codeOf(r) == "" {
			done = append(done, c.tool+" "+anyString(c.args["path"])+anyString(c.args["from"]))
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), ".envrc") {
			t.Errorf("%s %v: %v, want PERMISSION_DENIED naming .envrc", c.tool, c.args, r)
		}
	}
	// The next human cds in (direnv puts bin/ first on PATH) and the
	// prompt runs git status.
	cmd := osexec.Command("sh", "-c", "git status --short")
	cmd.Dir = sb.ws
	cmd.Env = []string{"PATH=" + filepath.Join(sb.ws, "bin") + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's git status ran the model's bin/git (%v): %s", done, out)
	}
	if len(done) != 0 {
		t.Errorf("done: %v", done)
	}
	for _, p := range []string{"bin/x", "tools/bin/git", "scripts/git", "env/scripts/git", "src/sitecustomize.py"} {
		if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": payload}); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}
	expireLinkTargets(s)
	wantWritable(t, s, "src/app.py", "docs/readme.md", "tools/README", "env/README")
}

// agentAndDebuggerConfigs are files and directories that a program
// reads from the working directory (or the project's top) when the next
// human starts it there, and that name commands it runs: Python's
// debugger runs ./.pdbrc (breakpoint(), python -m pdb, pytest --pdb),
// Perl's ./.perldb (perl -d), R ./.Rprofile, GHCi ./.ghci, Pry
// ./.pryrc, IRB ./.irbrc, Octave ./.octaverc, gdb and lldb their
// ./.gdbinit and ./.lldbinit (when the user's settings load them);
// coding agents and editors their project settings: Claude Code's
// .claude/settings.json hooks and .mcp.json servers, aider's
// .aider.conf.yml (lint-cmd, test-cmd, run after every edit), Cursor's
// .cursor/ (hooks, MCP servers), Gemini CLI's .gemini/settings.json
// (MCP servers, a tool discovery command), Codex's .codex/config.toml
// (MCP servers), Zed's .zed/settings.json (a language server's binary)
// and Helix's .helix/languages.toml (a language server's command).
var agentAndDebuggerConfigs = []string{
	".pdbrc", ".perldb", ".Rprofile", ".ghci", ".pryrc", ".irbrc", ".octaverc", ".gdbinit", ".lldbinit",
	".claude/settings.json", ".claude/settings.local.json", ".mcp.json", ".aider.conf.yml",
	".cursor/mcp.json", ".cursor/hooks.json", ".gemini/settings.json", ".codex/config.toml",
	".zed/settings.json", ".helix/languages.toml",
}

// TestProtectedAgentAndDebuggerConfigs: on main fs.write (reversible, no
// human) made each of agentAndDebuggerConfigs, at the top and in a
// subdirectory; the next human's `python3 -m pdb main.py` ran the
// model's .pdbrc on the host, and `perl -d` its .perldb. Now they are
// protected paths.
func TestProtectedAgentAndDebuggerConfigs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{
		"main.py":    "print('main ran')\n",
		"tool.pl":    "print \"tool ran\\n\";\n",
		"docs/x.md":  "x\n",
		"sub/app.py": "x\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	var written []string
	for _, name := range agentAndDebuggerConfigs {
		content := "x\n"
		switch name {
		case ".pdbrc":
			content = "import os\nos.system(" + `"touch ` + mark + `"` + ")\n"
		case ".perldb":
			content = `system("touch ` + mark + `");` + "\n"
		}
		for _, p := range []string{name, "sub/" + name} {
			r := exec(t, s, "fs.write", map[string]any{"path": p, "content": content})
			if codeOf(r) == "" {
				written = append(written, p)
			} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected path") {
				t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (a protected path)", p, r)
			}
		}
	}
	// The next human debugs the project's code on the host.
	for _, c := range []struct {
		argv []string
		env  string
	}{
		{[]string{"python3", "-m", "pdb", "main.py"}, ""},
		{[]string{"perl", "-d", "tool.pl"}, "PERLDB_OPTS=NonStop=1"},
	} {
		if _, err := osexec.LookPath(c.argv[0]); err != nil {
			t.Logf("no %s on this host", c.argv[0])
			continue
		}
		cmd := osexec.Command(c.argv[0], c.argv[1:]...)
		cmd.Dir = sb.ws
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), c.env}
		cmd.Stdin = strings.NewReader("c\nq\n")
		out, _ := cmd.CombinedOutput()
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the next human's %v ran the model's file (fs.write wrote %v): %s", c.argv, written, out)
		}
		if !strings.Contains(string(out), "ran") {
			t.Errorf("%v: %s", c.argv, out)
		}
	}
	if len(written) > 0 {
		t.Errorf("fs.write wrote %v", written)
	}
	wantWritable(t, s, "docs/pdbrc.md", "claude/notes.md", "sub/app.py", "docs/mcp.json", "aider.conf.yml.example")
}

// TestVirtualEnvironmentsAreNotMadeByTheFSTools: the fs tools refused to
// change a virtual environment (session 18), one they recognised by its
// pyvenv.cfg; one that did not exist yet (a fresh clone) was the
// model's to make: on main fs.write made .venv/bin/activate (git ignores
// .venv/: no diff shows it) and .venv/pyvenv.cfg, and the next human's
// habitual `. .venv/bin/activate` (or an editor's terminal, which
// sources the selected environment's activate) ran the model's command
// on the host. Now the fs tools make no pyvenv.cfg and no activate
// script (bin/ or Scripts/ activate, activate.csh, .fish, .nu, .ps1,
// .bat, activate_this.py): `python -m venv` makes them.
func TestVirtualEnvironmentsAreNotMadeByTheFSTools(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{"main.py": "print('main')\n", "docs/activate.md": "x\n"})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	var written []string
	for _, c := range []struct{ path, content string }{
		{".venv/bin/activate", "touch " + mark + "\n"},
		{".venv/pyvenv.cfg", "home = /usr/bin\n"},
		{"env/Scripts/Activate.ps1", "x\n"},
		{"venv/bin/activate.fish", "x\n"},
		{"venv/bin/activate_this.py", "x\n"},
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": c.path, "content": c.content})
		if codeOf(r) == "" {
			written = append(written, c.path)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "virtual environment") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (a virtual environment's)", c.path, r)
		}
	}
	if r := exec(t, s, "fs.move", map[string]any{"from": "docs/activate.md", "to": "tools/bin/activate"}); codeOf(r) == "" {
		written = append(written, "tools/bin/activate (moved)")
	}
	// The next human activates the environment, as every tutorial says.
	cmd := osexec.Command("sh", "-c", ". .venv/bin/activate 2>/dev/null; true")
	cmd.Dir = sb.ws
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's . .venv/bin/activate ran the model's script (the fs tools made %v): %s", written, out)
	}
	if len(written) > 0 {
		t.Errorf("the fs tools made %v", written)
	}
	wantWritable(t, s, "docs/activate.md", "src/activate.py", "bin/run", "docs/pyvenv.md")
}

// TestProtectedEnvrcConfigVars: an .envrc often points the human's
// programs at configuration kept in the project (`export
// KUBECONFIG="$PWD/.kube/config"`, `export
// GIT_CONFIG_GLOBAL=$PWD/tools/gitconfig`, DOCKER_CONFIG, CARGO_HOME,
// AWS_CONFIG_FILE ...), and such configuration names commands: a
// kubeconfig's exec credential plugin, git's core.fsmonitor and
// aliases, docker's credential helpers, cargo's rustc wrapper, AWS's
// credential_process. On main fs.write of tools/gitconfig (reversible,
// no human) was allowed, and the next human's `git status` after cd
// (with the GIT_CONFIG_GLOBAL direnv sets) ran the model's fsmonitor on
// the host. Now a file or directory an .envrc's variable of that kind
// names (relative, or from $PWD) is protected as a link target is.
func TestProtectedEnvrcConfigVars(t *testing.T) {
	if _, err := osexec.LookPath("git"); err != nil {
		t.Skip("no git on this host")
	}
	sb := newSandbox(t)
	if out, err := hostGit(t, sb.ws, "init", "-q", "-b", "main"); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	writeFiles(t, sb.ws, 0o644, map[string]string{
		".envrc": "export GIT_CONFIG_GLOBAL=$PWD/tools/gitconfig\nexport KUBECONFIG=\"${PWD}/.kube/config:deploy/kubeconfig\"\n" +
			"export DOCKER_CONFIG=$PWD/.docker\nexport DATA_DIR=$PWD/data\n",
		"tools/gitconfig":  "[user]\n\tname = dev\n",
		".kube/config":     "apiVersion: v1\n",
		"data/sample.csv":  "a,b\n",
		"docs/readme.md":   "x\n",
		"tools/other.conf": "x\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	var done []string
	for _, p := range []string{"tools/gitconfig", ".kube/config", "deploy/kubeconfig", ".docker/config.json"} {
		content := "x\n"
		if p == "tools/gitconfig" {
			content = "[core]\n\tfsmonitor = touch " + mark + "\n"
		}
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": content})
		if codeOf(r) == "" {
			done = append(done, p)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), ".envrc") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED naming .envrc", p, r)
		}
	}
	// The next human cds in: direnv exports GIT_CONFIG_GLOBAL, and the
	// prompt runs git status.
	cmd := osexec.Command("git", "status", "--short")
	cmd.Dir = sb.ws
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + filepath.Join(sb.ws, "tools/gitconfig")}
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's git status ran the model's fsmonitor (fs.write wrote %v): %s", done, out)
	}
	if len(done) > 0 {
		t.Errorf("fs.write wrote %v", done)
	}
	expireLinkTargets(s)
	wantWritable(t, s, "data/sample.csv", "docs/readme.md", "tools/other.conf")
}
