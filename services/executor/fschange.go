package executor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// maxDeleteEntries bounds the entries one recursive fs.delete removes.
const maxDeleteEntries = 10000

// DeleteResult is the result of fs.delete.
type DeleteResult struct {
	// Path is the deleted entry's clean path relative to the workspace.
	Path string `json:"path"`
	// Type is EntryFile, EntryDir or EntrySymlink (the link itself is
	// deleted, never what it points to).
	Type string `json:"type"`
	// Entries counts the entries deleted, Path included.
	Entries int `json:"entries"`
	// Bytes counts the file bytes deleted.
	Bytes int64 `json:"bytes"`
	// Checksum is a deleted file's "sha256:<hex>" (its redaction marker
	// when the file held a secret: digest.go).
	Checksum string `json:"checksum,omitempty"`
}

// MoveResult is the result of fs.move.
type MoveResult struct {
	// From and To are the clean paths, relative to the workspace.
	From string `json:"from"`
	To   string `json:"to"`
	// Type is EntryFile, EntryDir or EntrySymlink.
	Type string `json:"type"`
	// Checksum is a moved file's "sha256:<hex>" (its redaction marker
	// when the file holds a secret: digest.go).
	Checksum string `json:"checksum,omitempty"`
}

// fsDelete is the fs.delete tool. Everything it deletes is saved in the
// step's compensation first (content, mode, link target), so the delete
// can be undone; a delete that would need more than maxUndo bytes or
// maxEntries entries is refused.
// CompensatesFirst: fs.delete saves what it deletes and records it
// (CommitCompensated) before it removes anything.
func (*fsDelete) CompensatesFirst() {}

// CompensatesFirst: fs.move records the rename back (CommitCompensated)
// before it renames.
func (*fsMove) CompensatesFirst() {}

type fsDelete struct {
	ws         *workspace
	maxBytes   int64
	maxUndo    int64
	maxEntries int
	// hook, when set (tests only), runs after commit and before the effect.
	hook func()
	// aside, when set (tests only), runs once the entry is renamed aside,
	// before it is read again and removed.
	aside func()
}

const fsDeleteSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Path of the file, symbolic link or directory to delete, relative to the workspace."},
    "recursive": {"type": "boolean", "default": false, "description": "Delete a directory and everything in it; without it only an empty directory is deleted."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

func (t *fsDelete) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "fs.delete",
		Description: "Delete a file, a symbolic link (not its target) or a directory (with recursive, and everything in it) in the workspace. " +
			"Reversible: what is deleted is kept so the step can be undone. Returns path, type, entries, bytes and, for a file, checksum.",
		InputSchema: fsDeleteSchema,
		Effect:      xctv1.Effect_EFFECT_REVERSIBLE,
		// Not idempotent: a second run reports NOT_FOUND instead of the
		// first run's result, so a delete in doubt goes to a human.
		Idempotent:     false,
		MaxOutputBytes: t.maxBytes,
	}
}

// deletion is what one fs.delete call would remove: read, and saved for
// its undo, not yet removed. pd is open: the caller closes it.
type deletion struct {
	p, name   string
	recursive bool
	pd        *wsDir
	base      string
	fi        fs.FileInfo
	res       DeleteResult
	comp      *Compensation
}

func (t *fsDelete) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	d, e := t.gather(ctx, args)
	if e != nil {
		return nil, e
	}
	defer d.pd.close()
	p, name, pd, base, fi, res, comp := d.p, d.name, d.pd, d.base, d.fi, d.res, d.comp
	// An approved delete removes only what the approver was shown.
	sum := savedDigest(res.Path, comp.Undo)
	if e := previewChanged(ctx, p, sum, "deleted"); e != nil {
		return nil, e
	}
	if e := CommitCompensated(ctx, comp); e != nil {
		return nil, e
	}
	if t.hook != nil {
		t.hook()
	}
	// The entry must still be the one that was saved; a swap in between is
	// refused rather than deleting something that was not saved.
	now, err := pd.lstat(base)
	if err != nil {
		return nil, t.ws.failIn(p, name, pd, err)
	}
	if !sameEntry(fi, now) || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		return nil, pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
	}
	if e := t.removeSaved(ctx, d, sum); e != nil {
		return nil, e
	}
	pd.sync()
	return res, nil
}

// gather reads and saves what fs.delete of args would remove.
func (t *fsDelete) gather(ctx context.Context, args map[string]any) (*deletion, *xctv1.Error) {
	if e := onlyArgs(args, "path", "recursive"); e != nil {
		return nil, e
	}
	p, e := stringArg(args, "path", nil)
	if e != nil {
		return nil, e
	}
	recursive, e := boolArg(args, "recursive", false)
	if e != nil {
		return nil, e
	}
	name, e := t.ws.clean(p)
	if e != nil {
		return nil, e
	}
	if name == "." {
		return nil, pathErr(wire.CodeInvalidArgument, p, "the workspace itself cannot be deleted")
	}
	if e := t.ws.checkProtected(p, name); e != nil {
		return nil, e
	}
	if e := t.ws.direct(p, name, false); e != nil {
		return nil, e
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	// The entry is deleted by its name in its directory, which is reached
	// without following a symbolic link: one swapped in on the path after
	// the checks above makes the delete fail, never reach where it leads.
	pd, base, err := t.ws.openParent(name)
	if err != nil {
		return nil, t.ws.refuse(p, name, false, err)
	}
	fi, err := pd.lstat(base)
	if err != nil {
		defer pd.close()
		return nil, t.ws.failIn(p, name, pd, err)
	}
	res, comp, e := t.save(ctx, p, name, pd, base, fi, recursive)
	if e != nil {
		pd.close()
		return nil, e
	}
	return &deletion{p: p, name: name, recursive: recursive, pd: pd, base: base, fi: fi, res: res, comp: comp}, nil
}

// save reads the entry base of pd (the workspace path name, p as given,
// fi its lstat) and, for a directory with recursive, everything in it,
// into the compensation that restores them.
func (t *fsDelete) save(ctx context.Context, p, name string, pd *wsDir, base string, fi fs.FileInfo, recursive bool) (DeleteResult, *Compensation, *xctv1.Error) {
	res := DeleteResult{Path: filepath.ToSlash(name)}
	comp := &Compensation{Tool: "fs.delete"}
	save := func(rel string, e *SavedEntry) {
		comp.Undo = append(comp.Undo, UndoAction{Op: UndoRestore, Path: rel, Entry: e})
		res.Entries++
		res.Bytes += int64(len(e.Content))
	}
	switch mode := fi.Mode(); {
	case mode&fs.ModeSymlink != 0:
		target, err := pd.readlink(base)
		if err != nil {
			return res, nil, t.ws.fail(p, err)
		}
		res.Type = EntrySymlink
		save(res.Path, &SavedEntry{Type: EntrySymlink, Mode: uint32(mode.Perm()), Target: target})
	case mode.IsRegular():
		if e := notHardLinked(p, fi); e != nil {
			return res, nil, e
		}
		data, err := readEntry(pd, base, fi, t.maxUndo)
		switch {
		case errors.Is(err, errHardLinked):
			return res, nil, hardLinkedErr(p, 2)
		case errors.Is(err, errUndoTooLarge):
			return res, nil, t.tooLarge(p)
		case errors.Is(err, errChanged), errors.Is(err, errThroughLink):
			return res, nil, pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
		case err != nil:
			return res, nil, t.ws.fail(p, err)
		}
		res.Type, res.Checksum = EntryFile, t.ws.shownSum(data, checksum(data))
		save(res.Path, &SavedEntry{Type: EntryFile, Mode: uint32(mode.Perm()), Content: data})
	case mode.IsDir():
		res.Type = EntryDir
		if e := t.saveTree(ctx, p, name, pd, base, fi, recursive, save); e != nil {
			return res, nil, e
		}
	default:
		return res, nil, pathErr(wire.CodeInvalidArgument, p, "%q is not a file, directory or symbolic link", p)
	}
	return res, comp, nil
}

// saveTree saves the directory base of pd (the workspace path name, fi
// its lstat) and, when recursive, everything in it, parents before
// children. The walk is confined to that directory, opened without
// following a link: a link swapped in below it leads nowhere else.
func (t *fsDelete) saveTree(ctx context.Context, p, name string, pd *wsDir, base string, fi fs.FileInfo, recursive bool, save func(string, *SavedEntry)) *xctv1.Error {
	td, err := pd.sub(base)
	if err != nil {
		return pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
	}
	defer td.close()
	if tfi, err := td.lstat("."); err != nil || !sameEntry(fi, tfi) {
		return pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
	}
	root, err := td.root()
	if err != nil {
		return t.ws.fail(p, err)
	}
	defer func() { _ = root.Close() }()
	top := filepath.ToSlash(name)
	var total int64
	var count int
	var walkErr *xctv1.Error
	err = fs.WalkDir(root.FS(), ".", func(local string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := path.Join(top, local)
		if ctx.Err() != nil {
			walkErr = errNotCommitted()
			return fs.SkipAll
		}
		if count++; count > t.maxEntries {
			walkErr = wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"%q holds more than %d entries: too many to delete reversibly in one step", p, t.maxEntries),
				map[string]any{"path": p, "limit": t.maxEntries})
			return fs.SkipAll
		}
		if hit := t.ws.protected.match(rel); hit != "" {
			walkErr = protectedErr(p+" ("+rel+")", hit)
			return fs.SkipAll
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if local == "." && !recursive {
				empty, err := isEmptyDir(root, local)
				if err != nil {
					return err
				}
				if !empty {
					walkErr = pathErr(wire.CodeInvalidArgument, p, "directory %q is not empty: set recursive to delete it and everything in it", p)
					return fs.SkipAll
				}
			}
			save(rel, &SavedEntry{Type: EntryDir, Mode: uint32(mode.Perm())})
		case mode&fs.ModeSymlink != 0:
			target, err := root.Readlink(local)
			if err != nil {
				return err
			}
			save(rel, &SavedEntry{Type: EntrySymlink, Mode: uint32(mode.Perm()), Target: target})
		case mode.IsRegular():
			fd, err := openat2(td.fd, local, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), local)
			var data []byte
			ofi, err := f.Stat()
			switch {
			case err != nil:
			case !ofi.Mode().IsRegular():
				err = errChanged
			case hardLinks(ofi) > 1:
				_ = f.Close()
				walkErr = hardLinkedErr(rel, hardLinks(ofi))
				return fs.SkipAll
			default:
				data, err = readSaved(f, t.maxUndo-total)
			}
			_ = f.Close()
			if errors.Is(err, errChanged) {
				walkErr = pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
				return fs.SkipAll
			}
			if errors.Is(err, errUndoTooLarge) {
				walkErr = t.tooLarge(p)
				return fs.SkipAll
			}
			if err != nil {
				return err
			}
			total += int64(len(data))
			save(rel, &SavedEntry{Type: EntryFile, Mode: uint32(mode.Perm()), Content: data})
		default:
			walkErr = pathErr(wire.CodeInvalidArgument, p, "%q holds %q, which is not a file, directory or symbolic link", p, rel)
			return fs.SkipAll
		}
		return nil
	})
	if walkErr != nil {
		return walkErr
	}
	if errors.Is(err, errThroughLink) {
		return pathErr(wire.CodeToolFailure, p, "%q changed while it was being deleted; nothing was deleted", p)
	}
	if err != nil {
		return t.ws.fail(p, err)
	}
	return nil
}

func (t *fsDelete) tooLarge(p string) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
		"%q holds more than %d bytes: too large to delete reversibly", p, t.maxUndo),
		map[string]any{"path": p, "limit": t.maxUndo})
}

func isEmptyDir(root *os.Root, name string) (bool, error) {
	f, err := root.Open(name)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(1)
	if len(names) == 0 && err != nil {
		return true, nil
	}
	return false, err
}

// fsMove is the fs.move tool. It never replaces an existing entry, so
// moving back undoes it exactly.
type fsMove struct {
	ws       *workspace
	maxBytes int64
	// hook, when set (tests only), runs after commit and before the effect.
	hook func()
}

const fsMoveSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "from": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Path of the file, symbolic link or directory to move, relative to the workspace."},
    "to": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "New path, relative to the workspace; it must not exist, its directory must."}
  },
  "required": ["from", "to"],
  "additionalProperties": false
}`

func (t *fsMove) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: "fs.move",
		Description: "Move or rename a file, symbolic link or directory inside the workspace. The destination must not exist. " +
			"Reversible. Returns from, to, type and, for a file, checksum.",
		InputSchema: fsMoveSchema,
		Effect:      xctv1.Effect_EFFECT_REVERSIBLE,
		// Not idempotent: a second run reports NOT_FOUND for the source.
		Idempotent:     false,
		MaxOutputBytes: t.maxBytes,
	}
}

// paths reads fs.move's arguments (as given, and clean) and refuses
// those it never acts on.
func (t *fsMove) paths(args map[string]any) (pf, pt, from, to string, e *xctv1.Error) {
	if e := onlyArgs(args, "from", "to"); e != nil {
		return "", "", "", "", e
	}
	if pf, e = stringArg(args, "from", nil); e != nil {
		return "", "", "", "", e
	}
	if pt, e = stringArg(args, "to", nil); e != nil {
		return "", "", "", "", e
	}
	if from, e = t.ws.clean(pf); e != nil {
		return "", "", "", "", e
	}
	if to, e = t.ws.clean(pt); e != nil {
		return "", "", "", "", e
	}
	switch {
	case from == "." || to == ".":
		return "", "", "", "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "the workspace itself cannot be moved or replaced"),
			map[string]any{"from": pf, "to": pt})
	case from == to:
		return "", "", "", "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "from and to are the same path %q", pf),
			map[string]any{"from": pf, "to": pt})
	case strings.HasPrefix(filepath.ToSlash(to)+"/", filepath.ToSlash(from)+"/"):
		return "", "", "", "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, "%q cannot be moved into itself", pf),
			map[string]any{"from": pf, "to": pt})
	}
	if e := optionLikeName(pt, to); e != nil {
		return "", "", "", "", e
	}
	for _, c := range []struct{ p, name string }{{pf, from}, {pt, to}} {
		if e := t.ws.checkProtected(c.p, c.name); e != nil {
			return "", "", "", "", e
		}
	}
	for _, c := range []struct{ p, name string }{{pf, from}, {pt, to}} {
		if e := t.ws.direct(c.p, c.name, false); e != nil {
			return "", "", "", "", e
		}
	}
	return pf, pt, from, to, nil
}

func (t *fsMove) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	pf, pt, from, to, e := t.paths(args)
	if e != nil {
		return nil, e
	}
	// A preview that found nothing to move binds nothing the step may move.
	if previewBase(ctx) == BaseRefused {
		return nil, previewChanged(ctx, pf, "an entry to move", "moved")
	}
	if ctx.Err() != nil {
		return nil, errNotCommitted()
	}
	// Both entries are named in their directories, which are reached
	// without following a symbolic link: one swapped in on either path
	// after the checks above makes the move fail, never reach where it
	// leads.
	fpd, fbase, err := t.ws.openParent(from)
	if err != nil {
		return nil, t.ws.refuse(pf, from, false, err)
	}
	defer fpd.close()
	fi, err := fpd.lstat(fbase)
	if err != nil {
		return nil, t.ws.failIn(pf, from, fpd, err)
	}
	tpd, tbase, err := t.ws.openParent(to)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return nil, pathErr(wire.CodeInvalidArgument, pt, "a parent of %q is not a directory", pt)
	case err != nil:
		return nil, t.ws.refuse(pt, to, false, err)
	}
	defer tpd.close()
	depth := pathDepth(filepath.Dir(to)) // the deepest directory once moved
	if fi.IsDir() {
		height, e := t.ws.treeProtectedHeight(pf, from, fpd, fbase, fi)
		if e != nil {
			return nil, e
		}
		depth = pathDepth(to) + height
	}
	if e := nestedTooDeep(pt, depth); e != nil {
		return nil, e
	}
	switch _, err := tpd.lstat(tbase); {
	case err == nil:
		return nil, pathErr(wire.CodeInvalidArgument, pt, "%q exists: fs.move does not replace anything", pt)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, t.ws.fail(pt, err)
	}
	res := MoveResult{From: filepath.ToSlash(from), To: filepath.ToSlash(to)}
	shown := "" // the checksum reported (digest.go); res's is the undo's
	switch mode := fi.Mode(); {
	case mode&fs.ModeSymlink != 0:
		res.Type = EntrySymlink
	case mode.IsDir():
		res.Type = EntryDir
	case mode.IsRegular():
		res.Type = EntryFile
		if e := notHardLinked(pf, fi); e != nil {
			return nil, e
		}
		sum, err := fileChecksum(fpd, fbase, fi, true)
		if errors.Is(err, errHardLinked) {
			return nil, hardLinkedErr(pf, 2)
		}
		if errors.Is(err, errChanged) || errors.Is(err, errThroughLink) {
			return nil, pathErr(wire.CodeToolFailure, pf, "%q changed while it was being moved; nothing was moved", pf)
		}
		if err != nil {
			return nil, t.ws.fail(pf, err)
		}
		res.Checksum = sum
		shown = t.ws.shownFileSum(fpd, fbase, fi, sum, t.maxBytes)
	default:
		return nil, pathErr(wire.CodeInvalidArgument, pf, "%q is not a file, directory or symbolic link", pf)
	}
	comp := &Compensation{Tool: "fs.move", Undo: []UndoAction{{Op: UndoRename, Path: res.From, From: res.To, Checksum: res.Checksum}}}
	if e := CommitCompensated(ctx, comp); e != nil {
		return nil, e
	}
	if t.hook != nil {
		t.hook()
	}
	if !t.ws.stillAt(fpd) {
		return nil, t.ws.failIn(pf, from, fpd, fs.ErrNotExist)
	}
	if !t.ws.stillAt(tpd) {
		return nil, t.ws.failIn(pt, to, tpd, fs.ErrNotExist)
	}
	if now, err := fpd.lstat(fbase); err != nil || !sameEntry(fi, now) {
		return nil, pathErr(wire.CodeToolFailure, pf, "%q changed while it was being moved; nothing was moved", pf)
	}
	// Renamed by name within the two directories held open; never over an
	// entry that appeared at to meanwhile.
	if err := fpd.rename(fbase, tpd, tbase, true); err != nil {
		switch {
		case errors.Is(err, fs.ErrExist):
			return nil, pathErr(wire.CodeInvalidArgument, pt, "%q exists: fs.move does not replace anything", pt)
		case errors.Is(err, syscall.EINVAL):
			return nil, pathErr(wire.CodeInvalidArgument, pf, "%q cannot be moved to %q", pf, pt)
		}
		return nil, t.ws.failIn(pt, to, tpd, err)
	}
	// An approved move moves only what the approver was shown: what was
	// moved is checked where it now is, and moved back otherwise.
	if want := previewBase(ctx); want != "" {
		if found, _ := entryDigest(ctx, tpd, tbase, maxDeleteEntries); found != want {
			kept := ""
			if tpd.rename(tbase, fpd, fbase, true) != nil {
				kept = res.To // from was taken meanwhile: it stays at to
			}
			return nil, changedErr(ctx, pf, found, kept, "moved")
		}
	}
	tpd.sync()
	if filepath.Dir(from) != filepath.Dir(to) {
		fpd.sync()
	}
	res.Checksum = shown
	return res, nil
}
