package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// DefaultProtectedPaths are the paths of the workspace the fs tools never
// change, and that a sandboxed program sees read-only when they are at the
// workspace's top: version control metadata (hooks, config: an alias or
// core.fsmonitor there runs a command), XCT's own state, and the
// configuration files through which the programs the executor can run
// (git, npm, yarn, pip, direnv, shells, ssh, curl, wget, pre-commit,
// husky) would run commands or send credentials elsewhere; and the
// files that run code, or change what runs, for the next human or tool
// that opens or enters the workspace: an editor's tasks, launch
// configurations and settings (.vscode/, .idea/: a VS Code task with
// "runOn": "folderOpen"), a dev container's commands (.devcontainer/,
// .devcontainer.json: postCreateCommand), mise's tasks, hooks and tool
// versions (run on cd), bun's preload scripts (bunfig.toml), vim's and
// neovim's local start-up files, lefthook's git hooks, a HEAD (which
// would make its directory a repository for git); and cargo's
// configuration (.cargo/config.toml: a rustc wrapper that cargo metadata,
// cargo tree and cargo fetch run too, another registry, a proxy).
//
// A name ending in "/" is a directory: a path with a component of that
// name, or under it, is protected ("sub/.git/config" too). Any other name
// is a file name, protected wherever it is. Names are compared after
// cleaning the path and folding case (a case-insensitive file system
// would alias ".GIT" to ".git"), with trailing dots and spaces removed
// (Windows aliases).
var DefaultProtectedPaths = []string{
	".git/", ".xct/", ".hg/", ".svn/", ".husky/", ".ssh/", ".gnupg/", ".direnv/",
	".gitconfig", ".gitmodules", ".gitattributes",
	".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs",
	".envrc",
	".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile", ".inputrc",
	".netrc", ".curlrc", ".wgetrc", "pip.conf", ".pypirc",
	".pre-commit-config.yaml",
	".vscode/", ".idea/", ".devcontainer/", ".mise/",
	".cargo/",
	".devcontainer.json",
	"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".tool-versions",
	"bunfig.toml", ".bunfig.toml",
	".exrc", ".vimrc", ".nvimrc", ".nvim.lua",
	"lefthook.yml", ".lefthook.yml",
	// Session 17 (attack17a): lefthook's other names, its -local
	// configuration (merged; its lefthook: key is the command that runs
	// lefthook), its scripts' directories, and prek's files.
	"lefthook.yaml", ".lefthook.yaml", "lefthook.toml", ".lefthook.toml",
	"lefthook.json", ".lefthook.json", "lefthook.jsonc", ".lefthook.jsonc",
	"lefthook-local.yml", ".lefthook-local.yml", "lefthook-local.yaml", ".lefthook-local.yaml",
	"lefthook-local.toml", ".lefthook-local.toml", "lefthook-local.json", ".lefthook-local.json",
	"lefthook-local.jsonc", ".lefthook-local.jsonc",
	".lefthook/", ".lefthook-local/",
	".pre-commit-config.yml", "prek.toml",
	// Session 18 (attack18a): git takes any directory holding HEAD,
	// objects/ and refs/ (or a commondir file naming them) for a bare
	// repository, and runs what its config names (core.fsmonitor on git
	// status, which shell prompts run on every cd); the host's git does
	// so by default (safe.bareRepository=all). git needs HEAD to take a
	// directory for one, so no repository is made without it.
	"HEAD",
	// Session 20 (attack20): what a program reads from the directory
	// the next human starts it in and runs commands from: debuggers'
	// start-up files (Python's pdb reads ./.pdbrc on breakpoint(),
	// python -m pdb and pytest --pdb; perl -d ./.perldb), interpreters'
	// (R, GHCi, Pry, IRB, Octave), gdb's and lldb's (when the user's
	// settings load a project's); coding agents' and editors' project
	// settings (Claude Code's hooks and MCP servers, aider's lint and
	// test commands run after every edit, Cursor's, Gemini CLI's and
	// Codex's MCP servers and hooks, Zed's and Helix's language
	// servers).
	".pdbrc", ".perldb", ".Rprofile", ".ghci", ".pryrc", ".irbrc", ".octaverc", ".gdbinit", ".lldbinit",
	".claude/", ".mcp.json", ".aider.conf.yml", ".cursor/", ".gemini/", ".codex/", ".zed/", ".helix/",
	// Session 21 (attack21): rustup's toolchain files, read from the
	// working directory and every directory above by each proxy (cargo,
	// rustc; rust-analyzer's cargo metadata when an editor opens the
	// folder): a `path` key (a legacy file's line) names a directory
	// whose bin/cargo the proxy runs, as .tool-versions names versions.
	"rust-toolchain", "rust-toolchain.toml",
	// And launchers' version files that may name a program by its
	// path, which the launcher runs in place of the tool: bazelisk's
	// .bazelversion and .bazeliskrc (USE_BAZEL_VERSION; its
	// BAZELISK_BASE_URL a server to download bazel from), uv's
	// .python-version and .python-versions (an interpreter's path or an
	// installation's directory is a request uv runs).
	".bazelversion", ".bazeliskrc", ".python-version", ".python-versions",
}

// protectedPaths matches workspace paths against protected names.
type protectedPaths struct {
	dirs  []string // folded names
	files []string
	all   []string // as configured, for messages
	// folded is dirs and files, for matchNameBytes.
	folded map[string]bool
	// scanEntries is fs.protected_scan_entries (0: the default).
	scanEntries int
	// cache is what the scans read of the workspace's directories.
	cache scanCache
}

func newProtectedPaths(extra []string) *protectedPaths {
	p := &protectedPaths{folded: map[string]bool{}}
	for _, n := range append(slices.Clone(DefaultProtectedPaths), extra...) {
		if slices.Contains(p.all, n) {
			continue
		}
		p.all = append(p.all, n)
		if d, ok := strings.CutSuffix(n, "/"); ok {
			p.dirs = append(p.dirs, foldName(d))
			p.folded[foldName(d)] = true
		} else {
			p.files = append(p.files, foldName(n))
			p.folded[foldName(n)] = true
		}
	}
	return p
}

// foldName is a name as a case-insensitive, Windows-tolerant file system
// could see it. Each letter is folded through its upper case, so the
// letters Unicode folds onto ASCII ones (the long s onto s, the Kelvin
// sign onto k) match the ASCII names, as a case-folding file system
// (ext4's casefold) would have them.
func foldName(n string) string {
	return strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, strings.TrimRight(n, ". "))
}

// match returns the protected name that covers the workspace path name
// (relative, any separators), or "".
func (p *protectedPaths) match(name string) string {
	if p == nil {
		return ""
	}
	clean := filepath.ToSlash(filepath.Clean(strings.ReplaceAll(name, `\`, "/")))
	parts := strings.Split(clean, "/")
	for i, part := range parts {
		f := foldName(part)
		// An NTFS stream name ("x::$DATA") is the file x.
		if j := strings.IndexByte(f, ':'); j > 0 {
			f = f[:j]
		}
		if slices.Contains(p.dirs, f) {
			return f + "/"
		}
		if i == len(parts)-1 && slices.Contains(p.files, f) {
			return f
		}
	}
	return ""
}

// Bounds of the scan for protected entries.
const (
	// protectScanEntries is the default of fs.protected_scan_entries:
	// the names the scan before a program that may write reads at most
	// (or takes from its cache of listings, scanCache). A workspace with
	// more is not scanned whole, and such a program is not run
	// (errScanIncomplete).
	protectScanEntries = 1 << 21
	// protectScanDepth bounds how deep below the top any scan goes.
	protectScanDepth = 256
	// protectMaxMounts bounds the protected entries a sandbox mounts
	// read-only (one descriptor and one mount each).
	protectMaxMounts = 512
)

// scanBudget is the scan's bound of names: fs.protected_scan_entries, or
// its default.
func (p *protectedPaths) scanBudget() int {
	if p == nil || p.scanEntries <= 0 {
		return protectScanEntries
	}
	return p.scanEntries
}

// protectedNames returns the protected entries of the workspace (clean
// relative paths, links included), found by a scan of the whole
// workspace (never through a link) that reads at most budget names (-1:
// no bound), and "" when it read everything, otherwise why not. When the
// top itself cannot be read, it returns nil.
func (w *workspace) protectedNames(budget int) (protectedSet, string) {
	top, err := w.open(".")
	if errors.Is(err, unix.EACCES) {
		// A program took the executor's own permissions away (modes.go).
		if _, changed, cerr := giveBack(w.fd(), modeScan); cerr == nil && changed {
			top, err = w.open(".")
		}
	}
	if err != nil {
		return nil, workspaceUnreadable + err.Error()
	}
	defer func() { _ = top.Close() }()
	var out protectedSet
	var cut string
	for range scanAttempts {
		out = protectedSet{}
		b := budget
		cut = w.protected.walk(top, "", 0, &b, func(d int, name, rel string) bool {
			out.add(d, name, rel)
			return true
		})
		if !strings.HasPrefix(cut, scanChanged) {
			break
		}
	}
	targets := w.protected.linkTargets(w.root, w.abs, out)
	for target := range targets {
		out.addPath(w.root, target)
	}
	w.targets.record(targets, cut)
	return out, cut
}

// Links out of protected entries. A protected entry that is a symbolic
// link (.envrc -> tools/envrc), or a link inside a protected directory
// (.git/hooks/pre-commit -> ../../scripts/pre-commit, as hook managers
// and many projects install them), runs or configures what it leads to,
// an ordinary file of the workspace: on main fs.write of that file
// (reversible, no human) changed what the next human's commit ran. So
// what such a link leads to inside the workspace is protected too: the
// fs tools refuse to change it (or a directory holding it), a sandbox
// mounts it read-only, and one made or replaced by a program is moved
// aside after it, as a protected entry is. Links are looked for in each
// protected directory at most linkScanDepth directories down and
// linkScanEntries names in, never in a repository's objects, references
// or logs.
const (
	linkScanEntries = 4096
	linkScanDepth   = 4
	// linkTargetsFresh is how long the fs tools take the link targets
	// of the last scan for the workspace's: links into the workspace
	// are made by a human (a program's new protected entry, a link
	// included, is moved aside after it).
	linkTargetsFresh = 2 * time.Second
)

// linkScanSkip are the directories of a repository the look for links
// does not enter: its objects, references and their logs (many names,
// never a link a program follows).
var linkScanSkip = map[string]bool{"objects": true, "refs": true, "logs": true, "lfs": true}

// linkTargets returns where the protected entries of set lead through
// symbolic links inside the workspace (root: its top; abs: its absolute
// path, for links written absolute): each target's clean workspace path
// (whether it exists or not) and the link that leads there. A target
// that is protected itself, outside the workspace or the workspace
// itself is left out.
func (p *protectedPaths) linkTargets(root *os.Root, abs string, set protectedSet) map[string]string {
	var out map[string]string
	// followed are the scripts whose own commands were read.
	followed := map[string]bool{}
	// runRef adds target, a file run (or read) from the directory base
	// ("": not a script), depth scripts down from the protected entry
	// link: a shell script's own commands are read in turn.
	var runRef func(target, link, base string, depth int)
	addRef := func(target, link string) { runRef(target, link, "", 0) }
	add := func(link, base string) {
		target, err := root.Readlink(link)
		if err != nil {
			return
		}
		target = filepath.ToSlash(target)
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(link), target)
		}
		runRef(target, link, base, 1)
	}
	runRef = func(target, link, base string, depth int) {
		// The links on the way are protected as the target is, also
		// when they lead out of the workspace: moved or deleted, the
		// name would lead to what the fs tools then put there (session
		// 20: `sh shared/run.sh` with shared -> a checkout outside;
		// fs.delete shared, fs.move the model's directory to shared).
		real, ok := workspaceRelVia(root, abs, target, func(l string) {
			if p.match(l) == "" {
				if out == nil {
					out = map[string]string{}
				}
				out[l] = link
			}
		})
		if !ok || real == "." || p.match(real) != "" {
			return
		}
		if out == nil {
			out = map[string]string{}
		}
		out[real] = link
		if base == "" || depth >= scriptFollowDepth || followed[real] || !isShellScript(root, real) {
			return
		}
		followed[real] = true
		// Its words name files from where it runs, or from its own
		// directory (direnv's source_env runs a file there; scripts
		// often cd "$(dirname "$0")").
		refs := scriptRefs(root, real, base)
		if dir := path.Dir(real); dir != base {
			refs = append(refs, scriptRefs(root, real, dir)...)
		}
		for _, ref := range refs {
			runRef(ref, link, base, depth+1)
		}
	}
	// repo adds what the repository gitDir (a .git directory, or the
	// one a .git file's gitdir: names) of the working tree top has git
	// run: what its configuration names, and what its hooks are or
	// call (link: the entry that protects it, for the message).
	repo := func(gitDir, top, link string) {
		hookDirs := []string{path.Join(gitDir, "hooks")}
		for _, ref := range gitConfigRefs(root, abs, gitDir, top) {
			runRef(ref.path, link+"/config", top, 1)
			if ref.hooks {
				if real, ok := workspaceRel(root, abs, ref.path); ok {
					hookDirs = append(hookDirs, real)
				}
			}
		}
		for _, hooks := range hookDirs {
			des, err := fs.ReadDir(root.FS(), hooks)
			if err != nil {
				continue
			}
			for i, de := range des {
				if i >= hookScanEntries {
					break
				}
				local := path.Join(hooks, de.Name())
				switch {
				case de.Type()&fs.ModeSymlink != 0:
					add(local, top)
				case de.Type().IsRegular() && !strings.HasSuffix(de.Name(), ".sample"):
					// git runs a hook from the top of its working tree.
					for _, ref := range scriptRefs(root, local, top) {
						runRef(ref, local, top, 1)
					}
				}
			}
		}
	}
	for rel := range set {
		fi, err := root.Lstat(rel)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			add(rel, path.Dir(rel))
		case fi.Mode().IsRegular():
			switch foldName(path.Base(rel)) {
			case ".git":
				// "gitdir: X": the repository is X (its config and
				// hooks), wherever in the workspace it is.
				if b := readSmallFile(root, rel, 4<<10); b != nil {
					if dir, ok := strings.CutPrefix(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), "gitdir:"); ok {
						gitDir := joinRef(path.Dir(rel), strings.TrimSpace(dir))
						addRef(gitDir, rel)
						if real, ok := workspaceRel(root, abs, gitDir); ok {
							repo(real, path.Dir(rel), rel)
						}
					}
				}
			case ".pre-commit-config.yaml", ".pre-commit-config.yml":
				for _, ref := range preCommitRefs(root, rel) {
					addRef(ref, rel)
				}
			case "lefthook.yml", ".lefthook.yml", "lefthook.yaml", ".lefthook.yaml", "lefthook.json", ".lefthook.json",
				"lefthook.jsonc", ".lefthook.jsonc", "lefthook-local.yml", ".lefthook-local.yml", "lefthook-local.yaml",
				".lefthook-local.yaml", "lefthook-local.json", ".lefthook-local.json", "lefthook-local.jsonc", ".lefthook-local.jsonc",
				"lefthook.toml", ".lefthook.toml", "lefthook-local.toml", ".lefthook-local.toml":
				top := path.Dir(rel)
				if foldName(path.Base(top)) == ".config" {
					top = path.Dir(top)
				}
				for _, ref := range lefthookRefs(root, abs, rel, top, 0) {
					runRef(ref.path, rel, ref.base, 1)
				}
			case ".envrc":
				// direnv runs it where it is: source_env, dotenv,
				// a script it sources.
				for _, ref := range scriptRefs(root, rel, path.Dir(rel)) {
					runRef(ref, rel, path.Dir(rel), 1)
				}
				for _, ref := range direnvRefs(root, rel) {
					addRef(ref, rel)
				}
				for _, ref := range direnvPathRefs(root, rel, path.Dir(rel)) {
					addRef(ref, rel)
				}
				for _, ref := range envrcSourcedPathRefs(root, abs, rel) {
					addRef(ref, rel)
				}
			}
		case fi.IsDir():
			husky := foldName(path.Base(rel)) == ".husky"
			vscode := foldName(path.Base(rel)) == ".vscode"
			if foldName(path.Base(rel)) == ".git" {
				// A repository's configuration names files of the
				// workspace git runs or reads: core.hooksPath (often
				// .githooks), include.path, commands (core.fsmonitor,
				// aliases, drivers); its hooks call scripts.
				repo(rel, path.Dir(rel), rel)
			}
			n := 0
			_ = fs.WalkDir(root.FS(), rel, func(local string, de fs.DirEntry, err error) error {
				if err != nil {
					return nil //nolint:nilerr // an unreadable directory is skipped
				}
				if n++; n > linkScanEntries {
					return fs.SkipAll
				}
				if de.IsDir() {
					if local != rel && (strings.Count(local[len(rel):], "/") > linkScanDepth || linkScanSkip[de.Name()]) {
						return fs.SkipDir
					}
					return nil
				}
				if de.Type()&fs.ModeSymlink != 0 {
					add(local, path.Dir(rel))
				} else if vscode && de.Type().IsRegular() && path.Dir(local) == rel && foldName(de.Name()) == "tasks.json" {
					// Tasks the editor runs on opening the folder.
					for _, ref := range folderOpenTaskRefs(root, local, path.Dir(rel)) {
						runRef(ref, local, path.Dir(rel), 1)
					}
				} else if husky && de.Type().IsRegular() && n <= hookScanEntries {
					// husky runs its hooks from the top of the
					// repository that holds .husky.
					for _, ref := range scriptRefs(root, local, path.Dir(rel)) {
						runRef(ref, local, path.Dir(rel), 1)
					}
				}
				return nil
			})
		}
	}
	return out
}

// gitRef is a workspace path a repository's configuration names
// (gitConfigRefs); hooks says it is its hooks directory.
type gitRef struct {
	path  string
	hooks bool
}

// gitCommandKeys are the configuration keys (the last part of a name,
// in any section) whose value is a command git runs: core.fsmonitor,
// core.editor, core.sshCommand, diff.<driver>.textconv,
// filter.<driver>.clean, credential.helper, gpg.program,
// remote.<name>.uploadpack (a local remote), sendemail.smtpServer ...
var gitCommandKeys = map[string]bool{
	"fsmonitor": true, "editor": true, "pager": true, "sshcommand": true, "askpass": true, "gitproxy": true,
	"external": true, "textconv": true, "command": true, "cmd": true, "driver": true, "clean": true,
	"smudge": true, "process": true, "helper": true, "program": true, "uploadpack": true, "receivepack": true,
	"packobjectshook": true, "smtpserver": true, "tocmd": true, "cccmd": true, "browser": true,
}

// gitConfigRefs returns the workspace paths the configuration of the
// repository dir (its git directory) names for git to run or read: its
// core.hooksPath (relative to the working tree's top, top), include and
// includeIf paths (relative to the configuration's directory), and the
// files the words of a command it runs name (core.fsmonitor, an alias
// beginning with "!", a driver: scriptRefs, from top). Paths under a
// home directory (~) are not the workspace's.
func gitConfigRefs(root *os.Root, abs, dir, top string) []gitRef {
	return gitConfigFileRefs(root, abs, path.Join(dir, "config"), top, 0)
}

// gitIncludeDepth bounds how deep the configuration files a repository's
// configuration includes are read (git's own bound is 10).
const gitIncludeDepth = 4

// gitConfigFileRefs is gitConfigRefs of the configuration file rel,
// included depth levels down: the files it includes (inside the
// workspace) are read too, for their commands and includes.
func gitConfigFileRefs(root *os.Root, abs, rel, top string, depth int) []gitRef {
	b := readSmallFile(root, rel, 1<<20)
	if b == nil {
		return nil
	}
	dir := path.Dir(rel)
	var out []gitRef
	section := ""
	for _, rawLine := range strings.Split(string(b), "\n") {
		rawLine = strings.TrimSpace(rawLine)
		line := rawLine
		if strings.HasPrefix(line, "[") {
			end := strings.IndexAny(line, " \t\"]")
			if end < 0 {
				end = len(line)
			}
			section = strings.ToLower(line[1:end])
			// A key may follow the header on its line.
			line = ""
			closing := "]"
			if strings.Contains(rawLine, "\"") {
				closing = "\"]" // [includeIf "gitdir:..."]
			}
			if j := strings.Index(rawLine, closing); j >= 0 {
				line = strings.TrimSpace(rawLine[j+len(closing):])
			}
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.ToLower(strings.TrimSpace(key))
		value = strings.TrimSpace(value)
		if strings.HasPrefix(value, "\"") {
			if j := strings.IndexByte(value[1:], '"'); j >= 0 {
				value = value[1 : j+1]
			}
		} else if j := strings.IndexAny(value, "#;"); j >= 0 {
			value = strings.TrimSpace(value[:j])
		}
		if value == "" || strings.HasPrefix(value, "~") {
			continue
		}
		switch {
		case section == "core" && key == "hookspath":
			if !path.IsAbs(value) {
				value = path.Join(top, value)
			}
			out = append(out, gitRef{path: value, hooks: true})
		case (section == "include" || section == "includeif") && key == "path":
			if !path.IsAbs(value) {
				value = path.Join(dir, value)
			}
			out = append(out, gitRef{path: value})
			if real, ok := workspaceRel(root, abs, value); ok && depth < gitIncludeDepth {
				out = append(out, gitConfigFileRefs(root, abs, real, top, depth+1)...)
			}
		case section == "alias" && strings.HasPrefix(value, "!"), section == "pager", gitCommandKeys[key]:
			for _, ref := range commandRefs(root, strings.TrimPrefix(value, "!"), top) {
				out = append(out, gitRef{path: ref})
			}
		}
	}
	return out
}

// hookScanEntries bounds the hooks read in one hooks directory.
const hookScanEntries = 256

// scriptRefs returns the workspace files the script rel (a hook, an
// .envrc: read up to 64 KiB, regular files only) names in its commands,
// from the directory base it runs in (commandRefs).
func scriptRefs(root *os.Root, rel, base string) []string {
	b := readSmallFile(root, rel, 64<<10)
	if b == nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		out = append(out, commandRefs(root, line, base)...)
	}
	return out
}

// scriptFollowDepth bounds how many scripts down the look for what a
// protected entry runs reads: a hook (or a link's target) is 1, a shell
// script it runs 2, one that script runs 3. Past it a script's commands
// are not read (docs/security.md).
const scriptFollowDepth = 4

// isShellScript says whether the workspace file rel is a shell script:
// its #! line names a shell (directly or through env), or, without one,
// its name ends in .sh. Only a shell script's words are read as commands:
// a Python or JavaScript file's name files they read more often than
// programs they run.
func isShellScript(root *os.Root, rel string) bool {
	b := readSmallFile(root, rel, 256)
	if b == nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	interp, ok := strings.CutPrefix(first, "#!")
	if !ok {
		return strings.HasSuffix(rel, ".sh")
	}
	f := strings.Fields(interp)
	if len(f) > 1 && path.Base(f[0]) == "env" {
		f = f[1:]
		if len(f) > 1 && f[0] == "-S" {
			f = f[1:]
		}
	}
	if len(f) == 0 {
		return false
	}
	switch path.Base(f[0]) {
	case "sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox":
		return true
	}
	return false
}

// direnvRefs returns the files direnv's standard library reads for the
// .envrc rel without naming them: `use flake` evaluates flake.nix (and
// its lock) of the .envrc's directory or of a local flake it names, and
// runs its shell's hook on every cd, evaluated again when the file
// changes, with no new `direnv allow`; `use nix` evaluates shell.nix or
// default.nix; `dotenv` with no file loads .env into the shell.
func direnvRefs(root *os.Root, rel string) []string {
	b := readSmallFile(root, rel, 64<<10)
	if b == nil {
		return nil
	}
	dir := path.Dir(rel)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "use" && f[1] == "flake":
			flake := dir
			if len(f) > 2 {
				ref, _, _ := strings.Cut(strings.TrimPrefix(strings.Trim(f[2], "'\""), "path:"), "#")
				if !strings.HasPrefix(ref, ".") && !path.IsAbs(ref) {
					continue // a remote flake (github:...): not the workspace's
				}
				flake = joinRef(dir, ref)
			}
			out = append(out, path.Join(flake, "flake.nix"), path.Join(flake, "flake.lock"))
		case len(f) >= 2 && f[0] == "use" && f[1] == "nix":
			out = append(out, path.Join(dir, "shell.nix"), path.Join(dir, "default.nix"))
		case len(f) == 1 && (f[0] == "dotenv" || f[0] == "dotenv_if_exists"):
			out = append(out, path.Join(dir, ".env"))
		}
	}
	return out
}

// direnvPathRefs returns the workspace paths the .envrc rel puts on the
// human's search paths, for every shell that cds into its directory: a
// directory it puts on PATH (`PATH_add bin`, `path_add PATH dir`,
// `export PATH="$PWD/tools:$PATH"`, `layout php`'s vendor/bin,
// `load_prefix dir`'s bin), every file of which runs for a command of
// its name (git, by every prompt that shows a branch), and the
// sitecustomize.py and usercustomize.py of a directory it puts on
// PYTHONPATH, which every Python imports at start; and the file or
// directory a configuration variable names (envrcConfigVars:
// KUBECONFIG, GIT_CONFIG_GLOBAL, DOCKER_CONFIG ...). Relative to the
// .envrc's directory, where direnv runs it ($PWD, ${PWD}, $(pwd) are
// it); an entry with another expansion, and the directory itself, are
// left out (session 19, attack19a).
func direnvPathRefs(root *os.Root, rel, dir string) []string {
	b := readSmallFile(root, rel, 64<<10)
	if b == nil {
		return nil
	}
	var out []string
	add := func(variable, entry string) {
		for _, pwd := range []string{"$PWD", "${PWD}", "$(pwd)"} {
			if entry == pwd {
				return
			}
			if rest, ok := strings.CutPrefix(entry, pwd+"/"); ok {
				entry = rest
				break
			}
		}
		// "$PWD/src${PYTHONPATH:+:$PYTHONPATH}": the old value after it.
		if i := strings.Index(entry, "${"+variable); i > 0 {
			entry = entry[:i]
		}
		if entry == "" || strings.ContainsAny(entry, "$`*?[~") {
			return
		}
		p := joinRef(dir, entry)
		if path.Clean(p) == path.Clean(dir) {
			return
		}
		switch variable {
		case "PATH":
			out = append(out, p)
		case "PYTHONPATH":
			out = append(out, path.Join(p, "sitecustomize.py"), path.Join(p, "usercustomize.py"))
		default: // envrcConfigVars: the file or directory itself
			out = append(out, p)
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ';' || r == '&' || r == '|' })
		for i := range f {
			f[i] = strings.NewReplacer(`"`, "", "'", "").Replace(f[i])
		}
		for i := 0; i < len(f); i++ {
			switch w := f[i]; {
			case w == "PATH_add":
				for _, e := range f[i+1:] {
					add("PATH", e)
				}
				i = len(f)
			case w == "path_add" && i+1 < len(f):
				for _, e := range f[i+2:] {
					add(f[i+1], e)
				}
				i = len(f)
			case w == "layout" && i+1 < len(f) && f[i+1] == "php":
				add("PATH", "vendor/bin")
			case w == "load_prefix" && i+1 < len(f):
				add("PATH", strings.TrimSuffix(f[i+1], "/")+"/bin")
			default:
				// export PATH=...:..., PYTHONPATH=... (export or not),
				// and the configuration variables.
				name, value, ok := strings.Cut(w, "=")
				if ok && (name == "PATH" || name == "PYTHONPATH" || envrcConfigVars[name]) {
					for _, e := range strings.Split(value, ":") {
						add(name, e)
					}
				}
			}
		}
	}
	return out
}

// envrcConfigVars are the variables through which an .envrc points the
// human's programs at configuration (a file, or a directory of it)
// that names commands they run: a kubeconfig's exec credential plugin,
// git's core.fsmonitor and aliases (GIT_CONFIG_GLOBAL, and hooks in
// GIT_TEMPLATE_DIR, copied by git init and clone), docker's credential
// helpers, cargo's rustc wrapper, AWS's credential_process, npm's and
// pip's configuration, a shell's start-up file (BASH_ENV, ENV), an
// interactive Python's PYTHONSTARTUP. A workspace path such a variable
// names is protected as a link target is (session 20).
var envrcConfigVars = map[string]bool{
	"KUBECONFIG": true, "GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG": true, "GIT_TEMPLATE_DIR": true,
	"DOCKER_CONFIG": true, "CARGO_HOME": true, "RUSTUP_HOME": true, "AWS_CONFIG_FILE": true, "AWS_SHARED_CREDENTIALS_FILE": true,
	"NPM_CONFIG_USERCONFIG": true, "NPM_CONFIG_GLOBALCONFIG": true, "PIP_CONFIG_FILE": true, "GOENV": true,
	"XDG_CONFIG_HOME": true, "GNUPGHOME": true, "CURL_HOME": true, "WGETRC": true, "INPUTRC": true,
	"BASH_ENV": true, "ENV": true, "PYTHONSTARTUP": true,
}

// envrcSourcedPathRefs returns what the scripts the .envrc rel sources
// (`source env/common.sh`, `. x`, direnv's `source_env tools/env`), and
// the scripts those source in turn (scriptFollowDepth), put on the
// human's search paths (direnvPathRefs): a PATH_add there is the
// .envrc's own. A file sourced runs with the .envrc's directory as its
// working directory, one source_env runs with its own: both are taken
// (session 20).
func envrcSourcedPathRefs(root *os.Root, abs, rel string) []string {
	top := path.Dir(rel)
	var out []string
	seen := map[string]bool{rel: true}
	var follow func(script string, depth int)
	follow = func(script string, depth int) {
		if depth > scriptFollowDepth {
			return
		}
		refs := scriptRefs(root, script, top)
		if dir := path.Dir(script); dir != top {
			refs = append(refs, scriptRefs(root, script, dir)...)
		}
		for _, ref := range refs {
			real, ok := workspaceRel(root, abs, ref)
			if !ok || seen[real] {
				continue
			}
			seen[real] = true
			if fi, err := root.Lstat(real); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			out = append(out, direnvPathRefs(root, real, top)...)
			if dir := path.Dir(real); dir != top {
				out = append(out, direnvPathRefs(root, real, dir)...)
			}
			follow(real, depth+1)
		}
	}
	follow(rel, 1)
	return out
}

// folderOpenTaskRefs returns the workspace files the VS Code tasks of
// rel (.vscode/tasks.json, JSONC, up to 256 KiB) that run when the
// folder base is opened ("runOptions": {"runOn": "folderOpen"}) name in
// their command and arguments (commandRefs, from base). A task run on
// demand is the human's choice, as a Makefile's target is.
func folderOpenTaskRefs(root *os.Root, rel, base string) []string {
	b := readSmallFile(root, rel, 256<<10)
	if b == nil {
		return nil
	}
	type command struct {
		Command any   `json:"command"`
		Args    []any `json:"args"`
	}
	var cfg struct {
		Tasks []struct {
			command
			Linux      *command `json:"linux"`
			RunOptions struct {
				RunOn string `json:"runOn"`
			} `json:"runOptions"`
		} `json:"tasks"`
	}
	if json.Unmarshal(stripJSONC(b), &cfg) != nil {
		return nil
	}
	words := func(c *command) string {
		var w []string
		for _, v := range append([]any{c.Command}, c.Args...) {
			switch v := v.(type) {
			case string:
				w = append(w, v)
			case map[string]any: // {"value": "...", "quoting": ...}
				if s, ok := v["value"].(string); ok {
					w = append(w, s)
				}
			}
		}
		return strings.Join(w, " ")
	}
	var out []string
	for _, t := range cfg.Tasks {
		if t.RunOptions.RunOn != "folderOpen" {
			continue
		}
		out = append(out, commandRefs(root, words(&t.command), base)...)
		if t.Linux != nil {
			out = append(out, commandRefs(root, words(t.Linux), base)...)
		}
	}
	return out
}

// stripJSONC makes JSON of JSON with comments (// and /* */) and
// trailing commas, as VS Code's files are.
func stripJSONC(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			out = append(out, c)
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
			out = append(out, c)
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, '\n')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			i += 2
			for i+1 < len(b) && (b[i] != '*' || b[i+1] != '/') {
				i++
			}
			i++ // the '/'
			out = append(out, ' ')
		case c == ']' || c == '}':
			// A comma before the closing bracket (spaces between) goes.
			j := len(out) - 1
			for j >= 0 && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j--
			}
			if j >= 0 && out[j] == ',' {
				out[j] = ' '
			}
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	return out
}

// commandRefs returns the words of the shell command line that name a
// file of the workspace (from the directory base; an absolute word is
// kept for linkTargets to take from the workspace's path): a script it
// runs ("./scripts/check.sh", "sh tools/lint.sh", "source_env
// scripts/env.sh"). A word names a file when one is there now, or,
// whether or not it is, when it is the operand of a word that sources
// or runs a file (sourceWords), or of a file test ("[ -f x ] && . x"),
// or starts with "./" or "../": what a protected file runs only if it
// exists (direnv's "source_env_if_exists .envrc.local") is protected
// before it does. Words with expansions, globs, assignments and options
// are left out, and a word that names a directory (cd src) or, outside
// those places, nothing protects nothing: it is a heuristic, which what a
// named script runs in turn escapes (docs/security.md).
func commandRefs(root *os.Root, line, base string) []string {
	var out []string
	prev := ""
	for _, w := range strings.FieldsFunc(line, func(r rune) bool {
		return r == ' ' || r == '\t' || strings.ContainsRune(";|&()<>'\"`", r)
	}) {
		sure := sourceWords[path.Base(prev)] || fileTests[prev] || strings.HasPrefix(w, "./") || strings.HasPrefix(w, "../")
		prev = w
		if w == "" || w[0] == '-' || w[0] == '~' || strings.ContainsAny(w, "$*?[=\\") {
			continue
		}
		p := joinRef(base, w)
		if path.IsAbs(p) {
			out = append(out, p)
			continue
		}
		fi, err := root.Lstat(p)
		switch {
		case err == nil && (fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0):
			out = append(out, p)
		case sure && errors.Is(err, fs.ErrNotExist) && w != "." && w != "..":
			out = append(out, p)
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			// Through a link that leads out of the workspace (a
			// checkout shared between projects): its links on the way
			// are protected (linkTargets).
			out = append(out, p)
		}
	}
	return out
}

// sourceWords are the words (a command's base name) whose operand is a
// file they run or read into the shell: the shell's own, direnv's
// standard library, interpreters.
var sourceWords = map[string]bool{
	".": true, "source": true, "exec": true, "sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true,
	"source_env": true, "source_env_if_exists": true, "dotenv": true, "dotenv_if_exists": true,
	"python": true, "python3": true, "node": true, "perl": true, "ruby": true, "bun": true, "deno": true,
}

// fileTests are the test operators whose operand is a file ("[ -f x ]").
var fileTests = map[string]bool{"-f": true, "-e": true, "-x": true, "-r": true, "-s": true}

// workspaceRel is the workspace path (clean, links inside the workspace
// followed: resolveWithin) that target names, target being relative to
// the top or absolute (abs: the workspace's absolute path); ok is false
// when it leads out of the workspace.
func workspaceRel(root *os.Root, abs, target string) (string, bool) {
	return workspaceRelVia(root, abs, target, nil)
}

// workspaceRelVia is workspaceRel that calls via with the workspace path
// of each symbolic link it follows (resolveVia).
func workspaceRelVia(root *os.Root, abs, target string, via func(link string)) (string, bool) {
	if path.IsAbs(target) {
		r, err := filepath.Rel(abs, filepath.FromSlash(target))
		if abs == "" || err != nil {
			return "", false
		}
		target = filepath.ToSlash(r)
	}
	target = path.Clean(target)
	if target == ".." || strings.HasPrefix(target, "../") {
		return "", false
	}
	real, ok := resolveVia(root, abs, target, via)
	return filepath.ToSlash(real), ok
}

// readSmallFile reads at most limit bytes of the workspace file rel:
// never blocking on a FIFO a program made there (sub/.git/config), nor
// reading anything but a regular file (nil then).
func readSmallFile(root *os.Root, rel string, limit int64) []byte {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil
	}
	return b
}

// joinRef is the workspace path ref names from the directory dir: ref
// itself when absolute (linkTargets takes it from the workspace's path).
func joinRef(dir, ref string) string {
	if path.IsAbs(ref) {
		return ref
	}
	return path.Join(dir, ref)
}

// preCommitRefs returns the workspace paths the pre-commit configuration
// rel runs: the entry of a local hook whose language is script (a path
// from the repository's top, the configuration's directory), and the
// words of other local entries that name a file there now ("python
// scripts/check.py", "./lint.sh"). A configuration that does not parse
// names none.
func preCommitRefs(root *os.Root, rel string) []string {
	b := readSmallFile(root, rel, 256<<10)
	if b == nil {
		return nil
	}
	var cfg struct {
		Repos []struct {
			Repo  string `yaml:"repo"`
			Hooks []struct {
				Entry    string `yaml:"entry"`
				Language string `yaml:"language"`
			} `yaml:"hooks"`
		} `yaml:"repos"`
	}
	if yaml.Unmarshal(b, &cfg) != nil {
		return nil
	}
	top := path.Dir(rel)
	var out []string
	for _, r := range cfg.Repos {
		if r.Repo != "local" {
			continue
		}
		for _, h := range r.Hooks {
			words := strings.Fields(h.Entry)
			if len(words) == 0 {
				continue
			}
			if h.Language == "script" {
				out = append(out, joinRef(top, words[0]))
				continue
			}
			for _, w := range words {
				if strings.HasPrefix(w, "-") || !strings.Contains(w, "/") {
					continue
				}
				p := joinRef(top, w)
				if path.IsAbs(p) {
					out = append(out, p)
				} else if _, err := root.Lstat(p); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// lefthookRef is a workspace path a lefthook configuration names: a file
// run from base (base "": a file or directory it reads).
type lefthookRef struct{ path, base string }

// lefthookExtendsDepth bounds how deep the configurations a lefthook
// configuration extends are read.
const lefthookExtendsDepth = 2

// lefthookRefs returns what the lefthook configuration rel (YAML, JSON
// with comments or TOML, up to 256 KiB; the repository's top: top) runs or
// reads: the files the words of its commands name (run:, a hook's or
// command's files: command, a script's runner:, the lefthook: command;
// from a command's root: when it has one), the rc file it sources before
// each hook, its source_dir and source_dir_local (the directories of its
// scripts: .lefthook/ by default, itself protected), and the
// configurations it extends, read in turn (lefthookExtendsDepth).
func lefthookRefs(root *os.Root, abs, rel, top string, depth int) []lefthookRef {
	b := readSmallFile(root, rel, 256<<10)
	if b == nil {
		return nil
	}
	if strings.HasSuffix(strings.ToLower(rel), ".jsonc") || strings.HasSuffix(strings.ToLower(rel), ".json") {
		b = stripJSONC(b)
	}
	var doc any
	if strings.HasSuffix(strings.ToLower(rel), ".toml") {
		m, ok := parseTOML(b)
		if !ok {
			return nil
		}
		doc = m
	} else if yaml.Unmarshal(b, &doc) != nil {
		return nil
	}
	var out []lefthookRef
	file := func(v any) {
		if s, ok := v.(string); ok && s != "" && !strings.HasPrefix(s, "~") {
			out = append(out, lefthookRef{path: joinRef(top, s)})
		}
	}
	var walk func(v any, base string, n int)
	walk = func(v any, base string, n int) {
		if n > 16 {
			return
		}
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				walk(e, base, n+1)
			}
		case map[string]any:
			if r, ok := v["root"].(string); ok && r != "" {
				base = joinRef(top, r)
			}
			for k, e := range v {
				switch k {
				case "run", "files", "runner", "lefthook":
					if s, ok := e.(string); ok {
						for _, ref := range commandRefs(root, s, base) {
							out = append(out, lefthookRef{path: ref, base: base})
						}
					}
				case "rc", "source_dir", "source_dir_local":
					file(e)
				case "extends":
					list, _ := e.([]any)
					if s, ok := e.(string); ok {
						list = []any{s}
					}
					for _, x := range list {
						file(x)
						s, ok := x.(string)
						if !ok || depth >= lefthookExtendsDepth {
							continue
						}
						if real, ok := workspaceRel(root, abs, joinRef(top, s)); ok {
							out = append(out, lefthookRefs(root, abs, real, top, depth+1)...)
						}
					}
				default:
					walk(e, base, n+1)
				}
			}
		}
	}
	walk(doc, top, 0)
	return out
}

// addPath records the entry at the workspace path rel (root: the top),
// not following a link; one that is not there is left out.
func (s protectedSet) addPath(root *os.Root, rel string) {
	if fi, err := root.Lstat(rel); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s[rel] = entryID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is not uint64 everywhere
		}
	}
}

// linkTargetCache is the link targets of the workspace's last scan
// (linkTargets), for the fs tools, and why that scan could not read the
// workspace whole ("" when it did).
type linkTargetCache struct {
	mu      sync.Mutex
	at      time.Time
	targets map[string]string
	cut     string
	// whole is the targets of the last scan that read the workspace
	// whole (nil: none yet).
	whole map[string]string
}

// record keeps the targets a scan found, and why it could not read the
// workspace whole (cut). A scan that met a change (another program
// renaming directories while it ran: scanChanged) may have missed a
// protected entry that moved: the targets of the last whole scan are
// added to what it found (protected links are made by humans: a
// program's own are moved aside after it). A scan cut short otherwise
// (more names than the scan reads, directories nested deeper than it
// goes, an unreadable top) leaves the targets unknown: the fs tools
// refuse to change the workspace until it can be read whole, as a
// program that may write is refused.
func (c *linkTargetCache) record(targets map[string]string, cut string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case cut == "":
		c.whole = targets
	case strings.HasPrefix(cut, scanChanged) && c.whole != nil:
		merged := maps.Clone(c.whole)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, targets)
		targets, cut = merged, ""
	default:
		targets = nil
	}
	c.at, c.targets, c.cut = time.Now(), targets, cut
}

// linkTargets returns where the protected entries of the workspace lead
// through symbolic links (target -> link), from a scan at most
// linkTargetsFresh old, and why that scan could not read the workspace
// whole: then the targets are not known (a protected entry the scan did
// not reach leads somewhere too), and nil.
func (w *workspace) linkTargets() (map[string]string, string) {
	w.targets.mu.Lock()
	if !w.targets.at.IsZero() && time.Since(w.targets.at) < linkTargetsFresh {
		t, cut := w.targets.targets, w.targets.cut
		w.targets.mu.Unlock()
		return t, cut
	}
	w.targets.mu.Unlock()
	if _, cut := w.protectedNames(w.protected.scanBudget()); strings.HasPrefix(cut, workspaceUnreadable) {
		w.targets.record(nil, cut) // otherwise recorded by the scan
	}
	w.targets.mu.Lock()
	defer w.targets.mu.Unlock()
	return w.targets.targets, w.targets.cut
}

// linkTargetOf returns the protected link whose target is the workspace
// path real or lies under it (a directory holding it), or that leads to
// a directory holding real; "" when none. cut is why the scan could not
// read the workspace whole: then no target is known, and none is
// returned.
func (w *workspace) linkTargetOf(real string) (target, link, cut string) {
	real = filepath.ToSlash(real)
	targets, cut := w.linkTargets()
	if cut != "" {
		return "", "", cut
	}
	for t, l := range targets {
		if real == t || strings.HasPrefix(real, t+"/") || strings.HasPrefix(t, real+"/") {
			return t, l, ""
		}
	}
	return "", "", ""
}

// scanAttempts is how many times a scan that met a change of the
// workspace (scanChanged: another program renaming directories) is done
// before it is given up: then a program that may write is not run, and
// after one the change is flagged and remembered (unmovedProtected).
const scanAttempts = 4

// entryID is a file system entry's identity: its device and inode.
type entryID struct{ dev, ino uint64 }

// protectedSet is the protected entries of the workspace, by workspace
// path, with their identities: a program that renames a protected
// entry's parent and makes a new one under the old name leaves the name,
// not the entry.
type protectedSet map[string]entryID

// add records the entry name of d (the workspace path rel), not
// following a link; one that is gone is left out.
func (s protectedSet) add(d int, name, rel string) {
	var st unix.Stat_t
	if unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		s[rel] = entryID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is not uint64 everywhere
	}
}

// newSince reports whether the entry name (identity id) of s, the
// entries after a program ran, is new since before: not there before
// under that name, and not an entry of before that the program moved
// (a directory renamed with its parent: the same entry, its old name
// gone). A second name of an entry whose first is still there (a hard
// link) is new.
func (s protectedSet) newSince(before protectedSet, byID map[entryID]string, name string, id entryID) bool {
	if was, ok := before[name]; ok && was == id {
		return false
	}
	if old, ok := byID[id]; ok && old != name {
		if now, still := s[old]; !still || now != id {
			return false // moved
		}
	}
	return true
}

// matchName reports whether an entry named name is protected, its
// directories being none: match for a path of one component.
func (p *protectedPaths) matchName(name string) bool {
	if strings.ContainsRune(name, '\\') {
		return p.match(name) != "" // a Windows-style path in one name, as the fs tools take it
	}
	f := foldName(name)
	if j := strings.IndexByte(f, ':'); j > 0 {
		f = f[:j]
	}
	return slices.Contains(p.dirs, f) || slices.Contains(p.files, f)
}

// workspaceUnreadable begins the reason of a scan that could not open
// the workspace itself.
const workspaceUnreadable = "the workspace cannot be read: "

func displayRel(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// moveNewProtected renames aside the protected entries of the workspace
// that are new since before (the whole workspace's, as protectedNames
// found them before the program ran; by name and identity,
// protectedSet.newSince; the entry itself, a link included:
// nothing is followed or deleted), and returns where each went, and ""
// or why the scan after could not read everything (then one may remain:
// flagged to the caller and logged). Renamed, not removed: one made
// meanwhile by someone else than the program (a human's git init in the
// same workspace) loses nothing. who names what ran, for the log.
func (w *workspace) moveNewProtected(ctx context.Context, log *slog.Logger, before protectedSet, who string) (map[string]string, string) {
	if before == nil {
		return nil, "nothing is known of the workspace before" // never called so
	}
	moved, unmoved, scanCut, cut := w.moveNew(ctx, log, before, who)
	for name, id := range unmoved {
		w.unmoved.add(name, id)
	}
	if scanCut != "" {
		// What the program made may be where the scan did not look (a
		// directory renamed while it ran): the next scan before a
		// program would take it for one that was there. Remembered:
		// until a scan reads the whole workspace, and what is new since
		// before is moved aside, no program that may write runs.
		w.unmoved.since(before)
	}
	return moved, cut
}

// moveNew moves aside what is new since before (moveNewProtected): it
// returns where each went, the entries that could not be moved, why the
// scan could not read everything (scanCut), and the whole reason to
// flag (cut: scanCut and each entry not moved).
func (w *workspace) moveNew(ctx context.Context, log *slog.Logger, before protectedSet, who string) (moved map[string]string, unmoved protectedSet, scanCut, cut string) {
	// Unbounded: what the program made is found wherever it is, at a
	// cost proportional to what it made within its deadline and limits.
	after, scanCut := w.protectedNames(-1)
	if scanCut != "" {
		log.ErrorContext(ctx, "SECURITY: the workspace could not be scanned whole for protected paths after a program ran; one it made may remain; programs that may write are refused until it is", "by", who, "reason", scanCut)
	}
	cut = scanCut
	byID := make(map[entryID]string, len(before))
	for name, id := range before {
		byID[id] = name
	}
	var links map[string]string
	for name, id := range after {
		if !after.newSince(before, byID, name, id) {
			continue
		}
		if w.protected.match(name) == "" {
			// What a protected link leads to (linkTargets), made or
			// replaced: moved aside only when the link was there
			// before. A link the program made is moved aside itself,
			// and where it led stays the program's own file (or a
			// program could have any entry of the workspace moved).
			if links == nil {
				links = w.protected.linkTargets(w.root, w.abs, after)
			}
			if !linkWasThere(before, after, links[name]) {
				continue
			}
		}
		aside, err := w.moveAside(name)
		if err != nil {
			// Left so, the next scan before a program would take it for
			// one that was there: remembered, and no program that may
			// write runs until it is moved (retryUnmoved).
			log.ErrorContext(ctx, "SECURITY: a protected path was made that could not be moved aside; programs that may write are refused until it is", "by", who, "path", name, "error", err)
			if unmoved == nil {
				unmoved = protectedSet{}
			}
			unmoved[name] = id
			why := "protected entry " + name + " could not be moved aside: " + err.Error()
			if cut == "" {
				cut = why
			} else {
				cut += "; " + why
			}
			continue
		}
		log.WarnContext(ctx, "a protected path was made; it was moved aside", "by", who, "path", name, "to", aside)
		if moved == nil {
			moved = map[string]string{}
		}
		moved[name] = aside
	}
	return moved, unmoved, scanCut, cut
}

// linkWasThere reports whether the protected entry that makes a link
// target protected (link: the link itself, or what holds it: the .git of
// a hook or of a repository's config) is the same entry after a program
// as before.
func linkWasThere(before, after protectedSet, link string) bool {
	for n := link; n != "." && n != "/" && n != ""; n = path.Dir(n) {
		if was, ok := before[n]; ok {
			return after[n] == was
		}
	}
	return false
}

// moveAside renames the workspace entry name, in its directory reached
// without following a link, to a fresh name nothing reads, and returns
// its path.
func (w *workspace) moveAside(name string) (string, error) {
	if moveAsideFault != nil {
		if err := moveAsideFault(name); err != nil {
			return "", err
		}
	}
	tmp, err := tempName(".")
	if err != nil {
		return "", err
	}
	pd, base, err := w.openParent(name)
	if err != nil {
		return "", err
	}
	defer pd.close()
	aside := strings.TrimSuffix(tmp, ".tmp") + "-protected-" + strings.TrimLeft(base, ".")
	if len(aside) > maxNameBytes {
		// A long protected name (fs.protected_paths, or a folded one:
		// trailing spaces) must not make the rename fail.
		aside = strings.ToValidUTF8(aside[:maxNameBytes], "")
	}
	err = pd.rename(base, pd, aside, true)
	if errors.Is(err, unix.EACCES) {
		// A program took the executor's write permission on the
		// directory away (modes.go): given for the rename, then its
		// mode as it was.
		if mode, changed, cerr := giveBack(pd.fd, modeRename); cerr == nil && changed {
			err = pd.rename(base, pd, aside, true)
			_ = setMode(pd.fd, mode)
		}
	}
	if err != nil {
		return "", err
	}
	return path.Join(filepath.ToSlash(filepath.Dir(name)), aside), nil
}

// checkProtected refuses a change of the workspace path name (clean,
// relative; p is the path as given): it is protected itself, or, after
// following symbolic links inside the workspace, it lands on a protected
// path.
func (w *workspace) checkProtected(p, name string) *xctv1.Error {
	return w.checkProtectedAs(p, name, true)
}

// checkProtectedAs is checkProtected; with targets false it does not
// refuse where protected links lead (a program's operand: the sandbox
// mounts those read-only).
func (w *workspace) checkProtectedAs(p, name string, targets bool) *xctv1.Error {
	if hit := w.protected.match(name); hit != "" {
		return protectedErr(p, hit)
	}
	real, ok := w.resolve(name)
	if ok && real != name {
		if hit := w.protected.match(real); hit != "" {
			return protectedErr(p, hit)
		}
	}
	if !targets {
		return nil
	}
	if !ok {
		real = name
	}
	for _, n := range []string{name, real} {
		if tree := w.installedPackages(n); tree != "" {
			return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"%q is in installed packages (%s): hooks, editors and the next command run them, and no diff shows them; the fs tools do not change them (a program that installs packages may)", p, tree),
				map[string]any{"path": p, "installed_packages": tree})
		}
		if dir := w.toolCache(n); dir != "" {
			return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"%q is in %s, a directory a tool tagged as its cache (CACHEDIR.TAG): tools run what they keep there without rebuilding it (cargo test its test binaries), and no diff shows it; the fs tools do not change it (the tool may)", p, dir),
				map[string]any{"path": p, "tool_cache": dir})
		}
		if hit := compiledPython(n); hit != "" {
			return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"%q is compiled Python (%s): Python runs it in place of its source, or of a module it shadows, and no diff shows it; the fs tools do not change it (Python makes it)", p, hit),
				map[string]any{"path": p, "compiled_python": hit})
		}
		target, link, cut := w.linkTargetOf(n)
		if cut != "" {
			return w.targetsUnknown(p, cut)
		}
		if target != "" {
			return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
				"%q is where the protected link %q leads (%s): what a protected entry runs or reads is protected as it is", p, link, target),
				map[string]any{"path": p, "protected": link, "target": target})
		}
	}
	return nil
}

// targetsUnknown refuses a change of the fs tools (of the path p) in a
// workspace the scan for protected entries could not read whole (why:
// cut): where the protected entries it did not reach lead through links
// (a hook's script) is not known, and would be writable. On main a write
// program filled the workspace past fs.protected_scan_entries, and then
// fs.write changed the script a git hook links to. A program that may
// write is refused in such a workspace too (scanRefused).
func (w *workspace) targetsUnknown(p, cut string) *xctv1.Error {
	if strings.HasPrefix(cut, workspaceUnreadable) || strings.HasPrefix(cut, scanChanged) {
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"%q was not changed: the workspace could not be scanned for protected entries (%s); try again", p, cut),
			map[string]any{"path": p, "reason": cut, "outcome_unknown": false})
	}
	budget := w.protected.scanBudget()
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%q was not changed: the workspace cannot be scanned whole for protected entries (%s; the scan reads at most %d names, fs.protected_scan_entries), "+
			"so where their links lead is not known, and would be writable", p, cut, budget),
		map[string]any{"path": p, "reason": cut, "limit": budget, "outcome_unknown": false})
}

// Installed packages. The workspace's installed packages run for the
// next human and no diff shows them (they are ignored by git): husky's
// `npx lint-staged` runs node_modules/lint-staged; the hook `pre-commit
// install` writes runs the pre_commit module of an in-project virtual
// environment, whose every Python (an editor's on opening the folder)
// runs its site-packages' .pth files, and whose bin/activate VS Code's
// terminals source; Yarn runs the release in .yarn/releases (yarnPath)
// and its Plug'n'Play loader. The fs tools do not change them (write,
// delete, move either end); programs may (npm install, pip install: a
// human approves a program that may write), so they are not protected
// paths, which programs see read-only.
var (
	installedPackageDirs  = map[string]bool{"node_modules": true, "site-packages": true, "dist-packages": true, ".yarn": true}
	installedPackageFiles = map[string]bool{".pnp.cjs": true, ".pnp.js": true, ".pnp.loader.mjs": true}
	// venvDirs are what a virtual environment (a directory holding
	// pyvenv.cfg) holds of programs and packages.
	venvDirs = map[string]bool{"bin": true, "lib": true, "lib64": true, "include": true, "scripts": true}
	// venvScriptDirs and venvActivate are where a virtual environment
	// keeps its activation scripts, which a human (or an editor's
	// terminal) sources, and their names (folded).
	venvScriptDirs = map[string]bool{"bin": true, "scripts": true}
	venvActivate   = map[string]bool{"activate": true, "activate.csh": true, "activate.fish": true, "activate.nu": true,
		"activate.ps1": true, "activate.bat": true, "activate_this.py": true}
)

// installedPackages returns the installed packages (a directory, or a
// loader's file) the clean workspace path name is in, or "".
func (w *workspace) installedPackages(name string) string {
	parts := strings.Split(filepath.ToSlash(name), "/")
	for i, part := range parts {
		f := foldName(part)
		if installedPackageDirs[f] || (i == len(parts)-1 && installedPackageFiles[f]) {
			return strings.Join(parts[:i+1], "/")
		}
	}
	// A virtual environment's own files, wherever they are: one that
	// does not exist yet (a fresh clone) is not the fs tools' to make
	// (session 20: .venv/bin/activate, which the next human sources).
	if f := foldName(parts[len(parts)-1]); f == "pyvenv.cfg" ||
		(len(parts) > 1 && venvScriptDirs[foldName(parts[len(parts)-2])] && venvActivate[f]) {
		return name + " (a Python virtual environment's own file: python -m venv makes it)"
	}
	// A virtual environment at any level (the workspace's top too):
	// its pyvenv.cfg, and what is under its bin/, lib/ ...; a name that
	// is the environment itself (moved or deleted whole) too.
	for i := len(parts); i >= 0; i-- {
		env := path.Join(parts[:i]...)
		if env == "" {
			env = "."
		}
		fi, err := w.root.Lstat(path.Join(env, "pyvenv.cfg"))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		switch {
		case i == len(parts) && env != ".", // the environment itself
			i == len(parts)-1 && foldName(parts[i]) == "pyvenv.cfg",
			i < len(parts) && venvDirs[foldName(parts[i])]:
			return env + " (a Python virtual environment)"
		}
	}
	return ""
}

// cacheDirTag is the file by which a tool tags a directory as its
// cache or build output (the Cache Directory Tagging specification):
// cargo's target/, pytest's .pytest_cache, ruff's, mypy's, direnv's.
const cacheDirTag = "cachedir.tag"

// toolCache returns the directory tagged as a tool's cache (one holding
// a regular CACHEDIR.TAG, below the workspace's top) that the clean
// workspace path name is in or is, or, for a name that is a
// CACHEDIR.TAG, that name: a tag is a tool's to make. What a tool keeps
// there it runs again without rebuilding it when its sources have not
// changed: `cargo test` runs target/debug/deps/<crate>-<hash>, which
// fs.write replaced keeping its mode (session 19, attack19a).
func (w *workspace) toolCache(name string) string {
	parts := strings.Split(filepath.ToSlash(name), "/")
	if foldName(parts[len(parts)-1]) == cacheDirTag {
		return name
	}
	for i := 1; i <= len(parts); i++ {
		dir := path.Join(parts[:i]...)
		if fi, err := w.root.Lstat(path.Join(dir, "CACHEDIR.TAG")); err == nil && fi.Mode().IsRegular() {
			return dir
		}
	}
	return ""
}

// compiledPython returns the compiled Python the clean workspace path
// name is or is in (a __pycache__ directory, a .pyc or .pyo file), or
// "". Python runs __pycache__/util.cpython-310.pyc in place of util.py
// (an unchecked hash-based one is never compared with its source), and a
// json.pyc with no source next to a script in place of the standard
// library's json (the script's directory comes first on sys.path); git
// ignores both in every Python project, so no diff shows them. Python
// 3.10's magic number is valid UTF-8, so fs.write's text can be such a
// file (session 19, attack19a). Programs may write them (Python does).
func compiledPython(name string) string {
	parts := strings.Split(filepath.ToSlash(name), "/")
	for i, part := range parts {
		f := foldName(part)
		if f == "__pycache__" || (i == len(parts)-1 && (strings.HasSuffix(f, ".pyc") || strings.HasSuffix(f, ".pyo"))) {
			return strings.Join(parts[:i+1], "/")
		}
	}
	return ""
}

func protectedErr(p, hit string) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%q is a protected path (%s): the fs tools never change version control metadata, XCT's state, the configuration files of the programs the executor can run, or the files that run code for whoever opens the workspace next", p, hit),
		map[string]any{"path": p, "protected": hit})
}

// resolve follows the symbolic links on the workspace path name, inside
// the workspace, and returns where it really leads (relative, clean). A
// missing tail is kept as written; ok is false when a link leads out or
// there are too many.
func (w *workspace) resolve(name string) (string, bool) { return resolveIn(w.root, name) }

// resolveIn is resolve in the workspace whose top is root.
func resolveIn(root *os.Root, name string) (string, bool) { return resolveWithin(root, "", name) }

// resolveWithin is resolveIn that also follows a link written by an
// absolute path inside the workspace, whose absolute path is abs ("":
// an absolute link is not followed, ok false). The look for where
// protected links lead takes it: a hook linked to scripts/pre-commit,
// itself linked to "$PWD/scripts/check.sh", runs check.sh.
func resolveWithin(root *os.Root, abs, name string) (string, bool) {
	return resolveVia(root, abs, name, nil)
}

// resolveVia is resolveWithin that calls via with the workspace path of
// each symbolic link it meets on the way, also one that leads out.
func resolveVia(root *os.Root, abs, name string, via func(link string)) (string, bool) {
	parts := strings.Split(filepath.ToSlash(filepath.Clean(name)), "/")
	var done []string
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case ".", "":
			continue
		case "..":
			if len(done) == 0 {
				return "", false
			}
			done = done[:len(done)-1]
			continue
		}
		cur := strings.Join(append(slices.Clone(done), part), "/")
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			done = append(done, part)
			done = append(done, parts...)
			return filepath.Clean(strings.Join(done, "/")), true
		}
		if err != nil {
			return "", false
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, part)
			continue
		}
		if hops++; hops > 40 {
			return "", false
		}
		if via != nil {
			via(cur)
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", false
		}
		if filepath.IsAbs(target) {
			r, err := filepath.Rel(abs, filepath.Clean(target))
			if abs == "" || err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				return "", false
			}
			target, done = r, nil // from the top
		}
		parts = append(strings.Split(filepath.ToSlash(target), "/"), parts...)
	}
	if len(done) == 0 {
		return ".", true
	}
	return strings.Join(done, "/"), true
}

// treeProtected refuses to move a directory that holds a protected path
// (moving "sub" moves "sub/.git/config" too): the directory base of pd,
// the workspace path name (p as given), fi its lstat. The walk is
// confined to that directory, opened without following a link.
func (w *workspace) treeProtected(p, name string, pd *wsDir, base string, fi fs.FileInfo) *xctv1.Error {
	_, e := w.treeProtectedHeight(p, name, pd, base, fi)
	return e
}

// treeProtectedHeight is treeProtected, and also returns how many
// directories deep the tree goes below its top (0: none below it).
func (w *workspace) treeProtectedHeight(p, name string, pd *wsDir, base string, fi fs.FileInfo) (int, *xctv1.Error) {
	td, err := pd.sub(base)
	if err != nil {
		return 0, w.refuse(p, name, false, err)
	}
	defer td.close()
	if tfi, err := td.lstat("."); err != nil || !sameEntry(fi, tfi) {
		return 0, pathErr(wire.CodeToolFailure, p, "%q changed while it was being checked; nothing was done", p)
	}
	root, err := td.root()
	if err != nil {
		return 0, w.fail(p, err)
	}
	defer func() { _ = root.Close() }()
	top := filepath.ToSlash(name)
	var found *xctv1.Error
	count, height := 0, 0
	err = fs.WalkDir(root.FS(), ".", func(local string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() && local != "." {
			height = max(height, strings.Count(local, "/")+1)
		}
		rel := path.Join(top, local)
		if count++; count > maxDeleteEntries {
			found = wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"%q holds more than %d entries: too many to check for protected paths", p, maxDeleteEntries),
				map[string]any{"path": p, "limit": maxDeleteEntries})
			return fs.SkipAll
		}
		if hit := w.protected.match(rel); hit != "" {
			found = protectedErr(p+" ("+rel+")", hit)
			return fs.SkipAll
		}
		return nil
	})
	if found != nil {
		return 0, found
	}
	if err != nil {
		return 0, w.fail(p, err)
	}
	return height, nil
}

// nestedTooDeep refuses an fs tool's change that would put a directory
// deeper than the protected-path scan reads (protectScanDepth): the
// workspace could no longer be scanned whole, and every program or MCP
// tool that may write, of every run, would be refused until it is
// undone. depth is how deep the deepest directory would be (components
// of its workspace path).
func nestedTooDeep(p string, depth int) *xctv1.Error {
	if depth <= protectScanDepth {
		return nil
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
		"%q would nest directories %d deep, more than the %d the scan for protected paths reads: programs that may write would be refused in the workspace", p, depth, protectScanDepth),
		map[string]any{"path": p, "depth": depth, "limit": protectScanDepth})
}

// pathDepth is the number of components of the clean workspace path
// name ("." has none).
func pathDepth(name string) int {
	if name == "." || name == "" {
		return 0
	}
	return strings.Count(filepath.ToSlash(name), "/") + 1
}

// moveAsideFault, set by tests only, makes moving aside name fail as a
// full disk does (the name aside is longer: ext4 may need a new
// directory block for it).
var moveAsideFault func(name string) error

// maxNameBytes is the longest name of one entry (NAME_MAX).
const maxNameBytes = 255

// unmovedProtected are the protected entries a program made that could
// not be moved aside after it ran (a full disk: the longer name needs a
// new directory block), by workspace path with their identities.
type unmovedProtected struct {
	mu  sync.Mutex
	set protectedSet
	// before, when not nil, is what a scan found before a program whose
	// scan after it could not read the whole workspace (a directory
	// renamed meanwhile, one it could not read): what is new since is
	// moved aside once a scan reads everything (retryUnmoved).
	before protectedSet
	// store, once the executor has its step store, keeps the memory
	// where a restarted executor finds it (keep, restore); log says when
	// it could not be written.
	store StepStore
	log   *slog.Logger
	top   uint64 // the workspace top's inode
}

// unmovedBlob is the name, in the step store's blobs, of what
// unmovedProtected remembers (no step's blob: those end in
// ".<attempt>.response" or ".<attempt>.compensation").
const unmovedBlob = "xct-executor.protected-unmoved"

// unmovedRecord is what is kept of unmovedProtected: paths and inodes
// (a device number is not kept: the volume may be mounted with another
// after a restart; the workspace's is taken then).
type unmovedRecord struct {
	// Workspace is the inode of the workspace's top: a record of
	// another workspace (the volume replaced) is not taken.
	Workspace uint64             `json:"workspace"`
	Unmoved   map[string]uint64  `json:"unmoved,omitempty"`
	Before    *map[string]uint64 `json:"before,omitempty"`
}

// keep writes what is remembered to the store (nothing without one); u.mu
// is held.
func (u *unmovedProtected) keep() {
	if u.store == nil {
		return
	}
	inodes := func(s protectedSet) map[string]uint64 {
		m := make(map[string]uint64, len(s))
		for name, id := range s {
			m[name] = id.ino
		}
		return m
	}
	rec := unmovedRecord{Workspace: u.top, Unmoved: inodes(u.set)}
	if u.before != nil {
		b := inodes(u.before)
		rec.Before = &b
	}
	data, err := json.Marshal(rec)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		err = u.store.PutBlob(ctx, unmovedBlob, data)
	}
	if err != nil && u.log != nil {
		u.log.Error("SECURITY: the protected entries that could not be moved aside could not be kept in the step store; an executor restarted now would forget them", "error", err)
	}
}

// restore takes what an executor before this one remembered (in store;
// dev is the workspace's device), keeps it with what this one does, and
// from now on keeps every change in store. An executor restarted while a
// protected entry a program made could not be moved aside (or while the
// workspace could not be scanned whole after one) still refuses programs
// that may write until it is.
func (u *unmovedProtected) restore(ctx context.Context, store StepStore, dev, top uint64, log *slog.Logger) error {
	data, err := store.Blob(ctx, unmovedBlob)
	if err != nil && !errors.Is(err, ErrStepNotFound) {
		return fmt.Errorf("protected entries not moved aside: %w", err)
	}
	var rec unmovedRecord
	if len(data) > 0 {
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("protected entries not moved aside: %w", err)
		}
		if rec.Workspace != top {
			log.WarnContext(ctx, "the protected entries an executor before this one could not move aside were in another workspace (its volume was replaced): not taken", "entries", len(rec.Unmoved))
			rec = unmovedRecord{}
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.top = top
	for name, ino := range rec.Unmoved {
		if u.set == nil {
			u.set = protectedSet{}
		}
		if _, known := u.set[name]; !known {
			u.set[name] = entryID{dev: dev, ino: ino}
		}
	}
	if rec.Before != nil && u.before == nil {
		u.before = protectedSet{}
		for name, ino := range *rec.Before {
			u.before[name] = entryID{dev: dev, ino: ino}
		}
	}
	if len(u.set) > 0 || u.before != nil {
		log.WarnContext(ctx, "SECURITY: protected entries a program made are not known to be moved aside (remembered from before a restart, or since): programs that may write are refused until they are", "entries", len(u.set), "scan_pending", u.before != nil)
	}
	u.store, u.log = store, log
	if len(data) > 0 || len(u.set) > 0 || u.before != nil {
		u.keep() // written again: the store's retention counts from now
	}
	return nil
}

// since remembers before, the protected entries before a program whose
// scan after could not read everything; the earliest is kept (what is
// new since it is all that the later programs made, too).
func (u *unmovedProtected) since(before protectedSet) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.before == nil {
		u.before = before
		u.keep()
	}
}

func (u *unmovedProtected) add(name string, id entryID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.set == nil {
		u.set = protectedSet{}
	}
	u.set[name] = id
	u.keep()
}

// retryUnmoved moves aside, once more, the protected entries a program
// made that could not be moved aside after it (each under its name with
// its identity, or found by its identity under another: retryMissing), and
// returns "" when none is left, otherwise why not: then a program or MCP
// tool that may write must not run, since the scan before it would take
// such an entry for one that was there, and leave it to whoever opens the
// workspace next (session 13, TestProtectedUnmovedIsRemembered). Kept in
// memory: an executor restarted meanwhile has forgotten them (logged
// each as a security error when they were made).
func (w *workspace) retryUnmoved(ctx context.Context, log *slog.Logger) string {
	u := &w.unmoved
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.set) == 0 && u.before == nil {
		return ""
	}
	// Kept again whatever happens (what changed, and the retention).
	defer u.keep()
	var left []string
	missing := map[entryID]string{}
	for name, id := range u.set {
		pd, base, err := w.openParent(name)
		if err == nil {
			var st unix.Stat_t
			err = unix.Fstatat(pd.fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
			pd.close()
			if err == nil && (entryID{dev: uint64(st.Dev), ino: st.Ino}) != id { //nolint:unconvert // Dev is not uint64 everywhere
				err = unix.ENOENT // replaced: not the entry the program made
			}
		}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, errThroughLink) {
			// Not under its name: gone, or a directory above it renamed
			// (another program's, still renaming): looked for below.
			missing[id] = name
			continue
		}
		if err == nil {
			var aside string
			if aside, err = w.moveAside(name); err == nil {
				log.WarnContext(ctx, "a protected path a program made was moved aside at last", "path", name, "to", aside)
				delete(u.set, name)
				continue
			}
		}
		left = append(left, name+" ("+err.Error()+")")
	}
	left = append(left, w.retryMissing(ctx, log, missing)...)
	if u.before != nil {
		moved, unmoved, scanCut, _ := w.moveNew(ctx, log, u.before, "the scan after a program, done again")
		for name, id := range unmoved {
			if u.set == nil {
				u.set = protectedSet{}
			}
			u.set[name] = id
			left = append(left, name+" (could not be moved aside)")
		}
		if scanCut == "" {
			u.before = nil
			if len(moved) > 0 {
				log.WarnContext(ctx, "protected paths made while the workspace could not be scanned whole were moved aside", "moved", len(moved))
			}
		} else {
			left = append(left, "the workspace cannot be scanned whole since a program ran ("+scanCut+")")
		}
	}
	if len(left) == 0 {
		return ""
	}
	slices.Sort(left)
	return "protected entries a program made could not be moved aside, or looked for: " + strings.Join(left, ", ")
}

// retryMissing looks for the remembered entries missing (identity to the
// name they had) that are not under their names: a directory above one
// renamed since (TestScanRaceRenamerAfter: sub/.husky remembered as
// sub2/.husky once the renamer put sub2 back) leaves the entry in place
// under another name. A scan of the whole workspace finds each by its
// identity and moves it aside; one a whole scan does not find among the
// protected entries is gone (or no longer protected by its name) and
// forgotten. While the workspace cannot be scanned whole they stay
// remembered, and why is returned, one reason each. Called with u.mu held.
func (w *workspace) retryMissing(ctx context.Context, log *slog.Logger, missing map[entryID]string) []string {
	if len(missing) == 0 {
		return nil
	}
	u := &w.unmoved
	now, cut := w.protectedNames(-1)
	if cut != "" {
		left := make([]string, 0, len(missing))
		for _, name := range missing {
			left = append(left, name+" (not under its name, and the workspace cannot be scanned whole: "+cut+")")
		}
		return left
	}
	var left []string
	for name, id := range now {
		was, ok := missing[id]
		if !ok {
			continue
		}
		delete(missing, id)
		delete(u.set, was)
		aside, err := w.moveAside(name)
		if err != nil {
			u.set[name] = id
			left = append(left, name+" ("+err.Error()+")")
			continue
		}
		log.WarnContext(ctx, "a protected path a program made was moved aside at last", "path", name, "was", was, "to", aside)
	}
	for _, was := range missing {
		delete(u.set, was)
	}
	return left
}

// unmovedRefused is the refusal of a program (or MCP tool) that may write
// while a protected entry an earlier one made is still in place (why:
// reason). Nothing was run.
func unmovedRefused(program, reason string) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%s may write, and %s: the scan before it would take them for entries that were there, so the program was not run; nothing was run (free space, or move them, and try again)", program, reason),
		map[string]any{"program": program, "reason": reason, "outcome_unknown": false})
}
