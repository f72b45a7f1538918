package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

func TestFSWritePreview(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
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

// Session 17 (attack17c), issue 11: the preview names the file it was made
// against (its checksum, or "absent"), and fs.write acts only on that file
// when the grant that let it in binds one (an approval by the preview):
// a file changed, created or deleted since is left as it is.
func TestFSWriteActsOnlyOnTheFileThePreviewShowed(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	w := &fsWrite{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20}
	put := func(name, content string) {
		t.Helper()
		if content == "-" {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, before, meanwhile string // "-": no file
		wantBase                string
		refused                 bool
	}{
		{"unchanged", "one\n", "", checksum([]byte("one\n")), false},
		{"changed", "one\n", "one\ntwo\n", checksum([]byte("one\n")), true},
		{"deleted", "one\n", "-", checksum([]byte("one\n")), true},
		{"still absent", "-", "", BaseAbsent, false},
		{"created", "-", "two\n", BaseAbsent, true},
		{"changed to the content written", "one\n", "new\n", checksum([]byte("one\n")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "_") + ".txt"
			put(name, tc.before)
			args := map[string]any{"path": name, "content": "new\n"}
			p, e := w.Preview(context.Background(), args)
			if e != nil || p.GetBaseDigest() != tc.wantBase {
				t.Fatalf("preview %v (%v), want base %q", p, e, tc.wantBase)
			}
			if tc.meanwhile != "" {
				put(name, tc.meanwhile)
			}
			ctx := context.WithValue(context.Background(), grantKey{}, grantSeen{id: "g", grant: &xctv1.VerdictGrant{PreviewBase: p.GetBaseDigest()}})
			_, e = w.Invoke(ctx, args)
			got, err := os.ReadFile(filepath.Join(dir, name))
			if os.IsNotExist(err) {
				got, err = []byte("-"), nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.refused {
				if e != nil || string(got) != "new\n" {
					t.Fatalf("write of the previewed file: %v, file %q", e, got)
				}
				return
			}
			if e.GetCode() != string(wire.CodeChangedSincePreview) || e.GetDetails().AsMap()["previewed"] != tc.wantBase || string(got) != tc.meanwhile {
				t.Errorf("write of a file changed since the preview: %v, file %q (want %q kept)", e, got, tc.meanwhile)
			}
		})
	}
	// No grant, or one binding no preview (no approval): as before.
	put("plain.txt", "one\n")
	if _, e := w.Invoke(context.Background(), map[string]any{"path": "plain.txt", "content": "x\n"}); e != nil {
		t.Errorf("a write no preview binds: %v", e)
	}
}

// A file created after fs.write's check that none is there, before its
// rename (here: while the compensation is recorded, which happens in
// between), is not replaced when the approved preview was of no file.
func TestFSWriteApprovedAsNewDoesNotReplaceAFileCreatedInTheWindow(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	w := &fsWrite{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20}
	args := map[string]any{"path": "new.txt", "content": "approved\n"}
	g := &gate{compensate: func(*Compensation) error {
		return os.WriteFile(filepath.Join(dir, "new.txt"), []byte("racer\n"), 0o600)
	}}
	ctx := context.WithValue(context.Background(), gateKey{}, g)
	ctx = context.WithValue(ctx, grantKey{}, grantSeen{id: "g", grant: &xctv1.VerdictGrant{PreviewBase: BaseAbsent}})
	_, e := w.Invoke(ctx, args)
	got, err := os.ReadFile(filepath.Join(dir, "new.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if e.GetCode() != string(wire.CodeChangedSincePreview) || string(got) != "racer\n" {
		t.Errorf("write approved against no file, one created meanwhile: %v, file %q (want the racer's kept)", e, got)
	}
}
