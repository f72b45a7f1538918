package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// fs.delete and fs.move show the approver what they would remove or move
// (session 18), and bind it as fs.write binds the file its diff was made
// against: the preview's base_digest names the entry, the validator signs
// it into the approved step's grant, and the tool acts only on an entry
// with that digest (CHANGED_SINCE_PREVIEW otherwise, nothing done).
//
// An entry's digest: a file's is its content's "sha256:<hex>" (the
// checksum fs.read and fs.write report); a symbolic link's is
// "link-sha256:" and the SHA-256 of its target; a directory's is
// "tree-sha256:" and the SHA-256 of one line per entry in it, itself
// first, in lexical walk order, each the JSON array of its path below the
// directory ("" for the directory, "/a/b" below it), its type, and its
// digest (a file's or a link's; "" for a directory). BaseAbsent: nothing
// is there; BaseRefused: the preview found the step would fail, and an
// approval of it lets the step act on nothing.

// BaseRefused is the base digest of a preview that found the step could
// not act: an approval by it binds nothing the step could act on, so the
// step, approved, is refused whatever it finds then.
const BaseRefused = "refused"

// maxListed bounds the entries a preview of a directory lists.
const maxListed = 200

// treeDigest accumulates a directory's digest.
type treeDigest struct{ h hash.Hash }

func newTreeDigest() *treeDigest { return &treeDigest{h: sha256.New()} }

// add adds the entry at rel (below the directory) of type typ whose own
// digest is sum.
func (t *treeDigest) add(rel, typ, sum string) {
	line, _ := json.Marshal([]string{rel, typ, sum}) // strings only: cannot fail
	t.h.Write(append(line, '\n'))
}

func (t *treeDigest) sum() string { return "tree-sha256:" + hex.EncodeToString(t.h.Sum(nil)) }

// linkDigest is the digest of a symbolic link leading to target.
func linkDigest(target string) string {
	sum := sha256.Sum256([]byte(target))
	return "link-sha256:" + hex.EncodeToString(sum[:])
}

// savedDigest is the digest of the entry at the workspace path top saved
// in undo (fs.delete's compensation: the entry, then what is in it).
func savedDigest(top string, undo []UndoAction) string {
	if len(undo) == 0 || undo[0].Entry == nil {
		return ""
	}
	switch e := undo[0].Entry; e.Type {
	case EntryFile:
		return checksum(e.Content)
	case EntrySymlink:
		return linkDigest(e.Target)
	}
	t := newTreeDigest()
	for _, a := range undo {
		if a.Entry == nil {
			continue
		}
		sum := ""
		switch a.Entry.Type {
		case EntryFile:
			sum = checksum(a.Entry.Content)
		case EntrySymlink:
			sum = linkDigest(a.Entry.Target)
		}
		t.add(strings.TrimPrefix(a.Path, top), a.Entry.Type, sum)
	}
	return t.sum()
}

// listed is one entry of a preview's listing of a directory.
type listed struct {
	rel, typ, target string
	size             int64
}

// listing writes entries (below the directory top), at most maxListed.
func listing(b *strings.Builder, top string, entries []listed) {
	for i, e := range entries {
		if i == maxListed {
			fmt.Fprintf(b, "… and %d more\n", len(entries)-maxListed)
			break
		}
		p := top + e.rel
		switch e.typ {
		case EntryDir:
			fmt.Fprintf(b, "  dir   %s/\n", p)
		case EntrySymlink:
			fmt.Fprintf(b, "  link  %s -> %s\n", p, e.target)
		case EntryFile:
			fmt.Fprintf(b, "  file  %s (%d bytes)\n", p, e.size)
		default:
			fmt.Fprintf(b, "  other %s\n", p)
		}
	}
}

// failingPreview is the preview of a step that would fail now: it says
// why, and binds BaseAbsent (nothing there) or BaseRefused.
func failingPreview(e *xctv1.Error) *xctv1.Preview {
	base := BaseRefused
	if e.GetCode() == string(wire.CodeNotFound) {
		base = BaseAbsent
	}
	return based(&xctv1.Preview{Kind: "text", Content: fmt.Sprintf("this step would fail now (%s): %s", e.GetCode(), e.GetMessage())}, base)
}

// boundPreview caps a preview's content for the approver.
func boundPreview(s string) string {
	if len(s) > MaxPreviewBytes {
		s = strings.ToValidUTF8(s[:MaxPreviewBytes], "") + "\n… (preview truncated)\n"
	}
	return s
}

// Preview implements Previewer: what fs.delete would remove (a file's
// content as a diff to nothing, a directory's entries), bound by its
// digest. It reads, never removes.
func (t *fsDelete) Preview(ctx context.Context, args map[string]any) (*xctv1.Preview, *xctv1.Error) {
	d, e := t.gather(ctx, args)
	if e != nil {
		return failingPreview(e), nil
	}
	defer d.pd.close()
	sum := savedDigest(d.res.Path, d.comp.Undo)
	name := d.res.Path
	switch first := d.comp.Undo[0].Entry; d.res.Type {
	case EntryFile:
		switch {
		case len(first.Content) == 0:
			return based(&xctv1.Preview{Kind: "text", Content: fmt.Sprintf("the empty file %s would be deleted", name)}, sum), nil
		case !utf8.Valid(first.Content):
			return t.ws.basedOn(&xctv1.Preview{Kind: "text", Content: fmt.Sprintf("the file %s is binary (%d bytes, %s): it would be deleted",
				name, len(first.Content), t.ws.shownSum(first.Content, sum))}, first.Content), nil
		}
		diff := udiff.Unified("a/"+name, "/dev/null", string(first.Content), "")
		return t.ws.basedOn(&xctv1.Preview{Kind: "diff", Content: boundPreview(diff)}, first.Content), nil
	case EntrySymlink:
		return based(&xctv1.Preview{Kind: "text", Content: fmt.Sprintf("the symbolic link %s (leading to %s) would be deleted; what it leads to is kept", name, first.Target)}, sum), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the directory %s would be deleted with everything in it: %d entries, %d bytes of files\n", name, d.res.Entries, d.res.Bytes)
	entries := make([]listed, 0, len(d.comp.Undo))
	for _, a := range d.comp.Undo[1:] {
		entries = append(entries, listed{rel: strings.TrimPrefix(a.Path, name), typ: a.Entry.Type, target: a.Entry.Target, size: int64(len(a.Entry.Content))})
	}
	listing(&b, name, entries)
	return based(&xctv1.Preview{Kind: "text", Content: boundPreview(b.String())}, sum), nil
}

// removeSaved removes the entry d gathered, and only it: it is first
// renamed aside (never over anything), then read again there; only when
// it is still what was saved (digest sum) is it removed. A change made
// since it was read (rewritten, replaced, filled) puts it back at its
// name, and nothing is deleted: the undo would not have restored the
// change, and an approved delete removes only what the approver saw.
func (t *fsDelete) removeSaved(ctx context.Context, d *deletion, sum string) *xctv1.Error {
	aside, err := tempName(".")
	if err != nil {
		return pathErr(wire.CodeToolFailure, d.p, "temporary name: %v", err)
	}
	if err := d.pd.rename(d.base, d.pd, aside, true); err != nil {
		return t.ws.failIn(d.p, d.name, d.pd, err)
	}
	if t.aside != nil {
		t.aside()
	}
	found := "a changed entry"
	if fi, err := d.pd.lstat(aside); err == nil {
		if _, comp, e := t.save(ctx, d.p, d.name, d.pd, aside, fi, d.recursive); e == nil {
			found = savedDigest(d.res.Path, comp.Undo)
		}
	}
	if found == sum {
		if d.res.Type == EntryDir && d.recursive {
			err = d.pd.removeAll(aside)
		} else {
			err = d.pd.remove(aside, d.res.Type == EntryDir)
		}
		if err != nil {
			return t.ws.fail(d.p, err)
		}
		return nil
	}
	kept := ""
	if d.pd.rename(aside, d.pd, d.base, true) != nil {
		kept = filepath.ToSlash(filepath.Join(filepath.Dir(d.name), aside))
	}
	return changedErr(ctx, d.p, found, kept, "deleted")
}

// entryDigest is the digest of the entry base of d (see above), read
// without following a link, or what else is there: BaseAbsent, "a
// directory of more than N entries", "unreadable". A directory is
// walked confined to it.
func entryDigest(ctx context.Context, d *wsDir, base string, maxEntries int) (string, []listed) {
	fi, err := d.lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return BaseAbsent, nil
	case err != nil:
		return "unreadable", nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := d.readlink(base)
		if err != nil {
			return "unreadable", nil
		}
		return linkDigest(target), []listed{{typ: EntrySymlink, target: target}}
	case fi.Mode().IsRegular():
		sum, err := entryChecksum(d, base, fi)
		if err != nil {
			return "unreadable", nil
		}
		return sum, []listed{{typ: EntryFile, size: fi.Size()}}
	case !fi.IsDir():
		return "not a file, directory or symbolic link", nil
	}
	td, err := d.sub(base)
	if err != nil {
		return "unreadable", nil
	}
	defer td.close()
	if tfi, err := td.lstat("."); err != nil || !sameEntry(fi, tfi) {
		return "unreadable", nil
	}
	root, err := td.root()
	if err != nil {
		return "unreadable", nil
	}
	defer func() { _ = root.Close() }()
	t := newTreeDigest()
	var entries []listed
	over := false
	err = fs.WalkDir(root.FS(), ".", func(local string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(entries) == maxEntries {
			over = true
			return fs.SkipAll
		}
		rel := ""
		if local != "." {
			rel = "/" + local
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		e := listed{rel: rel}
		sum := ""
		switch mode := info.Mode(); {
		case mode.IsDir():
			e.typ = EntryDir
		case mode&fs.ModeSymlink != 0:
			if e.target, err = root.Readlink(local); err != nil {
				return err
			}
			e.typ, sum = EntrySymlink, linkDigest(e.target)
		case mode.IsRegular():
			e.typ, e.size = EntryFile, info.Size()
			if sum, err = treeFileChecksum(td, local); err != nil {
				return err
			}
		default:
			e.typ = "other"
		}
		t.add(rel, e.typ, sum)
		entries = append(entries, e)
		return nil
	})
	switch {
	case over:
		return fmt.Sprintf("a directory of more than %d entries", maxEntries), nil
	case err != nil:
		return "unreadable", nil
	}
	return t.sum(), entries
}

// treeFileChecksum is the checksum of the regular file local below the
// directory td, opened without following a link.
func treeFileChecksum(td *wsDir, local string) (string, error) {
	fd, err := openat2(td.fd, local, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), local)
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", errChanged
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Preview implements Previewer: what fs.move would move where, bound by
// the moved entry's digest. It reads, never moves.
func (t *fsMove) Preview(ctx context.Context, args map[string]any) (*xctv1.Preview, *xctv1.Error) {
	pf, pt, from, to, e := t.paths(args)
	if e != nil {
		return failingPreview(e), nil
	}
	fpd, fbase, err := t.ws.openParent(from)
	if err != nil {
		return failingPreview(t.ws.refuse(pf, from, false, err)), nil
	}
	defer fpd.close()
	fi, err := fpd.lstat(fbase)
	if err != nil {
		return failingPreview(t.ws.failIn(pf, from, fpd, err)), nil
	}
	if tpd, tbase, err := t.ws.openParent(to); err == nil {
		_, lerr := tpd.lstat(tbase)
		tpd.close()
		if lerr == nil {
			return failingPreview(pathErr(wire.CodeInvalidArgument, pt, "%q exists: fs.move does not replace anything", pt)), nil
		}
	}
	sum, entries := entryDigest(ctx, fpd, fbase, maxDeleteEntries)
	if entries == nil {
		return failingPreview(pathErr(wire.CodeInvalidArgument, pf, "%q cannot be shown: %s", pf, sum)), nil
	}
	var b strings.Builder
	f, tt := filepath.ToSlash(from), filepath.ToSlash(to)
	redacted := false
	switch e := entries[0]; e.typ {
	case EntryFile:
		// A file that holds a secret is named by its digest's marker, and
		// its bound digest recorded so (digest.go, chainBase).
		shown := t.ws.shownFileSum(fpd, fbase, fi, sum, t.maxBytes)
		redacted = shown != sum
		fmt.Fprintf(&b, "the file %s (%d bytes, %s) would be moved to %s\n", f, e.size, shown, tt)
	case EntrySymlink:
		fmt.Fprintf(&b, "the symbolic link %s (leading to %s, kept as it is) would be moved to %s\n", f, e.target, tt)
	default:
		fmt.Fprintf(&b, "the directory %s would be moved to %s with everything in it (%d entries):\n", f, tt, len(entries))
		listing(&b, f, entries[1:])
	}
	return based(&xctv1.Preview{Kind: "text", Content: boundPreview(b.String()), Redacted: redacted}, sum), nil
}
