package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// maxListEntries bounds the entries fs.list returns.
const maxListEntries = 1000

// Encodings of ReadResult.Content.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// Entry types of ListEntry.Type.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	EntryOther   = "other"
)

// ReadResult is the result of fs.read.
type ReadResult struct {
	// Path is the file's clean path relative to the workspace.
	Path string `json:"path"`
	// Content is the file's bytes: the text itself when they are valid
	// UTF-8, otherwise their standard base64 encoding.
	Content string `json:"content"`
	// Encoding is EncodingUTF8 or EncodingBase64.
	Encoding string `json:"encoding"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
	// Checksum is "sha256:" and the hex SHA-256 of the file's bytes, or
	// its redaction marker when they hold a secret (digest.go).
	Checksum string `json:"checksum"`
}

// WriteResult is the result of fs.write.
type WriteResult struct {
	// Path is the file's clean path relative to the workspace.
	Path string `json:"path"`
	// BytesWritten is the length of the content the file now holds.
	BytesWritten int64 `json:"bytes_written"`
	// Checksum is "sha256:" and the hex SHA-256 of the content (its
	// redaction marker when the content holds a secret, as for
	// PreviousChecksum: digest.go).
	Checksum string `json:"checksum"`
	// Created says that the file did not exist before.
	Created bool `json:"created"`
	// PreviousChecksum is the checksum of the file this write replaced,
	// empty when Created. Equal to Checksum when the file already held the
	// content: then nothing was written.
	PreviousChecksum string `json:"previous_checksum,omitempty"`
}

// ListResult is the result of fs.list.
type ListResult struct {
	// Path is the directory's clean path relative to the workspace.
	Path string `json:"path"`
	// Entries are the directory's entries sorted by name, at most 1000.
	Entries []ListEntry `json:"entries"`
	// Total is the number of entries in the directory.
	Total int `json:"total"`
	// Truncated says that Entries holds only the first entries.
	Truncated bool `json:"truncated"`
}

// ListEntry is one entry of a directory.
type ListEntry struct {
	// Name is the entry's name in its directory.
	Name string `json:"name"`
	// Type is EntryFile, EntryDir, EntrySymlink (not followed) or EntryOther.
	Type string `json:"type"`
	// Size is a file's length in bytes, 0 for other types.
	Size int64 `json:"size"`
}

// builtinTools are the file tools over ws; maxBytes caps what they read
// and write, maxUndo what they save to undo a change.
func builtinTools(ws *workspace, maxBytes, maxUndo int64) []Tool {
	return []Tool{
		&fsRead{ws: ws, maxBytes: maxBytes},
		&fsWrite{ws: ws, maxBytes: maxBytes, maxUndo: maxUndo},
		&fsList{ws: ws, maxEntries: maxListEntries, maxBytes: maxBytes},
		&fsDelete{ws: ws, maxBytes: maxBytes, maxUndo: maxUndo, maxEntries: maxDeleteEntries},
		&fsMove{ws: ws, maxBytes: maxBytes},
	}
}

// fsRead is the fs.read tool.
type fsRead struct {
	ws       *workspace
	maxBytes int64
}

const fsReadSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path relative to the workspace."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

func (t *fsRead) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "fs.read",
		Description: "Read a file in the workspace. Returns path, content (the text, or base64 when encoding is \"base64\" " +
			"because the file is not valid UTF-8), encoding, size in bytes and checksum (\"sha256:<hex>\").",
		InputSchema:    fsReadSchema,
		Effect:         xctv1.Effect_EFFECT_READ,
		Idempotent:     true,
		MaxOutputBytes: t.maxBytes,
	}
}

func (t *fsRead) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "path"); e != nil {
		return nil, e
	}
	p, e := stringArg(args, "path", nil)
	if e != nil {
		return nil, e
	}
	name, e := t.ws.cleanFile(p)
	if e != nil {
		return nil, e
	}
	if e := t.ws.direct(p, name, true); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	f, fi, e := t.ws.openStat(name, p)
	if e != nil {
		return nil, e
	}
	defer func() { _ = f.Close() }()
	if e := regularFile(p, fi, ": use fs.list to see its entries"); e != nil {
		return nil, e
	}
	if e := notHardLinked(p, fi); e != nil {
		return nil, e
	}
	if fi.Size() > t.maxBytes {
		return nil, tooLarge(p, fi.Size(), t.maxBytes)
	}
	// The limit also holds if the file grows while it is read.
	data, err := io.ReadAll(io.LimitReader(f, t.maxBytes+1))
	if err != nil {
		return nil, t.ws.fail(p, err)
	}
	if int64(len(data)) > t.maxBytes {
		return nil, tooLarge(p, int64(len(data)), t.maxBytes)
	}
	res := ReadResult{Path: filepath.ToSlash(name), Size: int64(len(data)), Checksum: t.ws.shownSum(data, checksum(data))}
	if utf8.Valid(data) {
		res.Content, res.Encoding = string(data), EncodingUTF8
	} else {
		res.Content, res.Encoding = base64.StdEncoding.EncodeToString(data), EncodingBase64
	}
	return res, nil
}

// fsWrite is the fs.write tool. Before replacing a file it saves the
// file's content and mode in the step's compensation, so the write can be
// undone; a file larger than maxUndo is not replaced.
type fsWrite struct {
	ws       *workspace
	maxBytes int64
	maxUndo  int64
	// swapped, when set (tests only), runs right after the new content
	// is exchanged in for an existing file, before what was swapped out
	// is checked.
	swapped func()
}

const fsWriteSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path relative to the workspace."},
    "content": {"type": "string", "description": "The file's complete new content, as text."},
    "create_dirs": {"type": "boolean", "default": true, "description": "Create missing parent directories."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`

func (t *fsWrite) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "fs.write",
		Description: "Create or replace a file in the workspace with the given text, atomically. " +
			"Returns path, bytes_written, checksum (\"sha256:<hex>\"), created, and previous_checksum when a file was replaced.",
		InputSchema:    fsWriteSchema,
		Effect:         xctv1.Effect_EFFECT_REVERSIBLE,
		Idempotent:     true,
		MaxOutputBytes: t.maxBytes,
	}
}

func (t *fsWrite) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "path", "content", "create_dirs"); e != nil {
		return nil, e
	}
	p, e := stringArg(args, "path", nil)
	if e != nil {
		return nil, e
	}
	content, e := stringArg(args, "content", nil)
	if e != nil {
		return nil, e
	}
	createDirs, e := boolArg(args, "create_dirs", true)
	if e != nil {
		return nil, e
	}
	if int64(len(content)) > t.maxBytes {
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"content is %d bytes, the limit is %d", len(content), t.maxBytes),
			map[string]any{"size": len(content), "limit": t.maxBytes})
	}
	name, e := t.ws.cleanFile(p)
	if e != nil {
		return nil, e
	}
	if e := optionLikeName(p, name); e != nil {
		return nil, e
	}
	if e := t.ws.checkProtected(p, name); e != nil {
		return nil, e
	}
	if strings.Contains(content, elfMagic) {
		return nil, elfRefused(p, "its content")
	}
	if e := nestedTooDeep(p, pathDepth(filepath.Dir(name))); e != nil {
		return nil, e
	}
	if e := t.ws.direct(p, name, false); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	dir := filepath.Dir(name)
	// The directory is reached without following a symbolic link, and the
	// file is written relative to it: a link swapped in on the path after
	// the checks above makes the write fail, never land where it leads.
	var pd *wsDir
	var createdDirs []string // deepest first
	if createDirs {
		var err error
		if pd, createdDirs, err = t.ws.mkdirAll(dir); err != nil {
			if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) { // a file where a directory should be
				return nil, pathErr(wire.CodeInvalidArgument, p, "a parent of %q is not a directory", p)
			}
			return nil, t.ws.refuse(p, name, false, err)
		}
	} else {
		var err error
		pd, err = t.ws.openDir(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, pathErr(wire.CodeNotFound, p, "the directory of %q does not exist: set create_dirs to create it", p)
		case errors.Is(err, syscall.ENOTDIR):
			return nil, pathErr(wire.CodeInvalidArgument, p, "a parent of %q is not a directory", p)
		case err != nil:
			return nil, t.ws.refuse(p, name, false, err)
		}
	}
	defer pd.close()
	base := filepath.Base(name)

	res := WriteResult{Path: filepath.ToSlash(name), BytesWritten: int64(len(content)), Checksum: checksum([]byte(content))}
	perm := fs.FileMode(0o644)
	comp := &Compensation{Tool: "fs.write"}
	var prevContent []byte // the content replaced
	switch fi, err := pd.lstat(base); {
	case errors.Is(err, fs.ErrNotExist):
		if e := checkPreviewBase(ctx, p, BaseAbsent); e != nil {
			return nil, e
		}
		res.Created = true
		comp.Undo = append(comp.Undo, UndoAction{Op: UndoRemove, Path: res.Path, Checksum: res.Checksum})
	case err != nil:
		return nil, t.ws.fail(p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		// Rename would replace the link, not its target; refuse instead of
		// guessing. A link that leads out is reported as such.
		if _, err := t.ws.root.Stat(name); t.ws.escapes(err) {
			return nil, t.ws.fail(p, err)
		}
		return nil, pathErr(wire.CodeInvalidArgument, p, "%q is a symbolic link: write to the file it points to", p)
	default:
		if e := regularFile(p, fi, ""); e != nil {
			return nil, e
		}
		if e := notHardLinked(p, fi); e != nil {
			return nil, e
		}
		prevContent, err = readEntry(pd, base, fi, t.maxUndo)
		if errors.Is(err, errHardLinked) {
			return nil, hardLinkedErr(p, 2)
		}
		if errors.Is(err, errUndoTooLarge) {
			return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"%q is %d bytes: too large to replace reversibly, the limit is %d", p, fi.Size(), t.maxUndo),
				map[string]any{"path": p, "size": fi.Size(), "limit": t.maxUndo})
		}
		if errors.Is(err, errChanged) {
			return nil, pathErr(wire.CodeToolFailure, p, "%q changed while it was being written; nothing was written", p)
		}
		if err != nil {
			return nil, t.ws.refuse(p, name, false, err)
		}
		if bytes.HasPrefix(prevContent, []byte(elfMagic)) {
			return nil, elfRefused(p, "the file it replaces")
		}
		prev := checksum(prevContent)
		res.PreviousChecksum = prev
		if prev == res.Checksum {
			return t.shown(res, content, prevContent), nil // already holds the content: nothing to do
		}
		// An approved write replaces only the file the approver saw the
		// diff against, read here under the same checks as the write.
		if e := checkPreviewBase(ctx, p, prev); e != nil {
			return nil, e
		}
		perm = fi.Mode().Perm()
		comp.Undo = append(comp.Undo, UndoAction{Op: UndoRestore, Path: res.Path, Checksum: res.Checksum,
			Entry: &SavedEntry{Type: EntryFile, Mode: uint32(perm), Content: prevContent}})
	}
	for _, d := range createdDirs {
		comp.Undo = append(comp.Undo, UndoAction{Op: UndoRemove, Path: filepath.ToSlash(d)})
	}

	tmp, err := tempName(".")
	if err != nil {
		return nil, pathErr(wire.CodeToolFailure, p, "temporary name: %v", err)
	}
	f, err := pd.openFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, t.ws.failIn(p, name, pd, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = f.Close()
			_ = pd.remove(tmp, false)
		}
	}()
	if _, err := io.WriteString(f, content); err != nil {
		return nil, t.ws.fail(p, err)
	}
	if !res.Created {
		_ = f.Chmod(perm) // keep the replaced file's mode despite the umask
	}
	if err := f.Sync(); err != nil {
		return nil, t.ws.fail(p, err)
	}
	ours, err := f.Stat()
	if err != nil {
		return nil, t.ws.fail(p, err)
	}
	if err := f.Close(); err != nil {
		return nil, t.ws.fail(p, err)
	}
	if e := CommitCompensated(ctx, comp); e != nil {
		return nil, e
	}
	if !res.Created {
		renamed = true // swapIn leaves nothing of its own at tmp
		if e := t.swapIn(ctx, p, name, pd, tmp, base, res.PreviousChecksum, ours); e != nil {
			return nil, e
		}
		return t.shown(res, content, prevContent), nil
	}
	// The new file replaces nothing: an entry created at name since the
	// check above (a file of another writer, a link) is left as it is,
	// and the undo, which would remove the file, removes only this one.
	if err := pd.rename(tmp, pd, base, true); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, changedErr(ctx, p, "a file created after the check", "", "written")
		}
		return nil, t.ws.failIn(p, name, pd, err)
	}
	renamed = true
	// Make the rename durable; a failure here does not undo the write.
	pd.sync()
	return t.shown(res, content, nil), nil
}

// elfMagic begins an ELF file: a program, a shared library, a Python
// extension module, a Node addon, a Go plugin; and each object file
// inside a static library (an ar archive, "!<arch>\n" and its members),
// which a build links into its program.
const elfMagic = "\x7fELF"

// elfRefused refuses fs.write of p: its content is or holds an ELF
// file, or the file it replaces is one (what: "its content", "the file
// it replaces"). The dynamic loader runs an object's initialisation
// code as it loads it, and an ELF file can be made of valid UTF-8: on
// main fs.write (reversible, no human) wrote util.so next to util.py
// (Python's importer tries extension modules first) and a Node addon,
// and replaced a build's program (keeping its mode) with a script; git
// ignores them (*.so, build/), no diff shows them, and the next human's
// `python3 main.py`, `node index.js` or `./build/app` ran the model's
// code on the host (session 20). A build makes them; a program (the
// compiler) may. Content holding the magic anywhere is refused (an
// object inside an archive): text never holds the byte 0x7f before
// "ELF".
func elfRefused(p, what string) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%q was not written: %s is an ELF file or holds one (a program, a shared library, a static library's object, a Python extension or Node addon), which is loaded and run without a diff showing it; the fs tools write text only, and do not replace a build's output (the build may)", p, what),
		map[string]any{"path": p, "executable_format": "ELF"})
}

// shown is res as reported: its digests of content that holds a secret
// (the content written, the content replaced) keyed (digest.go).
func (t *fsWrite) shown(res WriteResult, content string, prev []byte) WriteResult {
	res.Checksum = t.ws.shownSum([]byte(content), res.Checksum)
	if res.PreviousChecksum != "" {
		res.PreviousChecksum = t.ws.shownSum(prev, res.PreviousChecksum)
	}
	return res
}

// swapIn puts the new content, written at tmp in pd, in place of the
// file base of pd, which held prev (the checksum of the content the step
// read, checked against an approval's preview and saved for the undo),
// and never replaces anything else. A check of the file followed by a
// rename over it would replace a change made in between (another
// writer's, in the microseconds between the two), and the undo would put
// back content older than that change. So the two entries are exchanged
// in one step (renameat2 RENAME_EXCHANGE: the name is never absent), and
// what was swapped out is what is checked: when it is not prev (changed,
// replaced, deleted or turned into a directory or a link since the read)
// the exchange is undone, the other writer's entry is back at its name,
// and nothing was written. In between, for as long as the check takes,
// the name shows the new content. A writer that holds the old file open
// and writes to it after the check writes to a file no longer named, as
// with any replace by rename.
func (t *fsWrite) swapIn(ctx context.Context, p, name string, pd *wsDir, tmp, base, prev string, ours fs.FileInfo) *xctv1.Error {
	if err := pd.exchange(tmp, base); err != nil {
		removeOurs(pd, tmp, ours)
		if errors.Is(err, fs.ErrNotExist) && t.ws.stillAt(pd) {
			if _, lerr := pd.lstat(base); errors.Is(lerr, fs.ErrNotExist) {
				return changedErr(ctx, p, BaseAbsent, "", "written") // deleted since the read
			}
		}
		return t.ws.failIn(p, name, pd, err)
	}
	if t.swapped != nil {
		t.swapped()
	}
	found := entrySum(pd, tmp, t.maxUndo)
	if found == prev {
		_ = pd.remove(tmp, false) // the replaced file: its content is in the undo
		pd.sync()
		return nil
	}
	// Put back what was there. If the name was taken again meanwhile (our
	// file replaced or removed by yet another writer), what was swapped
	// out is kept under the temporary name, and the error says where.
	kept := ""
	switch err := pd.exchange(tmp, base); {
	case err == nil:
		if !removeOurs(pd, tmp, ours) {
			kept = filepath.ToSlash(filepath.Join(filepath.Dir(name), tmp))
		}
	case pd.rename(tmp, pd, base, true) != nil:
		kept = filepath.ToSlash(filepath.Join(filepath.Dir(name), tmp))
	}
	pd.sync()
	return changedErr(ctx, p, found, kept, "written")
}

// entrySum is the checksum of the regular file base of d, read without
// following a link, or what else is there ("absent", "a directory", "a
// symbolic link", ...); a file over limit bytes is not read.
func entrySum(d *wsDir, base string, limit int64) string {
	fi, err := d.lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return BaseAbsent
	case err != nil:
		return "unreadable"
	case fi.IsDir():
		return "a directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link"
	case !fi.Mode().IsRegular():
		return "not a regular file"
	case fi.Size() > limit:
		return fmt.Sprintf("a file of %d bytes", fi.Size())
	}
	f, err := d.openFile(base, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "unreadable"
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	// A buffer the size of the file (io.Copy's own is 32 KiB).
	n, err := io.CopyBuffer(h, io.LimitReader(f, limit+1), make([]byte, min(fi.Size()+1, 32<<10)))
	switch {
	case err != nil:
		return "unreadable"
	case n > limit:
		return fmt.Sprintf("a file of more than %d bytes", limit)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// removeOurs removes the entry base of d if it is the file ours, and
// reports whether it did (or there was nothing there).
func removeOurs(d *wsDir, base string, ours fs.FileInfo) bool {
	fi, err := d.lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil || !sameEntry(fi, ours) {
		return false
	}
	return d.remove(base, false) == nil
}

// mkdirAll opens the workspace directory dir, creating the missing
// directories on the way, one at a time relative to the one before and
// never through a symbolic link. It returns the directory and the paths
// of those it created, deepest first.
func (w *workspace) mkdirAll(dir string) (*wsDir, []string, error) {
	d, err := w.openDir(".")
	if err != nil {
		return nil, nil, err
	}
	var created []string
	if dir == "." {
		return d, nil, nil
	}
	for _, part := range strings.Split(filepath.ToSlash(dir), "/") {
		next, err := d.sub(part)
		if errors.Is(err, fs.ErrNotExist) {
			if err = d.mkdir(part, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				if err == nil {
					created = append(created, filepath.Join(d.name, part))
				}
				next, err = d.sub(part)
			}
		}
		d.close()
		if err != nil {
			return nil, nil, err
		}
		d = next
	}
	slices.Reverse(created)
	return d, created, nil
}

// readEntry reads the regular file base of d (fi: its lstat), at most
// limit bytes, through a descriptor opened without following a link;
// errChanged if it is no longer the entry fi describes.
func readEntry(d *wsDir, base string, fi fs.FileInfo, limit int64) ([]byte, error) {
	f, err := d.openFile(base, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	ofi, err := f.Stat()
	if err != nil || !sameEntry(fi, ofi) {
		return nil, errChanged
	}
	// Checked on the descriptor read: a link made after the lstat counts.
	if hardLinks(ofi) > 1 {
		return nil, errHardLinked
	}
	return readSaved(f, limit)
}

// errChanged: an entry changed between its stat and its open.
var errChanged = errors.New("changed while the tool ran")

// errHardLinked: a regular file has other names, one of which may be
// outside the workspace; its content is not read (into a result, a
// preview or a compensation a rollback would put back as a plain file).
var errHardLinked = errors.New("has other hard links")

// tempName is a fresh hidden file name in dir for an atomic write.
func tempName(dir string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return filepath.Join(dir, ".xct-"+hex.EncodeToString(b[:])+".tmp"), nil
}

// fsList is the fs.list tool.
type fsList struct {
	ws         *workspace
	maxEntries int
	maxBytes   int64
	// chunk is how many entries are read at a time (0: listChunk).
	chunk int
}

// listChunk is how many directory entries fs.list reads at a time: it
// keeps only the first maxEntries names in order, so a directory of
// millions of entries (a program can make them) costs time, not memory.
const listChunk = 1024

const fsListSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "default": ".", "description": "Directory path relative to the workspace; \".\" is the workspace itself."}
  },
  "additionalProperties": false
}`

func (t *fsList) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "fs.list",
		Description: "List a directory in the workspace. Returns path, entries [{name, type (file|dir|symlink|other), size}] " +
			"sorted by name (at most 1000), total and truncated.",
		InputSchema:    fsListSchema,
		Effect:         xctv1.Effect_EFFECT_READ,
		Idempotent:     true,
		MaxOutputBytes: t.maxBytes,
	}
}

func (t *fsList) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "path"); e != nil {
		return nil, e
	}
	dot := "."
	p, e := stringArg(args, "path", &dot)
	if e != nil {
		return nil, e
	}
	name, e := t.ws.clean(p)
	if e != nil {
		return nil, e
	}
	if e := t.ws.direct(p, name, true); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	f, fi, e := t.ws.openStat(name, p)
	if e != nil {
		return nil, e
	}
	defer func() { _ = f.Close() }()
	if !fi.IsDir() {
		return nil, pathErr(wire.CodeInvalidArgument, p, "%q is not a directory: use fs.read", p)
	}
	chunk := t.chunk
	if chunk <= 0 {
		chunk = listChunk
	}
	byName := func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) }
	var des []fs.DirEntry // the first maxEntries by name of those read
	total := 0
	for {
		if ctx.Err() != nil {
			return nil, errNotCommitted()
		}
		part, err := f.ReadDir(chunk)
		total += len(part)
		des = append(des, part...)
		if len(des) > 2*t.maxEntries+chunk {
			slices.SortFunc(des, byName)
			des = slices.Clone(des[:t.maxEntries])
		}
		if errors.Is(err, io.EOF) || err == nil && len(part) == 0 {
			break
		}
		if err != nil {
			return nil, t.ws.fail(p, err)
		}
	}
	slices.SortFunc(des, byName)
	res := ListResult{Path: filepath.ToSlash(name), Total: total, Entries: []ListEntry{}}
	if len(des) > t.maxEntries {
		des = des[:t.maxEntries]
	}
	res.Truncated = total > t.maxEntries
	for _, de := range des {
		if ctx.Err() != nil {
			return nil, errNotCommitted()
		}
		e := ListEntry{Name: de.Name(), Type: EntryOther}
		switch typ := de.Type(); {
		case typ&fs.ModeSymlink != 0:
			e.Type = EntrySymlink
		case typ.IsDir():
			e.Type = EntryDir
		case typ.IsRegular():
			e.Type = EntryFile
			// Relative to the directory held open, not by its path.
			var st unix.Stat_t
			if unix.Fstatat(int(f.Fd()), de.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				e.Size = st.Size
			}
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

// regularFile refuses anything but a regular file; dirHint ends the message
// for a directory.
func regularFile(p string, fi fs.FileInfo, dirHint string) *xctv1.Error {
	switch {
	case fi.IsDir():
		return pathErr(wire.CodeInvalidArgument, p, "%q is a directory%s", p, dirHint)
	case !fi.Mode().IsRegular():
		return pathErr(wire.CodeInvalidArgument, p, "%q is not a regular file", p)
	}
	return nil
}

// notHardLinked refuses a regular file with more than one name: one of
// them may be outside the workspace (a hard link made on the host), and
// the workspace must not be a way to read it.
func notHardLinked(p string, fi fs.FileInfo) *xctv1.Error {
	if n := hardLinks(fi); n > 1 {
		return hardLinkedErr(p, n)
	}
	return nil
}

// hardLinks is the number of names of the regular file fi, 0 for
// anything else.
func hardLinks(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
		return st.Nlink
	}
	return 0
}

// hardLinkedErr refuses the regular file p, which has n names. The
// mutating tools refuse it too: they would read it into the step's
// compensation (and fs.write into its previous_checksum, fs.move into
// its checksum), and a rollback would restore that content as a file
// with one name, which fs.read then reads.
func hardLinkedErr(p string, n uint64) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied,
		"%q has %d hard links: a file with other names may be outside the workspace, so it is not read, changed or moved by the fs tools", p, n),
		map[string]any{"path": p, "links": n})
}

func tooLarge(p string, size, limit int64) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodeOutputTooLarge, "%q is %d bytes, the limit is %d", p, size, limit),
		map[string]any{"path": p, "size": size, "limit": limit})
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// entryChecksum is the checksum of the regular file base of d (fi: its
// lstat), read without following a link; errChanged if it is no longer
// that entry.
func entryChecksum(d *wsDir, base string, fi fs.FileInfo) (string, error) {
	return fileChecksum(d, base, fi, false)
}

// fileChecksum is entryChecksum, and with single errHardLinked for a
// file with other names (checked on the descriptor it reads).
func fileChecksum(d *wsDir, base string, fi fs.FileInfo, single bool) (string, error) {
	f, err := d.openFile(base, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	ofi, err := f.Stat()
	if err != nil || !sameEntry(fi, ofi) {
		return "", errChanged
	}
	if single && hardLinks(ofi) > 1 {
		return "", errHardLinked
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// onlyArgs refuses arguments the tool does not know, as the schema does.
func onlyArgs(args map[string]any, known ...string) *xctv1.Error {
	for k := range args {
		if !slices.Contains(known, k) {
			return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "unknown argument %q", k),
				map[string]any{"argument": k})
		}
	}
	return nil
}

// stringArg returns the string argument name, or def when it is absent and
// def is not nil.
func stringArg(args map[string]any, name string, def *string) (string, *xctv1.Error) {
	v, ok := args[name]
	if !ok {
		if def != nil {
			return *def, nil
		}
		return "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "argument %q is required", name),
			map[string]any{"argument": name})
	}
	s, ok := v.(string)
	if !ok {
		return "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "argument %q must be a string", name),
			map[string]any{"argument": name})
	}
	return s, nil
}

// boolArg returns the boolean argument name, or def when it is absent.
func boolArg(args map[string]any, name string, def bool) (bool, *xctv1.Error) {
	v, ok := args[name]
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "argument %q must be a boolean", name),
			map[string]any{"argument": name})
	}
	return b, nil
}
