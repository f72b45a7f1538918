package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/wire"
)

// maxPathBytes bounds a path argument.
const maxPathBytes = 4096

// workspace is the directory the built-in tools are confined to. Every file
// operation goes through an os.Root, so no path, ".." component or symbolic
// link can reach outside it, even if the tree changes while a tool runs.
// (Hard links made outside XCT are not detected: the tools never create
// them, and the workspace should not be shared with untrusted writers.)
type workspace struct {
	root *os.Root
	// dir is the workspace directory itself, where every path a tool
	// acts on is resolved from without following links (beneath.go).
	dir *os.File
	// escape is the error os.Root reports for a path that leaves it. The
	// standard library does not export it, so it is probed when opening.
	escape error
	// protected are the paths the fs tools never change.
	protected *protectedPaths
	// unmoved are the protected entries a program made that could not be
	// moved aside after it (protect.go, retryUnmoved).
	unmoved unmovedProtected
	// abs is the workspace's absolute path (links written absolute).
	abs string
	// targets are where the protected links lead (protect.go).
	targets linkTargetCache
	// red keys the digests the fs tools report of content holding a
	// secret (digest.go); set when the executor starts.
	red atomic.Pointer[redact.Redactor]
}

// openWorkspace creates dir if needed and opens it as a root.
func openWorkspace(dir string) (*workspace, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWorkspace, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWorkspace, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("%w: %w", ErrWorkspace, err)
	}
	if err := probeBeneath(d); err != nil {
		_ = root.Close()
		_ = d.Close()
		return nil, fmt.Errorf("%w: %w", ErrWorkspace, err)
	}
	abs, _ := filepath.Abs(dir)
	w := &workspace{root: root, dir: d, protected: newProtectedPaths(nil), abs: abs}
	var pe *fs.PathError
	if _, err := root.Lstat(".."); errors.As(err, &pe) {
		w.escape = pe.Err
	}
	return w, nil
}

func (w *workspace) close() error { return errors.Join(w.root.Close(), w.dir.Close()) }

// clean checks a path argument and returns it in clean form, relative to
// the workspace. It rejects lexically what can be rejected without touching
// the file system; os.Root catches the rest (symbolic links).
func (w *workspace) clean(p string) (string, *xctv1.Error) {
	switch {
	case p == "":
		return "", pathErr(wire.CodeInvalidArgument, p, "path is empty")
	case len(p) > maxPathBytes:
		return "", pathErr(wire.CodeInvalidArgument, p[:64]+"...", "path is %d bytes long, the limit is %d", len(p), maxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return "", pathErr(wire.CodeInvalidArgument, p, "path %q contains a NUL byte", p)
	case !utf8.ValidString(p):
		return "", pathErr(wire.CodeInvalidArgument, p, "path %q is not valid UTF-8", p)
	case filepath.IsAbs(p) || filepath.VolumeName(p) != "" || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return "", pathErr(wire.CodePermissionDenied, p, "path %q is outside the workspace: use a path relative to the workspace", p)
	case !filepath.IsLocal(p):
		return "", pathErr(wire.CodePermissionDenied, p, "path %q is outside the workspace", p)
	}
	// The policy judged the path as written: the tool acts on exactly
	// that path, or on none. "deploy.key/." would otherwise be read as
	// deploy.key past a rule on names ending in ".key", "./config/x" be
	// changed past a rule on "^config/".
	if c := filepath.Clean(p); c != p {
		return "", wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"path %q is not in clean form: write it as %q (no \".\" or \"..\" segments, no repeated or trailing \"/\")", p, c),
			map[string]any{"path": p, "clean": c})
	}
	return p, nil
}

// optionLikeName refuses a name the fs tools would make (the clean
// workspace path name; p as given) that a program handed it would take
// for an option: a component beginning with "-" and another character,
// or holding such a word after whitespace. A human's `tar cf x.tar *`
// hands the names a glob finds, a hook's `prettier --write $(git diff
// --name-only)` the words of each name: on main fs.write made
// "--checkpoint-action=exec=sh evil.sh", and the next human's tar ran
// evil.sh (TestNamesThatReadAsOptions). A lone "-" is left alone.
func optionLikeName(p, name string) *xctv1.Error {
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' }
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		for i := 0; i+1 < len(part); i++ {
			if part[i] == '-' && !space(part[i+1]) && (i == 0 || space(part[i-1])) {
				return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
					"%q has a name a program would read as an option (%q): a glob or a list of names hands it to programs as one; name it otherwise", p, part),
					map[string]any{"path": p, "name": part})
			}
		}
	}
	return nil
}

// cleanFile is clean for a path that must name a file, not a directory.
func (w *workspace) cleanFile(p string) (string, *xctv1.Error) {
	c, e := w.clean(p)
	if e != nil {
		return "", e
	}
	if c == "." || strings.HasSuffix(p, "/") || strings.HasSuffix(p, `\`) {
		return "", pathErr(wire.CodeInvalidArgument, p, "path %q names a directory, a file path is required", p)
	}
	return c, nil
}

// direct refuses a path (clean, relative; p as given) that goes through
// a symbolic link inside the workspace: the policy judged the path as
// written, and through a link the tool would act on another one (a link
// settings -> config makes settings/app.yaml config/app.yaml, past a rule
// on config/). The refusal names the path the link leads to, so the
// model can propose that one, and the policy judge it. followLast says
// that the tool follows a link at the path's end (fs.read, fs.list, a
// working directory); the tools that act on a link itself (fs.delete,
// fs.move) or refuse one (fs.write) check the parents only. A link that
// leads out of the workspace is left to os.Root, which refuses it.
//
// The check runs before the tool acts and gives the refusal its detail;
// what enforces it is the act itself, which resolves the path without
// following any link (beneath.go): a link swapped in between by another
// writer of the workspace (a program of a concurrent run) makes the act
// fail, and the tool does nothing.
func (w *workspace) direct(p, name string, followLast bool) *xctv1.Error {
	if name == "." {
		return nil
	}
	var real string
	var ok bool
	if followLast {
		real, ok = w.resolve(name)
	} else {
		parent := filepath.Dir(name)
		if parent == "." {
			return nil
		}
		if real, ok = w.resolve(parent); ok {
			real = filepath.Join(real, filepath.Base(name))
		}
	}
	if !ok || real == name {
		return nil
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
		"%q goes through a symbolic link: it is %q; name that path (the policy judges the path as written)", p, filepath.ToSlash(real)),
		map[string]any{"path": p, "real": filepath.ToSlash(real)})
}

// fail turns a file system error on path p into an error signal. p is the
// path as the caller gave it; messages never show the host's directories.
func (w *workspace) fail(p string, err error) *xctv1.Error {
	switch {
	case w.escapes(err):
		return pathErr(wire.CodePermissionDenied, p, "path %q is outside the workspace: a symbolic link on it leads out", p)
	case errors.Is(err, fs.ErrNotExist):
		return pathErr(wire.CodeNotFound, p, "%q does not exist", p)
	case errors.Is(err, fs.ErrPermission):
		return pathErr(wire.CodePermissionDenied, p, "%q: permission denied", p)
	case errors.Is(err, syscall.ENOTDIR):
		return pathErr(wire.CodeInvalidArgument, p, "a parent of %q is not a directory", p)
	case errors.Is(err, syscall.EISDIR):
		return pathErr(wire.CodeInvalidArgument, p, "%q is a directory", p)
	case errors.Is(err, syscall.ELOOP):
		return pathErr(wire.CodeInvalidArgument, p, "%q has too many levels of symbolic links", p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return pathErr(wire.CodeInvalidArgument, p, "%q is too long", p)
	case errors.Is(err, syscall.EINVAL):
		return pathErr(wire.CodeInvalidArgument, p, "%q is not a valid path", p)
	}
	return pathErr(wire.CodeToolFailure, p, "%v", err)
}

func (w *workspace) escapes(err error) bool {
	if w.escape != nil && errors.Is(err, w.escape) {
		return true
	}
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// pathErr builds an error signal that names the path in its details.
func pathErr(code wire.Code, p, format string, args ...any) *xctv1.Error {
	if !utf8.ValidString(p) {
		p = strings.ToValidUTF8(p, "\uFFFD")
	}
	return wire.WithDetails(wire.Errorf(code, format, args...), map[string]any{"path": p})
}

// openStat opens name for reading and stats it, following no symbolic
// link on the way or at its end. O_NONBLOCK: opening a FIFO
// must not hang; regular files and directories ignore it. p is the path as
// the model gave it, for error messages.
func (w *workspace) openStat(name, p string) (*os.File, fs.FileInfo, *xctv1.Error) {
	f, err := w.open(name)
	if err != nil {
		return nil, nil, w.refuse(p, name, true, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, w.fail(p, err)
	}
	return f, fi, nil
}
