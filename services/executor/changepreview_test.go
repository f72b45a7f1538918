package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Session 18 (attack18c), issue 11: fs.delete and fs.move had no preview,
// so an approver saw the proposal alone and the approval bound nothing of
// what was removed or moved. Their previews now show it, name its digest,
// and the approved step acts only on an entry with that digest.
func TestFSDeleteAndMoveActOnlyOnWhatThePreviewShowed(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	del := &fsDelete{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20, maxEntries: 100}
	move := &fsMove{ws: ws, maxBytes: 1 << 20}
	put := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	for _, tc := range []struct {
		name      string
		tool      Tool
		setup     func(n string) map[string]any // makes the entries, returns the step's arguments
		show      string                        // in the preview
		base      string                        // prefix of the preview's base
		meanwhile func(n string)                // nil: nothing changes
		acted     func(n string) bool           // the step's effect is there
	}{
		{"delete a file", del, func(n string) map[string]any { put(n, "one\ntwo\n"); return map[string]any{"path": n} },
			"-two", "sha256:", nil, func(n string) bool { return !exists(n) }},
		{"delete a file changed since", del, func(n string) map[string]any { put(n, "one\n"); return map[string]any{"path": n} },
			"-one", "sha256:", func(n string) { put(n, "one\nalice\n") }, func(n string) bool { return !exists(n) }},
		{"delete a directory", del, func(n string) map[string]any {
			put(n+"/a.txt", "a\n")
			put(n+"/sub/b.txt", "b\n")
			return map[string]any{"path": n, "recursive": true}
		}, "file  " + "delete_a_directory/sub/b.txt (2 bytes)", "tree-sha256:", nil, func(n string) bool { return !exists(n) }},
		{"delete a directory filled since", del, func(n string) map[string]any {
			put(n+"/a.txt", "a\n")
			return map[string]any{"path": n, "recursive": true}
		}, "a.txt", "tree-sha256:", func(n string) { put(n+"/new.txt", "alice\n") }, func(n string) bool { return !exists(n) }},
		{"delete a link retargeted since", del, func(n string) map[string]any {
			if err := os.Symlink("a", filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
			return map[string]any{"path": n}
		}, "leading to a", "link-sha256:", func(n string) {
			_ = os.Remove(filepath.Join(dir, n))
			if err := os.Symlink("b", filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
		}, func(n string) bool { return !exists(n) }},
		{"delete what was absent", del, func(n string) map[string]any { return map[string]any{"path": n} },
			"NOT_FOUND", BaseAbsent, func(n string) { put(n, "alice\n") }, func(n string) bool { return !exists(n) }},
		{"move a file", move, func(n string) map[string]any { put(n, "one\n"); return map[string]any{"from": n, "to": n + ".moved"} },
			"would be moved to", "sha256:", nil, func(n string) bool { return exists(n + ".moved") }},
		{"move a file changed since", move, func(n string) map[string]any { put(n, "one\n"); return map[string]any{"from": n, "to": n + ".moved"} },
			"(4 bytes", "sha256:", func(n string) { put(n, "alice\n") }, func(n string) bool { return exists(n + ".moved") }},
		{"move a directory changed since", move, func(n string) map[string]any {
			put(n+"/a.txt", "a\n")
			return map[string]any{"from": n, "to": n + ".moved"}
		}, "a.txt (2 bytes)", "tree-sha256:", func(n string) { put(n+"/a.txt", "b\n") }, func(n string) bool { return exists(n + ".moved") }},
		{"move onto what existed", move, func(n string) map[string]any {
			put(n, "one\n")
			put(n+".moved", "there\n")
			return map[string]any{"from": n, "to": n + ".moved"}
		}, "exists", BaseRefused, func(n string) { _ = os.Remove(filepath.Join(dir, n+".moved")) }, func(n string) bool { return exists(n + ".moved") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := strings.ReplaceAll(tc.name, " ", "_")
			args := tc.setup(n)
			p, e := tc.tool.(Previewer).Preview(context.Background(), args)
			if e != nil || !strings.Contains(p.GetContent(), tc.show) || !strings.HasPrefix(p.GetBaseDigest(), tc.base) {
				t.Fatalf("preview %v (%v), want it to show %q and a base %q…", p, e, tc.show, tc.base)
			}
			if tc.meanwhile != nil {
				tc.meanwhile(n)
			}
			ctx := context.WithValue(context.Background(), grantKey{}, grantSeen{id: "g", grant: &xctv1.VerdictGrant{PreviewBase: p.GetBaseDigest()}})
			_, e = tc.tool.Invoke(ctx, args)
			if tc.meanwhile == nil {
				if e != nil || !tc.acted(n) {
					t.Fatalf("the approved step on what was shown: %v (acted %v)", e, tc.acted(n))
				}
				return
			}
			if e.GetCode() != string(wire.CodeChangedSincePreview) || e.GetDetails().AsMap()["previewed"] != p.GetBaseDigest() || tc.acted(n) {
				t.Errorf("the approved step on what changed since: %v (acted %v), want CHANGED_SINCE_PREVIEW and nothing done", e, tc.acted(n))
			}
		})
	}
}

// A delete checked what it saved, then removed the entry by its name: a
// file rewritten in between (same size, its time put back) was removed
// although its new content was never saved, and the undo would have put
// back the old one. It is now renamed aside and read again there; a
// change puts it back and nothing is deleted.
func TestFSDeleteRemovesOnlyWhatItSaved(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	target := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(target, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(target, old, old); err != nil {
		t.Fatal(err)
	}
	del := &fsDelete{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20, maxEntries: 100, hook: func() {
		// Between the compensation and the delete: same size, same time.
		if err := os.WriteFile(target, []byte("two\n"), 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Chtimes(target, old, old); err != nil {
			t.Error(err)
		}
	}}
	_, e := del.Invoke(context.Background(), map[string]any{"path": "f.txt"})
	got, err := os.ReadFile(target)
	if e.GetCode() != string(wire.CodeToolFailure) || err != nil || string(got) != "two\n" {
		t.Errorf("delete of a file rewritten after it was saved: %v; the file %q (%v), want it kept", e, got, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".xct-*")); len(left) != 0 {
		t.Errorf("entries left aside: %v", left)
	}
}
