package executor

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Session 18 (attack18c), issue 11: fs.write checked the file it replaces
// (against the approved preview's base, and for the content its undo
// saves) and then renamed the new content over it: a change another
// writer made in between was replaced, and the undo would have put back
// content older than it. The writers here are real processes (cp writes
// in place, mv replaces by rename, rm deletes), run from fs.write's own
// code path between its check and its write (the hook that records the
// compensation), so they lose the race every time.
func TestFSWriteDoesNotReplaceAChangeMadeBetweenItsCheckAndItsWrite(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	w := &fsWrite{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20}
	src := t.TempDir() // the other writer's files, outside the workspace
	racerFile := func(content string) string {
		t.Helper()
		f := filepath.Join(src, "racer")
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const before, racer = "one\n", "racer\n"
	for _, tc := range []struct {
		name     string
		exists   bool   // the file is there when the step reads it
		approved bool   // the grant binds the preview's base
		race     string // "cp" (in place), "mv" (by rename), "rm", "same" (cp of the same content), "create"
		want     string // the file afterwards ("-": none)
		code     wire.Code
	}{
		{"approved, rewritten in place", true, true, "cp", racer, wire.CodeChangedSincePreview},
		{"approved, replaced by rename", true, true, "mv", racer, wire.CodeChangedSincePreview},
		{"approved, deleted", true, true, "rm", "-", wire.CodeChangedSincePreview},
		{"approved, rewritten with the same bytes", true, true, "same", "approved\n", ""},
		{"not approved, rewritten in place", true, false, "cp", racer, wire.CodeToolFailure},
		{"not approved, replaced by rename", true, false, "mv", racer, wire.CodeToolFailure},
		{"not approved, created", false, false, "create", racer, wire.CodeToolFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.NewReplacer(" ", "_", ",", "").Replace(tc.name) + ".txt"
			target := filepath.Join(dir, name)
			if tc.exists {
				if err := os.WriteFile(target, []byte(before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := map[string]any{"path": name, "content": "approved\n"}
			p, e := w.Preview(context.Background(), args)
			if e != nil {
				t.Fatal(e)
			}
			g := &gate{compensate: func(*Compensation) error {
				var cmd *osexec.Cmd
				switch tc.race {
				case "cp", "create":
					cmd = osexec.Command("cp", racerFile(racer), target)
				case "same":
					cmd = osexec.Command("cp", racerFile(before), target)
				case "mv":
					cmd = osexec.Command("mv", racerFile(racer), target)
				case "rm":
					cmd = osexec.Command("rm", target)
				}
				return cmd.Run()
			}}
			ctx := context.WithValue(context.Background(), gateKey{}, g)
			if tc.approved {
				ctx = context.WithValue(ctx, grantKey{}, grantSeen{id: "g", grant: &xctv1.VerdictGrant{PreviewBase: p.GetBaseDigest()}})
			}
			_, e = w.Invoke(ctx, args)
			got, err := os.ReadFile(target)
			if os.IsNotExist(err) {
				got, err = []byte("-"), nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.GetCode() != string(tc.code) || string(got) != tc.want {
				t.Errorf("the write: %v; the file %q, want %q and code %q", e, got, tc.want, tc.code)
			}
			if tc.code == wire.CodeChangedSincePreview && e.GetDetails().AsMap()["previewed"] != p.GetBaseDigest() {
				t.Errorf("details %v, want previewed %s", e.GetDetails().AsMap(), p.GetBaseDigest())
			}
			left, _ := filepath.Glob(filepath.Join(dir, ".xct-*"))
			if len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A file changed before the exchange is put back; when yet another
// writer takes the name while the new content is swapped in, neither
// entry is lost: the one swapped out is kept under the temporary name,
// and the error says where.
func TestFSWriteSwappedOutEntryIsKeptWhenItsNameIsTakenAgain(t *testing.T) {
	t.Parallel()
	ws, dir := scanWS(t, false)
	target := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(target, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := filepath.Join(t.TempDir(), "third")
	if err := os.WriteFile(third, []byte("third\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &fsWrite{ws: ws, maxBytes: 1 << 20, maxUndo: 1 << 20, swapped: func() {
		if err := osexec.Command("mv", third, target).Run(); err != nil {
			t.Error(err)
		}
	}}
	g := &gate{compensate: func(*Compensation) error {
		return os.WriteFile(target, []byte("racer\n"), 0o600)
	}}
	ctx := context.WithValue(context.Background(), gateKey{}, g)
	_, e := w.Invoke(ctx, map[string]any{"path": "f.txt", "content": "new\n"})
	kept, _ := e.GetDetails().AsMap()["kept_at"].(string)
	if e.GetCode() != string(wire.CodeToolFailure) || !strings.HasPrefix(kept, ".xct-") {
		t.Fatalf("the write: %v, want TOOL_FAILURE naming where the entry was kept", e)
	}
	got, _ := os.ReadFile(target)
	keptContent, _ := os.ReadFile(filepath.Join(dir, kept))
	if string(got) != "racer\n" || string(keptContent) != "third\n" {
		t.Errorf("the file %q and the kept entry %q, want the racer's put back and the third writer's kept", got, keptContent)
	}
}
