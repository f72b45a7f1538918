package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Compensation says how to undo the effect of one step of a reversible
// tool. The tool builds it before acting and hands it to CommitCompensated;
// it is stored as JSON in the step record's blob store (see
// StepRecord.compensations), so it survives the executor. Undo actions are
// applied in order; each checks that the world is still as the step left it
// and refuses otherwise (ErrUndoConflict), so a rollback never overwrites a
// later change.
type Compensation struct {
	// Tool is the tool whose effect this undoes.
	Tool string `json:"tool"`
	// StepID and Attempt name the execution (filled in by the executor).
	StepID  string `json:"step_id,omitempty"`
	Attempt int32  `json:"attempt,omitempty"`
	// Undo are the actions that restore the workspace, in order.
	Undo []UndoAction `json:"undo"`
}

// Undo operations of UndoAction.Op.
const (
	// UndoRemove removes Path, which the step created: a file (Checksum
	// set) only if it is still a file with Checksum, a directory (no
	// Checksum) only if it is still an empty directory.
	UndoRemove = "remove"
	// UndoRestore puts Entry back at Path, which the step removed or
	// replaced. Path must be absent, or a file that still has Checksum
	// (the content the step wrote).
	UndoRestore = "restore"
	// UndoRename renames From back to Path; Path must be absent and From,
	// when a file, must still have Checksum.
	UndoRename = "rename"
)

// UndoAction is one action of a compensation. Paths are relative to the
// workspace, slash-separated.
type UndoAction struct {
	Op       string      `json:"op"`
	Path     string      `json:"path"`
	From     string      `json:"from,omitempty"`
	Checksum string      `json:"checksum,omitempty"`
	Entry    *SavedEntry `json:"entry,omitempty"`
}

// SavedEntry is a file system entry saved to be restored.
type SavedEntry struct {
	// Type is EntryFile, EntryDir or EntrySymlink.
	Type string `json:"type"`
	// Mode holds the permission bits.
	Mode uint32 `json:"mode"`
	// Content is a file's bytes (base64 in JSON).
	Content []byte `json:"content,omitempty"`
	// Target is a symbolic link's target, as stored in the link.
	Target string `json:"target,omitempty"`
}

// undo applies c to the workspace. It stops at the first action that
// cannot be applied; ErrUndoConflict means the world changed since the
// step. (Rollback orchestration, which decides when to undo which steps,
// is not the executor's job; this is the primitive it will use.)
func (w *workspace) undo(c *Compensation) error {
	for i, a := range c.Undo {
		if err := w.undoOne(a); err != nil {
			return fmt.Errorf("undo %d (%s %s): %w", i, a.Op, a.Path, err)
		}
	}
	return nil
}

func (w *workspace) undoOne(a UndoAction) error {
	name, e := w.clean(a.Path)
	if e != nil || name == "." {
		return fmt.Errorf("%w: bad path %q", ErrUndoConflict, a.Path)
	}
	// The paths are checked again as the fs tools check them: a directory
	// on the path may have become a link since the step (to .git, say),
	// and the undo would act where it leads, which no policy judged.
	if err := w.undoable(a.Path, name); err != nil {
		return err
	}
	// The actions act by name in the directory that holds the entry,
	// reached without following a symbolic link: a link swapped in after
	// the check above makes the action fail, never reach where it leads.
	pd, base, err := w.openParent(name)
	if err != nil {
		return undoRefused(a.Path, err)
	}
	defer pd.close()
	switch a.Op {
	case UndoRemove:
		fi, err := pd.lstat(base)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // already gone
		}
		if err != nil {
			return err
		}
		// What the step created: a file (with its checksum) or a
		// directory (none). Anything else there now is a later change.
		switch {
		case a.Checksum != "" && !fi.Mode().IsRegular(), a.Checksum == "" && !fi.IsDir():
			return fmt.Errorf("%w: %s changed since the step (it is another kind of entry now)", ErrUndoConflict, a.Path)
		case a.Checksum != "":
			if sum, err := entryChecksum(pd, base, fi); err != nil || sum != a.Checksum {
				return fmt.Errorf("%w: %s changed since the step", ErrUndoConflict, a.Path)
			}
		}
		if now, err := pd.lstat(base); err != nil || !sameEntry(fi, now) {
			return fmt.Errorf("%w: %s changed while it was being undone", ErrUndoConflict, a.Path)
		}
		if err := pd.remove(base, fi.IsDir()); err != nil {
			return fmt.Errorf("%w: %w", ErrUndoConflict, err)
		}
		return nil
	case UndoRestore:
		if a.Entry == nil {
			return fmt.Errorf("%w: nothing saved for %s", ErrUndoConflict, a.Path)
		}
		fi, err := pd.lstat(base)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case a.Checksum == "" || !fi.Mode().IsRegular():
			return fmt.Errorf("%w: %s exists", ErrUndoConflict, a.Path)
		default:
			if sum, err := entryChecksum(pd, base, fi); err != nil || sum != a.Checksum {
				return fmt.Errorf("%w: %s changed since the step", ErrUndoConflict, a.Path)
			}
		}
		return restore(pd, base, a.Entry)
	case UndoRename:
		from, e := w.clean(a.From)
		if e != nil || from == "." {
			return fmt.Errorf("%w: bad path %q", ErrUndoConflict, a.From)
		}
		if err := w.undoable(a.From, from); err != nil {
			return err
		}
		fpd, fbase, err := w.openParent(from)
		if err != nil {
			return undoRefused(a.From, err)
		}
		defer fpd.close()
		if _, err := pd.lstat(base); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s exists", ErrUndoConflict, a.Path)
		}
		fi, err := fpd.lstat(fbase)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUndoConflict, err)
		}
		if fi.IsDir() {
			if e := w.treeProtected(a.From, from, fpd, fbase, fi); e != nil {
				return fmt.Errorf("%w: %s", ErrUndoConflict, e.GetMessage())
			}
		}
		if a.Checksum != "" { // a file was moved: it must still be one, unchanged
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %s changed since the step (it is another kind of entry now)", ErrUndoConflict, a.From)
			}
			if sum, err := entryChecksum(fpd, fbase, fi); err != nil || sum != a.Checksum {
				return fmt.Errorf("%w: %s changed since the step", ErrUndoConflict, a.From)
			}
		}
		if now, err := fpd.lstat(fbase); err != nil || !sameEntry(fi, now) {
			return fmt.Errorf("%w: %s changed while it was being undone", ErrUndoConflict, a.From)
		}
		if err := fpd.rename(fbase, pd, base, true); err != nil {
			return fmt.Errorf("%w: %w", ErrUndoConflict, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown operation %q", ErrUndoConflict, a.Op)
}

// undoRefused is the error of an undo action whose directory could not
// be reached without following a link (one swapped in after the check).
func undoRefused(p string, err error) error {
	if errors.Is(err, errThroughLink) {
		return fmt.Errorf("%w: %s goes through a symbolic link; nothing was done", ErrUndoConflict, p)
	}
	return err
}

// undoable refuses an undo action on the workspace path name (p as the
// compensation names it) that the fs tools would refuse: a protected path,
// itself or where the links on it lead, or a path through a link.
func (w *workspace) undoable(p, name string) error {
	if e := w.checkProtected(p, name); e != nil {
		return fmt.Errorf("%w: %s", ErrUndoConflict, e.GetMessage())
	}
	if e := w.direct(p, name, false); e != nil {
		return fmt.Errorf("%w: %s", ErrUndoConflict, e.GetMessage())
	}
	return nil
}

// restore creates e as the entry base of d (replacing a file there
// atomically), never through a link.
func restore(d *wsDir, base string, e *SavedEntry) error {
	perm := fs.FileMode(e.Mode).Perm()
	switch e.Type {
	case EntryDir:
		if err := d.mkdir(base, perm); err != nil {
			return err
		}
		sub, err := d.sub(base)
		if err != nil {
			return err
		}
		defer sub.close()
		return unix.Fchmod(sub.fd, uint32(perm))
	case EntrySymlink:
		return d.symlink(e.Target, base)
	case EntryFile:
		tmp, err := tempName(".")
		if err != nil {
			return err
		}
		f, err := d.openFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		_, werr := f.Write(e.Content)
		if werr == nil {
			werr = f.Chmod(perm)
		}
		if werr == nil {
			werr = f.Sync()
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = d.rename(tmp, d, base, false)
		}
		if werr != nil {
			_ = d.remove(tmp, false)
		}
		return werr
	}
	return fmt.Errorf("%w: cannot restore a %q", ErrUndoConflict, e.Type)
}

// readSaved reads the file name (opened as f) for a compensation, at most
// limit bytes; errUndoTooLarge past that.
func readSaved(f io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errUndoTooLarge
	}
	return data, nil
}
