package executor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// FuzzFSPath feeds arbitrary paths to fs.read, fs.write and fs.list over a
// workspace that holds symbolic links leading out of it, and checks that
// nothing outside the workspace is ever read, created or changed.
func FuzzFSPath(f *testing.F) {
	for _, seed := range []string{
		"a.txt", "a/b/c.txt", ".", "./", "", "..", "../outside.txt", "a/../../outside.txt",
		"/etc/passwd", `\..\outside.txt`, "link-abs", "link-rel", "dirlink-abs/f.txt",
		"dirlink-rel/new.txt", "up/outside.txt", "up/ws/a.txt", "x\x00y", "\xff", "a//b/./c/",
	} {
		f.Add(seed)
	}
	sb := newSandbox(f)
	sb.links(f)
	s := newService(f, sb.ws)
	allowed := map[string]bool{
		"": true, string(wire.CodePermissionDenied): true, string(wire.CodeNotFound): true,
		string(wire.CodeInvalidArgument): true, string(wire.CodeOutputTooLarge): true,
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"fs.read", map[string]any{"path": p}},
			{"fs.write", map[string]any{"path": p, "content": "fuzz"}},
			{"fs.write", map[string]any{"path": p, "content": "fuzz", "create_dirs": false}},
			{"fs.list", map[string]any{"path": p}},
		} {
			r := run(t, s, c.tool, c.args)
			if code := codeOf(r); !allowed[code] {
				t.Fatalf("%s(%q) = %s: %s", c.tool, p, code, r.GetError().GetMessage())
			}
			if r.GetError() == nil {
				checkInside(t, sb, c.tool, r.GetSuccess().GetResult().GetStructValue().AsMap())
			}
		}
		sb.untouched(t)
	})
}

// checkInside fails if a successful result names something outside the
// workspace or carries the outside secret.
func checkInside(t *testing.T, sb sandbox, tool string, res map[string]any) {
	t.Helper()
	rel, _ := res["path"].(string)
	if !filepath.IsLocal(rel) {
		t.Fatalf("%s returned path %q", tool, rel)
	}
	switch tool {
	case "fs.read":
		if res["content"] == secret {
			t.Fatalf("fs.read(%q) read the outside secret", rel)
		}
	case "fs.write":
		got, err := os.ReadFile(filepath.Join(sb.ws, filepath.FromSlash(rel)))
		if err != nil || string(got) != "fuzz" {
			t.Fatalf("fs.write(%q) did not land inside the workspace: %q, %v", rel, got, err)
		}
	}
}
