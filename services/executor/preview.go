package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// MaxPreviewBytes bounds a preview: an approver reads it.
const MaxPreviewBytes = 64 << 10

// Preview implements Previewer: the unified diff between the file as it is
// and the content the step would write. It reads, never writes.
func (t *fsWrite) Preview(_ context.Context, args map[string]any) (*xctv1.Preview, *xctv1.Error) {
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
	name, e := t.ws.cleanFile(p)
	if e != nil {
		return nil, e
	}
	// A protected path is never written: its content (a .netrc's
	// password, an .npmrc's token, a .git/config's remote with its
	// credentials) is not shown for a write that will be refused.
	if e := t.ws.checkProtected(p, name); e != nil {
		return &xctv1.Preview{Kind: "text", Content: e.GetMessage() + ": this step will fail, and the file's content is not shown"}, nil
	}
	if e := t.ws.direct(p, name, false); e != nil {
		return nil, e
	}
	// The current file is read by its name in its directory, reached
	// without following a symbolic link: a link swapped in after the
	// check above makes the preview fail, never show where it leads.
	pd, base, err := t.ws.openParent(name)
	if errors.Is(err, fs.ErrNotExist) {
		return based(t.diff(name, "/dev/null", "", content), BaseAbsent), nil // a new file in a new directory
	}
	if err != nil {
		return nil, t.ws.refuse(p, name, false, err)
	}
	defer pd.close()
	// A file with other names may be outside the workspace (fs.read
	// refuses it): the preview, which goes on the chain, does not show it.
	// Nor one behind a symbolic link: fs.read refuses the link (the policy
	// judges where it leads) and fs.write will not write through it.
	fi, err := pd.lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return based(t.diff(name, "/dev/null", "", content), BaseAbsent), nil // a new file
	}
	if err != nil {
		return nil, t.ws.fail(p, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return &xctv1.Preview{Kind: "text", Content: fmt.Sprintf("%s is a symbolic link, so what it leads to is not shown: fs.write refuses to write through a link, and this step will fail", name)}, nil
	}
	if n := hardLinks(fi); n > 1 {
		return &xctv1.Preview{Kind: "text", Content: fmt.Sprintf("the current file has %d hard links, so its content is not shown, and fs.write refuses to replace it: this step will fail", n)}, nil
	}
	if e := regularFile(p, fi, ""); e != nil {
		return nil, e
	}
	cur, err := readEntry(pd, base, fi, t.maxBytes)
	switch {
	case errors.Is(err, errChanged), errors.Is(err, errThroughLink), errors.Is(err, errHardLinked):
		return nil, pathErr(wire.CodeToolFailure, p, "%q changed while it was being read for the preview", p)
	case err != nil:
		return nil, t.ws.fail(p, err)
	case !utf8.Valid(cur):
		return t.ws.basedOn(&xctv1.Preview{Kind: "text", Content: "the current file is binary: it would be replaced by " + p}, cur), nil
	}
	return t.ws.basedOn(t.diff(name, "a/"+name, string(cur), content), cur), nil
}

// basedOn is based for a preview made against the file content cur. A
// file that holds a secret is flagged redacted even where the diff does
// not show the secret's line: the orchestrator then records the bound
// digest as its redaction marker (chainBase), the one the write's
// previous_checksum reports (digest.go).
func (w *workspace) basedOn(p *xctv1.Preview, cur []byte) *xctv1.Preview {
	if w.holdsSecret(cur) {
		p.Redacted = true
	}
	return based(p, checksum(cur))
}

// BaseAbsent is the base digest of a preview made where no file was.
const BaseAbsent = "absent"

// based names the file p was made against (its checksum, or BaseAbsent):
// an approval by the preview binds it, and fs.write acts only on that
// file (checkPreviewBase).
func based(p *xctv1.Preview, base string) *xctv1.Preview {
	p.BaseDigest = base
	return p
}

// previewBase is the base digest of the preview a human approved this
// call by ("" when none binds it: no approval, an old verdict, a call
// made inside the executor).
func previewBase(ctx context.Context) string {
	g, _ := ctx.Value(grantKey{}).(grantSeen)
	return g.grant.GetPreviewBase()
}

// checkPreviewBase refuses to act on a file other than the one the
// approved preview was made against: found is the file's checksum now
// (BaseAbsent: there is none). Nothing was written.
func checkPreviewBase(ctx context.Context, p, found string) *xctv1.Error {
	return previewChanged(ctx, p, found, "written")
}

// previewChanged is checkPreviewBase for a tool whose effect is done
// ("written", "deleted", "moved").
func previewChanged(ctx context.Context, p, found, done string) *xctv1.Error {
	want := previewBase(ctx)
	if want == "" || want == found {
		return nil
	}
	return wire.WithDetails(wire.Errorf(wire.CodeChangedSincePreview,
		"%q changed since the preview a human approved this step by (previewed %s, found %s): nothing was %s; propose the step again to have the change approved against the file as it is now",
		p, want, found, done),
		map[string]any{"path": p, "previewed": want, "found": found, "changed_since_preview": true})
}

// changedErr refuses a step whose entry changed between the read of it
// and the effect: found says what was there (a digest, BaseAbsent, or
// what else). A step approved by a preview fails CHANGED_SINCE_PREVIEW;
// any other, TOOL_FAILURE (its undo would have put back something older
// than the change). Nothing was done; kept, when set, names where an
// entry that could not be put back at its name was left.
func changedErr(ctx context.Context, p, found, kept, done string) *xctv1.Error {
	e := previewChanged(ctx, p, found, done)
	if e == nil {
		e = wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"%q changed while it was being %s (found %s): nothing was %s; propose the step again to act on it as it is now", p, done, found, done),
			map[string]any{"path": p, "found": found})
	}
	if kept != "" {
		d := e.GetDetails().AsMap()
		d["kept_at"] = kept
		e = wire.WithDetails(e, d)
		e.Message += fmt.Sprintf("; the entry found there was kept at %q, for its name was taken again meanwhile", kept)
	}
	return e
}

// diff is the preview of replacing old (named oldName in the diff) at
// name with content.
func (t *fsWrite) diff(name, oldName, old, content string) *xctv1.Preview {
	diff := udiff.Unified(oldName, "b/"+name, old, content)
	if diff == "" {
		diff = "no change: the file already has this content\n"
	}
	if len(diff) > MaxPreviewBytes {
		diff = diff[:MaxPreviewBytes] + "\n… (preview truncated)\n"
	}
	return &xctv1.Preview{Kind: "diff", Content: diff}
}
