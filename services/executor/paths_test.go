package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// TestPathAttacks sends every known way out of the workspace to every fs
// tool: each is refused, and nothing outside the workspace changes.
func TestPathAttacks(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	sb.links(t)
	s := newService(t, sb.ws)
	const (
		denied  = wire.CodePermissionDenied
		invalid = wire.CodeInvalidArgument
	)
	paths := []struct {
		name string
		path string
		code wire.Code
	}{
		{"parent", "../outside.txt", denied},
		{"parent of a subdirectory", "a/../../outside.txt", denied},
		{"deep parent", "a/b/../../../outside.txt", denied},
		{"dot dot", "..", denied},
		{"dot dot slash", "../", denied},
		{"absolute system file", "/etc/passwd", denied},
		{"absolute path to the file", sb.outside, denied},
		{"absolute path into the workspace", filepath.Join(sb.ws, "x.txt"), denied},
		{"backslash absolute", `\etc\passwd`, denied},
		{"absolute symlink to a file", "link-abs", denied},
		{"relative symlink to a file", "link-rel", denied},
		{"absolute symlink to a directory", "dirlink-abs/f.txt", denied},
		{"relative symlink to a directory", "dirlink-rel/f.txt", denied},
		{"new file through a directory symlink", "dirlink-rel/new.txt", denied},
		{"symlink to the parent", "up/outside.txt", denied},
		{"NUL byte", "x\x00y", invalid},
		{"NUL byte in a parent", "../outside.txt\x00", invalid},
		{"empty", "", invalid},
		{"too long", strings.Repeat("a/", maxPathBytes), invalid},
		{"invalid UTF-8", "\xff.txt", invalid},
	}
	type call struct {
		tool string
		args func(p string) map[string]any
	}
	calls := []call{
		{"fs.read", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"fs.write", func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} }},
		{"fs.write", func(p string) map[string]any {
			return map[string]any{"path": p, "content": "pwned", "create_dirs": false}
		}},
	}
	for _, tt := range paths {
		for _, c := range calls {
			t.Run(c.tool+"/"+tt.name, func(t *testing.T) {
				r := run(t, s, c.tool, c.args(tt.path))
				if got := codeOf(r); got != string(tt.code) {
					t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), tt.code)
				}
				if msg := r.GetError().GetMessage(); strings.Contains(msg, sb.dir) && !strings.Contains(tt.path, sb.dir) {
					t.Errorf("message reveals the host path: %s", msg)
				}
				sb.untouched(t)
			})
		}
	}
	// fs.list has no file to read, but the same ways out.
	for _, tt := range []struct{ name, path string }{
		{"parent", ".."},
		{"parent of a subdirectory", "a/../.."},
		{"absolute", "/"},
		{"absolute symlink to a directory", "dirlink-abs"},
		{"relative symlink to a directory", "dirlink-rel"},
		{"symlink to the parent", "up"},
	} {
		t.Run("fs.list/"+tt.name, func(t *testing.T) {
			if got := codeOf(exec(t, s, "fs.list", map[string]any{"path": tt.path})); got != string(denied) {
				t.Fatalf("code = %q", got)
			}
		})
	}
	// The message says plainly what happened.
	r := exec(t, s, "fs.read", map[string]any{"path": "../x"})
	if got, want := r.GetError().GetMessage(), `path "../x" is outside the workspace`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got := r.GetError().GetDetails().AsMap()["path"]; got != "../x" {
		t.Errorf("details.path = %v", got)
	}
	noTempFiles(t, sb.ws)
	// The links themselves are still there: a refused write replaced nothing.
	for _, l := range []string{"link-abs", "link-rel", "dirlink-abs", "dirlink-rel", "up"} {
		if fi, err := os.Lstat(filepath.Join(sb.ws, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symlink: %v", l, err)
		}
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	ws, err := openWorkspace(t.TempDir())
	must(t, err)
	defer func() { _ = ws.close() }()
	for _, in := range []string{"a", ".", "..a/b", "a/...", "a/b.c", ".a"} {
		got, e := ws.clean(in)
		if e != nil || got != in {
			t.Errorf("clean(%q) = %q, %v", in, got, e)
		}
	}
	// A path the policy would read differently from the tool is refused,
	// naming its clean form.
	for in, want := range map[string]string{
		"./a":          "a",
		"a/./b":        "a/b",
		"a//b":         "a/b",
		"a/b/../c":     "a/c",
		"a/..":         ".",
		"dir/":         "dir",
		"a/../b/../c":  "c",
		"deploy.key/.": "deploy.key",
	} {
		_, e := ws.clean(in)
		if e.GetCode() != string(wire.CodeInvalidArgument) || e.GetDetails().AsMap()["clean"] != want {
			t.Errorf("clean(%q): %v, want INVALID_ARGUMENT naming %q", in, e, want)
		}
	}
}

// TestDirect: a path through a symbolic link inside the workspace is
// refused by every tool that takes one, naming where it leads; the link
// itself is what fs.delete and fs.move act on.
func TestDirect(t *testing.T) {
	sb := newSandbox(t)
	must(t, os.MkdirAll(filepath.Join(sb.ws, "config", "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(sb.ws, "config", "app.yaml"), []byte("a\n"), 0o644))
	must(t, os.Symlink("config", filepath.Join(sb.ws, "settings")))
	s := newService(t, sb.ws)
	for _, c := range []struct {
		tool string
		args map[string]any
		real string
	}{
		{"fs.read", map[string]any{"path": "settings/app.yaml"}, "config/app.yaml"},
		{"fs.list", map[string]any{"path": "settings"}, "config"},
		{"fs.list", map[string]any{"path": "settings/sub"}, "config/sub"},
		{"fs.write", map[string]any{"path": "settings/new.txt", "content": "x"}, "config/new.txt"},
		{"fs.delete", map[string]any{"path": "settings/app.yaml"}, "config/app.yaml"},
		{"fs.move", map[string]any{"from": "settings/app.yaml", "to": "x.yaml"}, "config/app.yaml"},
	} {
		r := exec(t, s, c.tool, c.args)
		if codeOf(r) != string(wire.CodeInvalidArgument) || r.GetError().GetDetails().AsMap()["real"] != c.real {
			t.Errorf("%s %v: %v, want INVALID_ARGUMENT naming %s", c.tool, c.args, r, c.real)
		}
	}
	// shell.exec's working directory too.
	cfg, err := ParseToolsConfig("tools.yaml", []byte("shell:\n  sandbox: none\n  binaries:\n    - {name: pwd, effect: read}\n"))
	must(t, err)
	sh, err := New(Config{Workspace: sb.ws, Tools: cfg}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = sh.Stop(context.Background()) })
	if r := exec(t, sh, "shell.exec", map[string]any{"argv": []any{"pwd"}, "cwd": "settings"}); codeOf(r) != string(wire.CodeInvalidArgument) ||
		r.GetError().GetDetails().AsMap()["real"] != "config" {
		t.Errorf("cwd through a link: %v", r)
	}
	// The link itself.
	if r := exec(t, s, "fs.move", map[string]any{"from": "settings", "to": "settings2"}); codeOf(r) != "" {
		t.Fatalf("moving the link: %v", r)
	}
	if r := exec(t, s, "fs.delete", map[string]any{"path": "settings2"}); codeOf(r) != "" {
		t.Fatalf("deleting the link: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(sb.ws, "config", "app.yaml")); err != nil || string(b) != "a\n" {
		t.Fatalf("config/app.yaml: %q %v", b, err)
	}
}
