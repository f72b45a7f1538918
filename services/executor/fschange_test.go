package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// invokeCompensated calls a tool directly, as the executor does, and
// returns the compensation it committed (nil if none).
func invokeCompensated(tb testing.TB, s *Service, tool string, args map[string]any) (any, *xctv1.Error, *Compensation) {
	tb.Helper()
	var comp *Compensation
	g := &gate{stepID: "step", compensate: func(c *Compensation) error {
		comp = c
		return nil
	}}
	st, ok := s.tool(tool)
	if !ok {
		tb.Fatalf("no tool %s", tool)
	}
	res, e := st.tool.Invoke(context.WithValue(context.Background(), gateKey{}, g), args)
	return res, e, comp
}

// snapshot describes every entry under dir: type, permissions, content or
// link target.
func snapshot(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := de.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("file %v %q", fi.Mode().Perm(), b)
		default:
			out[rel] = "other " + fi.Mode().Type().String()
		}
		return nil
	})
	must(tb, err)
	return out
}

// changeFixture is a workspace to delete and move things in.
func changeFixture(tb testing.TB) (sandbox, *Service) {
	tb.Helper()
	sb := newSandbox(tb)
	fixture(tb, sb.ws)
	must(tb, os.Chmod(filepath.Join(sb.ws, "hello.txt"), 0o640))
	must(tb, os.Mkdir(filepath.Join(sb.ws, "emptydir"), 0o700))
	must(tb, os.Symlink("../hello.txt", filepath.Join(sb.ws, "sub", "up-alias")))
	return sb, newService(tb, sb.ws)
}

func TestFSDelete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  map[string]any
		code  wire.Code
		want  DeleteResult
		gone  []string // entries that no longer exist
		kept  []string // entries that still exist
		setup func(*Service)
	}{
		{name: "file", args: map[string]any{"path": "hello.txt"},
			want: DeleteResult{Path: "hello.txt", Type: EntryFile, Entries: 1, Bytes: 6, Checksum: checksum([]byte("hello\n"))}, gone: []string{"hello.txt"}},
		{name: "symlink, not its target", args: map[string]any{"path": "alias"},
			want: DeleteResult{Path: "alias", Type: EntrySymlink, Entries: 1}, gone: []string{"alias"}, kept: []string{"hello.txt"}},
		{name: "empty directory", args: map[string]any{"path": "emptydir"},
			want: DeleteResult{Path: "emptydir", Type: EntryDir, Entries: 1}, gone: []string{"emptydir"}},
		{name: "tree", args: map[string]any{"path": "sub", "recursive": true},
			want: DeleteResult{Path: "sub", Type: EntryDir, Entries: 4, Bytes: 6}, gone: []string{"sub"}, kept: []string{"hello.txt"}},
		{name: "non-empty directory", args: map[string]any{"path": "sub"}, code: wire.CodeInvalidArgument, kept: []string{"sub/dir/n.txt"}},
		{name: "missing", args: map[string]any{"path": "nope"}, code: wire.CodeNotFound},
		{name: "missing parent", args: map[string]any{"path": "nope/x"}, code: wire.CodeNotFound},
		{name: "workspace itself", args: map[string]any{"path": "."}, code: wire.CodeInvalidArgument},
		{name: "workspace itself, recursive", args: map[string]any{"path": "a/..", "recursive": true}, code: wire.CodeInvalidArgument},
		{name: "fifo", args: map[string]any{"path": "fifo"}, code: wire.CodeInvalidArgument, kept: []string{"fifo"}},
		{name: "recursive not a bool", args: map[string]any{"path": "sub", "recursive": "yes"}, code: wire.CodeInvalidArgument},
		{name: "unknown argument", args: map[string]any{"path": "sub", "force": true}, code: wire.CodeInvalidArgument},
		{name: "too large to save", args: map[string]any{"path": "big"}, code: wire.CodeInvalidArgument, kept: []string{"big"},
			setup: func(s *Service) { s.tools["fs.delete"].tool.(*fsDelete).maxUndo = 1000 }},
		{name: "tree too large to save", args: map[string]any{"path": "sub", "recursive": true}, code: wire.CodeInvalidArgument, kept: []string{"sub/dir/n.txt"},
			setup: func(s *Service) { s.tools["fs.delete"].tool.(*fsDelete).maxUndo = 3 }},
		{name: "directory holding a fifo", args: map[string]any{"path": "ff", "recursive": true}, code: wire.CodeInvalidArgument, kept: []string{"ff/fifo"},
			setup: func(s *Service) {
				must(t, s.ws.root.Mkdir("ff", 0o755))
				must(t, syscall.Mkfifo(filepath.Join(s.wsDir, "ff", "fifo"), 0o644))
			}},
		{name: "too many entries", args: map[string]any{"path": "sub", "recursive": true}, code: wire.CodeInvalidArgument, kept: []string{"sub/dir/n.txt"},
			setup: func(s *Service) { s.tools["fs.delete"].tool.(*fsDelete).maxEntries = 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, s := changeFixture(t)
			if tt.setup != nil {
				tt.setup(s)
			}
			before := snapshot(t, sb.ws)
			res, e, comp := invokeCompensated(t, s, "fs.delete", tt.args)
			if e.GetCode() != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", e.GetCode(), e.GetMessage(), tt.code)
			}
			sb.untouched(t)
			for _, p := range tt.gone {
				if _, err := os.Lstat(filepath.Join(sb.ws, p)); !os.IsNotExist(err) {
					t.Errorf("%s still exists: %v", p, err)
				}
			}
			for _, p := range tt.kept {
				if _, err := os.Lstat(filepath.Join(sb.ws, p)); err != nil {
					t.Errorf("%s is gone: %v", p, err)
				}
			}
			if tt.code != "" {
				if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
					t.Fatalf("a refused delete changed the workspace:\n%v\n%v", before, got)
				}
				return
			}
			if got := res.(DeleteResult); got != tt.want {
				t.Fatalf("result = %+v, want %+v", got, tt.want)
			}
			// The compensation puts everything back as it was.
			if comp == nil || comp.Tool != "fs.delete" {
				t.Fatalf("compensation: %+v", comp)
			}
			must(t, s.ws.undo(comp))
			if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
				t.Fatalf("undo did not restore the workspace:\nbefore %v\nafter  %v", before, got)
			}
		})
	}
}

func TestFSMove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args map[string]any
		code wire.Code
		want MoveResult
	}{
		{name: "rename a file", args: map[string]any{"from": "hello.txt", "to": "bye.txt"},
			want: MoveResult{From: "hello.txt", To: "bye.txt", Type: EntryFile, Checksum: checksum([]byte("hello\n"))}},
		{name: "into a directory", args: map[string]any{"from": "hello.txt", "to": "sub/dir/hello.txt"},
			want: MoveResult{From: "hello.txt", To: "sub/dir/hello.txt", Type: EntryFile, Checksum: checksum([]byte("hello\n"))}},
		{name: "a directory", args: map[string]any{"from": "sub", "to": "emptydir/sub"},
			want: MoveResult{From: "sub", To: "emptydir/sub", Type: EntryDir}},
		{name: "a symlink, not its target", args: map[string]any{"from": "alias", "to": "alias2"},
			want: MoveResult{From: "alias", To: "alias2", Type: EntrySymlink}},
		{name: "destination exists", args: map[string]any{"from": "hello.txt", "to": "empty"}, code: wire.CodeInvalidArgument},
		{name: "destination is a directory", args: map[string]any{"from": "hello.txt", "to": "emptydir"}, code: wire.CodeInvalidArgument},
		{name: "source missing", args: map[string]any{"from": "nope", "to": "x"}, code: wire.CodeNotFound},
		{name: "destination directory missing", args: map[string]any{"from": "hello.txt", "to": "nope/x"}, code: wire.CodeNotFound},
		{name: "destination parent is a file", args: map[string]any{"from": "empty", "to": "hello.txt/x"}, code: wire.CodeInvalidArgument},
		{name: "into itself", args: map[string]any{"from": "sub", "to": "sub/dir/sub"}, code: wire.CodeInvalidArgument},
		{name: "same path", args: map[string]any{"from": "hello.txt", "to": "./hello.txt"}, code: wire.CodeInvalidArgument},
		{name: "the workspace", args: map[string]any{"from": ".", "to": "x"}, code: wire.CodeInvalidArgument},
		{name: "onto the workspace", args: map[string]any{"from": "hello.txt", "to": "."}, code: wire.CodeInvalidArgument},
		{name: "fifo", args: map[string]any{"from": "fifo", "to": "fifo2"}, code: wire.CodeInvalidArgument},
		{name: "no destination", args: map[string]any{"from": "hello.txt"}, code: wire.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, s := changeFixture(t)
			before := snapshot(t, sb.ws)
			res, e, comp := invokeCompensated(t, s, "fs.move", tt.args)
			if e.GetCode() != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", e.GetCode(), e.GetMessage(), tt.code)
			}
			sb.untouched(t)
			if tt.code != "" {
				if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
					t.Fatalf("a refused move changed the workspace")
				}
				return
			}
			if got := res.(MoveResult); got != tt.want {
				t.Fatalf("result = %+v, want %+v", got, tt.want)
			}
			if _, err := os.Lstat(filepath.Join(sb.ws, tt.want.From)); !os.IsNotExist(err) {
				t.Fatalf("source still there: %v", err)
			}
			must(t, s.ws.undo(comp))
			if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
				t.Fatalf("undo did not restore the workspace:\nbefore %v\nafter  %v", before, got)
			}
		})
	}
}

func TestFSWriteCompensation(t *testing.T) {
	t.Parallel()
	t.Run("created, with directories", func(t *testing.T) {
		sb, s := changeFixture(t)
		before := snapshot(t, sb.ws)
		_, e, comp := invokeCompensated(t, s, "fs.write", map[string]any{"path": "a/b/new.txt", "content": "x"})
		if e != nil || comp == nil {
			t.Fatalf("write: %v, %v", e, comp)
		}
		must(t, s.ws.undo(comp))
		if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
			t.Fatalf("undo: %v", got)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		sb, s := changeFixture(t)
		before := snapshot(t, sb.ws)
		_, e, comp := invokeCompensated(t, s, "fs.write", map[string]any{"path": "hello.txt", "content": "bye"})
		if e != nil || comp == nil || len(comp.Undo) != 1 || comp.Undo[0].Op != UndoRestore {
			t.Fatalf("write: %v, %+v", e, comp)
		}
		must(t, s.ws.undo(comp))
		if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
			t.Fatalf("undo: %v", got)
		}
	})
	t.Run("changed since: undo refuses", func(t *testing.T) {
		sb, s := changeFixture(t)
		_, _, comp := invokeCompensated(t, s, "fs.write", map[string]any{"path": "hello.txt", "content": "bye"})
		must(t, os.WriteFile(filepath.Join(sb.ws, "hello.txt"), []byte("someone else"), 0o644))
		if err := s.ws.undo(comp); !errors.Is(err, ErrUndoConflict) {
			t.Fatalf("undo = %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(sb.ws, "hello.txt")); string(b) != "someone else" {
			t.Fatalf("undo overwrote a later change: %q", b)
		}
	})
	// Session 11 (trust11a): the removal of a file the step created
	// checked the checksum of a regular file only; one replaced since by
	// a link, a FIFO or an empty directory was removed, a later change
	// lost.
	t.Run("created file replaced since by another kind: undo refuses", func(t *testing.T) {
		for kind, make := range map[string]func(string) error{
			"link": func(p string) error { return os.Symlink("hello.txt", p) },
			"fifo": func(p string) error { return syscall.Mkfifo(p, 0o644) },
			"dir":  func(p string) error { return os.Mkdir(p, 0o755) },
		} {
			sb, s := changeFixture(t)
			_, e, comp := invokeCompensated(t, s, "fs.write", map[string]any{"path": "new.txt", "content": "new"})
			if e != nil || comp == nil || comp.Undo[0].Op != UndoRemove {
				t.Fatalf("write: %v, %+v", e, comp)
			}
			p := filepath.Join(sb.ws, "new.txt")
			must(t, os.Remove(p))
			must(t, make(p))
			if err := s.ws.undo(comp); !errors.Is(err, ErrUndoConflict) {
				t.Errorf("%s: undo = %v", kind, err)
			}
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s: the undo removed the later entry: %v", kind, err)
			}
		}
	})
	t.Run("moved file replaced since by a link: undo refuses", func(t *testing.T) {
		sb, s := changeFixture(t)
		_, e, comp := invokeCompensated(t, s, "fs.move", map[string]any{"from": "hello.txt", "to": "moved.txt"})
		if e != nil || comp == nil || comp.Undo[0].Op != UndoRename {
			t.Fatalf("move: %v, %+v", e, comp)
		}
		p := filepath.Join(sb.ws, "moved.txt")
		must(t, os.Remove(p))
		must(t, os.Symlink("elsewhere", p))
		if err := s.ws.undo(comp); !errors.Is(err, ErrUndoConflict) {
			t.Errorf("undo = %v", err)
		}
		if _, err := os.Lstat(filepath.Join(sb.ws, "hello.txt")); err == nil {
			t.Error("the undo moved the later link back")
		}
	})
	t.Run("unchanged content: nothing to undo", func(t *testing.T) {
		_, s := changeFixture(t)
		_, e, comp := invokeCompensated(t, s, "fs.write", map[string]any{"path": "hello.txt", "content": "hello\n"})
		if e != nil || comp != nil {
			t.Fatalf("write: %v, %+v", e, comp)
		}
	})
	t.Run("too large to replace reversibly", func(t *testing.T) {
		sb, s := changeFixture(t)
		s.tools["fs.write"].tool.(*fsWrite).maxUndo = 100
		_, e, _ := invokeCompensated(t, s, "fs.write", map[string]any{"path": "big", "content": "x"})
		if e.GetCode() != string(wire.CodeInvalidArgument) {
			t.Fatalf("code %v", e)
		}
		if fi, _ := os.Stat(filepath.Join(sb.ws, "big")); fi.Size() != 1025 {
			t.Fatal("big was replaced")
		}
	})
	t.Run("compensation not stored: nothing changed", func(t *testing.T) {
		sb, s := changeFixture(t)
		g := &gate{compensate: func(*Compensation) error { return errors.New("store down") }}
		ctx := context.WithValue(context.Background(), gateKey{}, g)
		for tool, args := range map[string]map[string]any{
			"fs.write":  {"path": "hello.txt", "content": "bye"},
			"fs.delete": {"path": "hello.txt"},
			"fs.move":   {"from": "hello.txt", "to": "moved.txt"},
		} {
			before := snapshot(t, sb.ws)
			_, e := s.tools[tool].tool.Invoke(ctx, args)
			if e.GetCode() != string(wire.CodeToolFailure) || e.GetDetails().AsMap()["changed"] != false {
				t.Fatalf("%s: %v", tool, e)
			}
			if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
				t.Fatalf("%s changed the workspace without its compensation", tool)
			}
		}
	})
}

// TestChangeAttacks sends the ways out of the workspace to fs.delete and
// fs.move, including a symbolic link swapped in during the call.
func TestChangeAttacks(t *testing.T) {
	t.Parallel()
	const (
		denied   = wire.CodePermissionDenied
		invalid  = wire.CodeInvalidArgument
		notFound = wire.CodeNotFound
	)
	paths := []struct {
		name string
		path string
		code wire.Code
		// codeTo is the code as fs.move's destination, when different.
		codeTo *wire.Code
	}{
		{"parent", "../outside.txt", denied, nil},
		{"parent of a subdirectory", "a/../../outside.txt", denied, nil},
		{"dot dot", "..", denied, nil},
		{"absolute system file", "/etc/passwd", denied, nil},
		{"backslash absolute", `\etc\passwd`, denied, nil},
		{"through an absolute directory symlink", "dirlink-abs/f.txt", denied, nil},
		{"through a relative directory symlink", "dirlink-rel/f.txt", denied, nil},
		{"through a symlink to the parent", "up/outside.txt", denied, nil},
		{"percent-encoded parent", "%2e%2e/outside.txt", notFound, nil},
		// Not decoded: a file name in the workspace, where a move may go.
		{"percent-encoded slash", "..%2foutside.txt", notFound, new(wire.Code)},
		{"NUL byte", "../outside.txt\x00", invalid, nil},
		{"invalid UTF-8", "\xff", invalid, nil},
	}
	for _, tt := range paths {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"fs.delete", map[string]any{"path": tt.path}},
			{"fs.delete", map[string]any{"path": tt.path, "recursive": true}},
			{"fs.move", map[string]any{"from": tt.path, "to": "moved"}},
			{"fs.move", map[string]any{"from": "mine.txt", "to": tt.path}},
		} {
			t.Run(c.tool+"/"+tt.name, func(t *testing.T) {
				sb := newSandbox(t)
				sb.links(t)
				must(t, os.WriteFile(filepath.Join(sb.ws, "mine.txt"), []byte("mine"), 0o644))
				s := newService(t, sb.ws)
				before := snapshot(t, sb.ws)
				r := run(t, s, c.tool, c.args)
				want := tt.code
				if c.tool == "fs.move" && c.args["to"] == tt.path && tt.codeTo != nil {
					want = *tt.codeTo
				}
				if got := codeOf(r); got != string(want) {
					t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), want)
				}
				sb.untouched(t)
				if got := snapshot(t, sb.ws); want != "" && !maps.Equal(got, before) {
					t.Fatalf("the workspace changed")
				}
			})
		}
	}
	// Links that lead out: the link itself is deleted or moved, never what
	// it points to.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs.delete", map[string]any{"path": "link-abs"}},
		{"fs.delete", map[string]any{"path": "dirlink-abs", "recursive": true}},
		{"fs.delete", map[string]any{"path": "up", "recursive": true}},
		{"fs.move", map[string]any{"from": "dirlink-rel", "to": "moved"}},
	} {
		t.Run(c.tool+"/link itself "+fmt.Sprint(c.args), func(t *testing.T) {
			sb := newSandbox(t)
			sb.links(t)
			s := newService(t, sb.ws)
			if r := run(t, s, c.tool, c.args); codeOf(r) != "" {
				t.Fatalf("code %s: %s", codeOf(r), r.GetError().GetMessage())
			}
			sb.untouched(t)
		})
	}
	// Replacing a link with a file is refused: fs.move never replaces.
	t.Run("fs.move/onto a link", func(t *testing.T) {
		sb := newSandbox(t)
		sb.links(t)
		must(t, os.WriteFile(filepath.Join(sb.ws, "mine.txt"), []byte("mine"), 0o644))
		s := newService(t, sb.ws)
		if r := run(t, s, "fs.move", map[string]any{"from": "mine.txt", "to": "link-abs"}); codeOf(r) != string(invalid) {
			t.Fatalf("code %s", codeOf(r))
		}
		sb.untouched(t)
	})

	// A directory on the path is replaced by a symbolic link leading out
	// after the checks and before the effect: os.Root still refuses.
	swap := func(tb testing.TB, sb sandbox) func() {
		return func() {
			d := filepath.Join(sb.ws, "d")
			must(tb, os.RemoveAll(d))
			must(tb, os.Symlink(sb.outdir, d))
		}
	}
	for _, c := range []struct {
		name string
		tool string
		args map[string]any
		want []wire.Code
	}{
		{"delete a file in it", "fs.delete", map[string]any{"path": "d/f.txt"}, []wire.Code{denied}},
		{"delete it recursively", "fs.delete", map[string]any{"path": "d", "recursive": true}, []wire.Code{wire.CodeToolFailure}},
		{"move a file out of it", "fs.move", map[string]any{"from": "d/f.txt", "to": "g.txt"}, []wire.Code{denied, wire.CodeToolFailure}},
		{"move a file into it", "fs.move", map[string]any{"from": "mine.txt", "to": "d/new.txt"}, []wire.Code{denied}},
	} {
		t.Run("swapped symlink/"+c.name, func(t *testing.T) {
			sb := newSandbox(t)
			must(t, os.MkdirAll(filepath.Join(sb.ws, "d"), 0o755))
			must(t, os.WriteFile(filepath.Join(sb.ws, "d", "f.txt"), []byte("inside"), 0o644))
			must(t, os.WriteFile(filepath.Join(sb.ws, "mine.txt"), []byte("mine"), 0o644))
			s := newService(t, sb.ws)
			switch tool := s.tools[c.tool].tool.(type) {
			case *fsDelete:
				tool.hook = swap(t, sb)
			case *fsMove:
				tool.hook = swap(t, sb)
			}
			r := run(t, s, c.tool, c.args)
			got := wire.Code(codeOf(r))
			if !containsCode(c.want, got) {
				t.Fatalf("code = %q (%s), want one of %v", got, r.GetError().GetMessage(), c.want)
			}
			sb.untouched(t)
			if _, err := os.Stat(filepath.Join(sb.ws, "mine.txt")); c.tool == "fs.move" && err != nil {
				t.Fatalf("mine.txt moved out: %v", err)
			}
		})
	}
}

func containsCode(codes []wire.Code, c wire.Code) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

// TestUndoConflicts: an undo that would overwrite a later change refuses.
func TestUndoConflicts(t *testing.T) {
	t.Parallel()
	sb, s := changeFixture(t)
	for _, c := range []Compensation{
		{Undo: []UndoAction{{Op: UndoRestore, Path: "hello.txt", Entry: &SavedEntry{Type: EntryFile}}}},                       // exists, no checksum
		{Undo: []UndoAction{{Op: UndoRemove, Path: "hello.txt", Checksum: "sha256:00"}}},                                      // changed
		{Undo: []UndoAction{{Op: UndoRename, Path: "hello.txt", From: "empty"}}},                                              // target exists
		{Undo: []UndoAction{{Op: UndoRename, Path: "x", From: "hello.txt", Checksum: "sha256:00"}}},                           // source changed
		{Undo: []UndoAction{{Op: "chmod", Path: "hello.txt"}}},                                                                // unknown
		{Undo: []UndoAction{{Op: UndoRemove, Path: "../outside.txt"}}},                                                        // outside
		{Undo: []UndoAction{{Op: UndoRestore, Path: "x", Entry: &SavedEntry{Type: "device"}}}},                                // unknown type
		{Undo: []UndoAction{{Op: UndoRemove, Path: "sub"}}},                                                                   // not empty
		{Undo: []UndoAction{{Op: UndoRestore, Path: "dirlink/x", Entry: &SavedEntry{Type: EntryFile, Content: []byte("x")}}}}, // missing parent
	} {
		before := snapshot(t, sb.ws)
		if err := s.ws.undo(&c); err == nil {
			t.Errorf("undo %+v succeeded", c.Undo[0])
		}
		if got := snapshot(t, sb.ws); !maps.Equal(got, before) {
			t.Errorf("undo %+v changed the workspace", c.Undo[0])
		}
	}
	sb.untouched(t)
}
