package executor

import (
	"context"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// fixture fills a workspace with the files the fs tool tests use.
func fixture(tb testing.TB, ws string) {
	tb.Helper()
	files := map[string]string{
		"hello.txt":     "hello\n",
		"bin.dat":       "\xff\x00\x01",
		"empty":         "",
		"sub/dir/n.txt": "nested",
		"big":           strings.Repeat("x", 1025),
		"escapey":       strings.Repeat("\x01", 600), // 600 bytes, 3600 as JSON
	}
	for name, content := range files {
		p := filepath.Join(ws, name)
		must(tb, os.MkdirAll(filepath.Dir(p), 0o755))
		must(tb, os.WriteFile(p, []byte(content), 0o644))
	}
	must(tb, os.Symlink("hello.txt", filepath.Join(ws, "alias")))
	must(tb, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
}

func TestFSRead(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	fixture(t, sb.ws)
	s := newService(t, sb.ws)
	tests := []struct {
		name     string
		args     map[string]any
		code     wire.Code
		want     ReadResult
		wantData string // decoded content
		notKept  string // read, but its result was not kept, and why
	}{
		{name: "text", args: map[string]any{"path": "hello.txt"}, want: ReadResult{Path: "hello.txt", Encoding: EncodingUTF8, Size: 6}, wantData: "hello\n"},
		// The policy judged the path as written: only its clean form is taken.
		{name: "path not in clean form", args: map[string]any{"path": "./sub/../hello.txt"}, code: wire.CodeInvalidArgument},
		{name: "trailing dot segment", args: map[string]any{"path": "hello.txt/."}, code: wire.CodeInvalidArgument},
		{name: "nested", args: map[string]any{"path": "sub/dir/n.txt"}, want: ReadResult{Path: "sub/dir/n.txt", Encoding: EncodingUTF8, Size: 6}, wantData: "nested"},
		{name: "binary is base64", args: map[string]any{"path": "bin.dat"}, want: ReadResult{Path: "bin.dat", Encoding: EncodingBase64, Size: 3}, wantData: "\xff\x00\x01"},
		{name: "empty file", args: map[string]any{"path": "empty"}, want: ReadResult{Path: "empty", Encoding: EncodingUTF8}},
		// A link inside is not followed: the policy judged "alias"; the
		// refusal names hello.txt.
		{name: "symlink inside", args: map[string]any{"path": "alias"}, code: wire.CodeInvalidArgument},
		{name: "missing", args: map[string]any{"path": "nope.txt"}, code: wire.CodeNotFound},
		{name: "missing dir", args: map[string]any{"path": "nope/x.txt"}, code: wire.CodeNotFound},
		{name: "directory", args: map[string]any{"path": "sub"}, code: wire.CodeInvalidArgument},
		{name: "workspace itself", args: map[string]any{"path": "."}, code: wire.CodeInvalidArgument},
		{name: "trailing slash", args: map[string]any{"path": "hello.txt/"}, code: wire.CodeInvalidArgument},
		{name: "file as parent", args: map[string]any{"path": "hello.txt/x"}, code: wire.CodeInvalidArgument},
		{name: "fifo", args: map[string]any{"path": "fifo"}, code: wire.CodeInvalidArgument},
		{name: "file over the cap", args: map[string]any{"path": "big"}, code: wire.CodeOutputTooLarge},
		// Read, but its JSON encoding is over the cap: a success that
		// says its result was not kept.
		{name: "JSON over the cap", args: map[string]any{"path": "escapey"}, notKept: NotKeptTooLarge},
		{name: "no path", args: map[string]any{}, code: wire.CodeInvalidArgument},
		{name: "path not a string", args: map[string]any{"path": 7}, code: wire.CodeInvalidArgument},
		{name: "unknown argument", args: map[string]any{"path": "hello.txt", "offset": 1}, code: wire.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := exec(t, s, "fs.read", tt.args)
			if got := codeOf(r); got != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), tt.code)
			}
			if got := notKeptOf(r); got != tt.notKept {
				t.Fatalf("result not kept for %q, want %q", got, tt.notKept)
			}
			if tt.code != "" || tt.notKept != "" {
				return
			}
			got := resultAs[ReadResult](t, r)
			data := got.Content
			if got.Encoding == EncodingBase64 {
				b, err := base64.StdEncoding.DecodeString(got.Content)
				must(t, err)
				data = string(b)
			}
			if data != tt.wantData {
				t.Errorf("content = %q, want %q", data, tt.wantData)
			}
			if got.Checksum != checksum([]byte(tt.wantData)) {
				t.Errorf("checksum = %s", got.Checksum)
			}
			got.Content, got.Checksum = "", ""
			if got != tt.want {
				t.Errorf("result = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFSWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    map[string]any
		code    wire.Code
		created bool
		file    string // path whose content is checked afterwards
		content string // expected content of file
		prev    string // expected previous content, when replaced
	}{
		{name: "create", args: map[string]any{"path": "new.txt", "content": "abc"}, created: true, file: "new.txt", content: "abc"},
		{name: "create empty", args: map[string]any{"path": "e.txt", "content": ""}, created: true, file: "e.txt"},
		{name: "create with dirs", args: map[string]any{"path": "a/b/c.txt", "content": "deep"}, created: true, file: "a/b/c.txt", content: "deep"},
		{name: "create in existing dir", args: map[string]any{"path": "sub/x.txt", "content": "x", "create_dirs": false}, created: true, file: "sub/x.txt", content: "x"},
		{name: "replace", args: map[string]any{"path": "hello.txt", "content": "bye"}, file: "hello.txt", content: "bye", prev: "hello\n"},
		{name: "same content", args: map[string]any{"path": "hello.txt", "content": "hello\n"}, file: "hello.txt", content: "hello\n", prev: "hello\n"},
		{name: "no dirs created", args: map[string]any{"path": "a/b/c.txt", "content": "x", "create_dirs": false}, code: wire.CodeNotFound, file: "a", content: "-"},
		{name: "directory target", args: map[string]any{"path": "sub", "content": "x"}, code: wire.CodeInvalidArgument},
		{name: "workspace itself", args: map[string]any{"path": ".", "content": "x"}, code: wire.CodeInvalidArgument},
		{name: "trailing slash", args: map[string]any{"path": "dir/", "content": "x"}, code: wire.CodeInvalidArgument, file: "dir", content: "-"},
		{name: "file as parent", args: map[string]any{"path": "hello.txt/x.txt", "content": "x"}, code: wire.CodeInvalidArgument, file: "hello.txt", content: "hello\n"},
		{name: "file as parent no dirs", args: map[string]any{"path": "hello.txt/x.txt", "content": "x", "create_dirs": false}, code: wire.CodeInvalidArgument, file: "hello.txt", content: "hello\n"},
		{name: "symlink target", args: map[string]any{"path": "alias", "content": "x"}, code: wire.CodeInvalidArgument, file: "hello.txt", content: "hello\n"},
		{name: "fifo target", args: map[string]any{"path": "fifo", "content": "x"}, code: wire.CodeInvalidArgument},
		{name: "content over the cap", args: map[string]any{"path": "n.txt", "content": strings.Repeat("x", 1025)}, code: wire.CodeInvalidArgument, file: "n.txt", content: "-"},
		{name: "no content", args: map[string]any{"path": "n.txt"}, code: wire.CodeInvalidArgument, file: "n.txt", content: "-"},
		{name: "content not a string", args: map[string]any{"path": "n.txt", "content": 1}, code: wire.CodeInvalidArgument, file: "n.txt", content: "-"},
		{name: "create_dirs not a bool", args: map[string]any{"path": "n.txt", "content": "x", "create_dirs": "yes"}, code: wire.CodeInvalidArgument, file: "n.txt", content: "-"},
		{name: "unknown argument", args: map[string]any{"path": "n.txt", "content": "x", "mode": "0777"}, code: wire.CodeInvalidArgument, file: "n.txt", content: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := newSandbox(t)
			fixture(t, sb.ws)
			must(t, os.Chmod(filepath.Join(sb.ws, "hello.txt"), 0o600))
			before, err := os.Stat(filepath.Join(sb.ws, "hello.txt"))
			must(t, err)
			s := newService(t, sb.ws)
			r := exec(t, s, "fs.write", tt.args)
			if got := codeOf(r); got != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), tt.code)
			}
			noTempFiles(t, sb.ws)
			sb.untouched(t)
			if tt.file != "" {
				got, err := os.ReadFile(filepath.Join(sb.ws, tt.file))
				switch {
				case tt.content == "-" && !os.IsNotExist(err):
					t.Fatalf("%s exists: %v", tt.file, err)
				case tt.content != "-" && (err != nil || string(got) != tt.content):
					t.Fatalf("%s = %q, %v; want %q", tt.file, got, err, tt.content)
				}
			}
			if tt.code != "" {
				return
			}
			res := resultAs[WriteResult](t, r)
			content := tt.args["content"].(string)
			want := WriteResult{Path: tt.args["path"].(string), BytesWritten: int64(len(content)), Checksum: checksum([]byte(content)), Created: tt.created}
			if tt.prev != "" {
				want.PreviousChecksum = checksum([]byte(tt.prev))
			}
			if res != want {
				t.Fatalf("result = %+v, want %+v", res, want)
			}
			if tt.prev != "" {
				after, err := os.Stat(filepath.Join(sb.ws, "hello.txt"))
				must(t, err)
				if after.Mode().Perm() != 0o600 {
					t.Errorf("mode = %v, want the replaced file's 0600", after.Mode().Perm())
				}
				// An unchanged file is not rewritten at all.
				if same := os.SameFile(before, after); same != (tt.prev == content) {
					t.Errorf("same inode = %v", same)
				}
			}
		})
	}
}

// TestFSWriteIdempotent repeats a write: the second call changes nothing.
func TestFSWriteIdempotent(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	s := newService(t, sb.ws)
	args := map[string]any{"path": "d/f.txt", "content": "same"}
	first := resultAs[WriteResult](t, exec(t, s, "fs.write", args))
	second := resultAs[WriteResult](t, exec(t, s, "fs.write", args))
	if !first.Created || second.Created || second.Checksum != first.Checksum || second.PreviousChecksum != first.Checksum {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	noTempFiles(t, sb.ws)
}

// TestFSWriteNotCommitted checks that a write whose deadline passed before
// its commit point changes nothing and leaves no temporary file.
func TestFSWriteNotCommitted(t *testing.T) {
	t.Parallel()
	abandoned := &gate{}
	abandoned.abandon()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, ctx := range map[string]context.Context{
		"cancelled":         cancelled,
		"abandoned at gate": context.WithValue(context.Background(), gateKey{}, abandoned),
	} {
		t.Run(name, func(t *testing.T) {
			sb := newSandbox(t)
			must(t, os.WriteFile(filepath.Join(sb.ws, "keep.txt"), []byte("old"), 0o644))
			s := newService(t, sb.ws)
			w := s.tools["fs.write"].tool
			for _, p := range []string{"new.txt", "keep.txt"} {
				_, e := w.Invoke(ctx, map[string]any{"path": p, "content": "new"})
				if e.GetCode() != string(wire.CodeTimeout) {
					t.Fatalf("%s: code = %v", p, e)
				}
			}
			if got := names(t, sb.ws); len(got) != 1 || got[0] != "keep.txt" {
				t.Fatalf("workspace holds %v", got)
			}
			if b, _ := os.ReadFile(filepath.Join(sb.ws, "keep.txt")); string(b) != "old" {
				t.Fatalf("keep.txt = %q", b)
			}
		})
	}
}

func TestFSList(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	fixture(t, sb.ws)
	must(t, os.Mkdir(filepath.Join(sb.ws, "emptydir"), 0o755))
	s := newService(t, sb.ws)
	root := []ListEntry{
		{Name: "alias", Type: EntrySymlink},
		{Name: "big", Type: EntryFile, Size: 1025},
		{Name: "bin.dat", Type: EntryFile, Size: 3},
		{Name: "empty", Type: EntryFile},
		{Name: "emptydir", Type: EntryDir},
		{Name: "escapey", Type: EntryFile, Size: 600},
		{Name: "fifo", Type: EntryOther},
		{Name: "hello.txt", Type: EntryFile, Size: 6},
		{Name: "sub", Type: EntryDir},
	}
	tests := []struct {
		name string
		args map[string]any
		code wire.Code
		want ListResult
	}{
		{name: "default is the workspace", args: map[string]any{}, want: ListResult{Path: ".", Entries: root, Total: len(root)}},
		{name: "dot", args: map[string]any{"path": "."}, want: ListResult{Path: ".", Entries: root, Total: len(root)}},
		{name: "subdirectory", args: map[string]any{"path": "sub"}, want: ListResult{Path: "sub", Entries: []ListEntry{{Name: "dir", Type: EntryDir}}, Total: 1}},
		{name: "trailing slash", args: map[string]any{"path": "sub/"}, code: wire.CodeInvalidArgument},
		{name: "nested", args: map[string]any{"path": "sub/dir"}, want: ListResult{Path: "sub/dir", Entries: []ListEntry{{Name: "n.txt", Type: EntryFile, Size: 6}}, Total: 1}},
		{name: "empty directory", args: map[string]any{"path": "emptydir"}, want: ListResult{Path: "emptydir", Entries: []ListEntry{}}},
		{name: "file", args: map[string]any{"path": "hello.txt"}, code: wire.CodeInvalidArgument},
		{name: "fifo", args: map[string]any{"path": "fifo"}, code: wire.CodeInvalidArgument},
		{name: "missing", args: map[string]any{"path": "nope"}, code: wire.CodeNotFound},
		{name: "empty path", args: map[string]any{"path": ""}, code: wire.CodeInvalidArgument},
		{name: "path not a string", args: map[string]any{"path": true}, code: wire.CodeInvalidArgument},
		{name: "unknown argument", args: map[string]any{"recursive": true}, code: wire.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := exec(t, s, "fs.list", tt.args)
			if got := codeOf(r); got != string(tt.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), tt.code)
			}
			if tt.code != "" {
				return
			}
			// entries is always a JSON array, never null.
			if r.GetSuccess().GetResult().GetStructValue().GetFields()["entries"].GetListValue() == nil {
				t.Fatal("entries is not a list")
			}
			got := resultAs[ListResult](t, r)
			if !equalList(got, tt.want) {
				t.Fatalf("result = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFSListTruncated(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	for _, n := range []string{"c", "a", "d", "b"} {
		must(t, os.WriteFile(filepath.Join(sb.ws, n), nil, 0o644))
	}
	ws, err := openWorkspace(sb.ws)
	must(t, err)
	defer func() { _ = ws.close() }()
	res, e := (&fsList{ws: ws, maxEntries: 2, maxBytes: 1024}).Invoke(context.Background(), map[string]any{})
	if e != nil {
		t.Fatal(e)
	}
	want := ListResult{Path: ".", Entries: []ListEntry{{Name: "a", Type: EntryFile}, {Name: "b", Type: EntryFile}}, Total: 4, Truncated: true}
	if got := res.(ListResult); !equalList(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestFSListLargeDirectory: entries are read a chunk at a time and only
// the first ones by name are kept; the result is the same as reading the
// directory whole.
func TestFSListLargeDirectory(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t)
	var names []string
	for i := range 57 {
		n := fmt.Sprintf("f%03d", (i*37)%57)
		names = append(names, n)
		must(t, os.WriteFile(filepath.Join(sb.ws, n), nil, 0o644))
	}
	slices.Sort(names)
	ws, err := openWorkspace(sb.ws)
	must(t, err)
	defer func() { _ = ws.close() }()
	for _, c := range []struct{ max, chunk int }{{3, 2}, {5, 7}, {57, 4}, {100, 1}} {
		res, e := (&fsList{ws: ws, maxEntries: c.max, maxBytes: 1 << 20, chunk: c.chunk}).Invoke(context.Background(), map[string]any{})
		if e != nil {
			t.Fatal(e)
		}
		want := ListResult{Path: ".", Total: 57, Truncated: c.max < 57}
		for _, n := range names[:min(c.max, 57)] {
			want.Entries = append(want.Entries, ListEntry{Name: n, Type: EntryFile})
		}
		if got := res.(ListResult); !equalList(got, want) {
			t.Fatalf("max %d, chunk %d: got %+v", c.max, c.chunk, got)
		}
	}
}

func equalList(a, b ListResult) bool {
	if a.Path != b.Path || a.Total != b.Total || a.Truncated != b.Truncated || len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		if a.Entries[i] != b.Entries[i] {
			return false
		}
	}
	return true
}

// noTempFiles fails the test if an atomic write left a temporary file.
func noTempFiles(tb testing.TB, ws string) {
	tb.Helper()
	must(tb, filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".xct-") {
			tb.Errorf("temporary file left behind: %s", p)
		}
		return nil
	}))
}
