package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFSWritePreview(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws, err := openWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ws.close() }()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte{0xff, 0xfe, 0x00}, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".npmrc"), []byte("//registry/:_authToken=npm_SECRETTOKEN\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A hard link made on the host to a file outside: fs.read refuses it,
	// and the preview (recorded on the chain, readable by every reader)
	// must not show it either.
	outside := filepath.Join(t.TempDir(), "outside.txt")
	if err := os.WriteFile(outside, []byte("outside secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "hl.txt")); err != nil {
		t.Fatal(err)
	}
	// Links to both: the preview shows neither file through them.
	for link, to := range map[string]string{"la.txt": "a.txt", "lhl.txt": "hl.txt"} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	w := &fsWrite{ws: ws, maxBytes: 1 << 20}
	tests := []struct {
		name, path, content string
		kind, want          string
		code                string
	}{
		{"change", "a.txt", "one\nthree\n", "diff", "-two\n+three\n", ""},
		{"new file", "new/b.txt", "hello\n", "diff", "--- /dev/null\n+++ b/new/b.txt\n@@ -0,0 +1 @@\n+hello\n", ""},
		{"same content", "a.txt", "one\ntwo\n", "diff", "no change", ""},
		{"binary", "bin", "text\n", "text", "binary", ""},
		{"escape", "../outside.txt", "x", "", "", "PERMISSION_DENIED"},
		{"hard link", "hl.txt", "x", "text", "2 hard links", ""},
		{"symbolic link", "la.txt", "x", "text", "la.txt is a symbolic link", ""},
		{"symbolic link to a hard link", "lhl.txt", "x", "text", "lhl.txt is a symbolic link", ""},
		// Session 11 (trust11a): the diff showed a protected file's
		// content (its token) for a write the executor refuses.
		{"protected", ".npmrc", "x", "text", "protected path", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, e := w.Preview(context.Background(), map[string]any{"path": tc.path, "content": tc.content})
			if tc.code != "" {
				if e.GetCode() != tc.code {
					t.Fatalf("error %v, want %s", e, tc.code)
				}
				return
			}
			if e != nil || p.GetKind() != tc.kind || !strings.Contains(p.GetContent(), tc.want) || strings.Contains(p.GetContent(), "outside secret") || strings.Contains(p.GetContent(), "SECRETTOKEN") ||
				strings.Contains(p.GetContent(), "two") && tc.name != "change" && tc.name != "same content" {
				t.Fatalf("preview %v %q (error %v), want %s containing %q", p.GetKind(), p.GetContent(), e, tc.kind, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatal("a preview created a directory")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "one\ntwo\n" {
		t.Fatalf("a preview changed the file: %q", b)
	}
}
