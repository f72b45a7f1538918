package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// The fs tools act on the path the policy judged, or on none. A check of
// the path (direct, checkProtected) followed by an open by name would
// leave a window in which another writer of the workspace (a program of a
// concurrent run) swaps a directory on the path for a symbolic link, and
// the tool would act where the link leads (.git/hooks, a directory a
// policy keeps secret). So every path a tool acts on is resolved without
// following any symbolic link: the directory that holds the entry is
// opened with openat2(2) and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (one
// call, from the workspace's own descriptor), and the tool acts on the
// entry's name relative to that descriptor (openat with O_NOFOLLOW,
// fstatat, unlinkat, renameat2, mkdirat). A link swapped in at any moment
// makes the call fail with ELOOP; nothing is acted on. The checks stay in
// front to give the model a precise refusal (which path the link leads
// to); the open is what enforces. os.Root remains the outer confinement
// of everything else.

// beneathResolve are the openat2 resolve flags of every path a tool acts
// on: inside the workspace descriptor, no symbolic link anywhere (the
// last component included), no magic link.
const beneathResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// errThroughLink marks a path that a symbolic link was found on when the
// tool acted (ELOOP from a resolution that follows none).
var errThroughLink = errors.New("a symbolic link on the path")

// probeBeneath checks, when the workspace is opened, that this kernel
// resolves paths without links (openat2, Linux 5.6) and that a
// directory's descriptor can be opened as a root (/proc/self/fd): the
// tools fail closed rather than fall back to checking and then opening.
func probeBeneath(dir *os.File) error {
	fd, err := openat2(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("this kernel cannot resolve a path without following symbolic links (openat2 needs Linux 5.6 or later): %w", err)
	}
	if err != nil {
		return fmt.Errorf("openat2 on the workspace: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	r, err := rootAt(fd)
	if err != nil {
		return fmt.Errorf("opening a directory of the workspace by its descriptor needs /proc/self/fd: %w", err)
	}
	return r.Close()
}

// openat2 opens name relative to the directory dirfd with beneathResolve,
// close-on-exec. It retries the EAGAIN a concurrent rename can cause.
func openat2(dirfd int, name string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneathResolve}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 64 {
			continue
		}
		if err != nil {
			return -1, linkErr("openat2", name, err)
		}
		return fd, nil
	}
}

// openat opens the single name relative to dirfd without following a
// link there (O_NOFOLLOW), close-on-exec.
func openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, linkErr("openat", name, err)
		}
		return fd, nil
	}
}

// linkErr wraps a system call's error; ELOOP (a link where none is
// followed) also matches errThroughLink.
func linkErr(op, name string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		err = errors.Join(err, errThroughLink)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// wsDir is a directory of the workspace reached without following a
// symbolic link: the tools act on names relative to it.
type wsDir struct {
	fd   int
	name string // its clean path in the workspace, for messages
}

func (d *wsDir) close() {
	if d != nil && d.fd >= 0 {
		_ = unix.Close(d.fd)
		d.fd = -1
	}
}

// openDir opens the workspace directory name (clean, relative; "." is the
// workspace) without following a link on the way or at its end.
func (w *workspace) openDir(name string) (*wsDir, error) {
	if len(name) >= pathChunk {
		return w.openDirLong(name)
	}
	fd, err := openat2(w.fd(), name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return &wsDir{fd: fd, name: name}, nil
}

// pathChunk is the longest part of a path openDirLong gives the kernel
// at once (it takes at most PATH_MAX, 4096 bytes, whole).
const pathChunk = 2048

// openDirLong is openDir of a path longer than the kernel takes whole:
// a program can make one (a directory renamed from the bottom up), and
// a protected entry it makes there must still be moved aside (session
// 13, TestShellProtectedDeepOrLong). It goes down a part of at most
// pathChunk bytes at a time, each resolved beneath the directory the
// last one opened, following no link (name is clean: no "..").
func (w *workspace) openDirLong(name string) (*wsDir, error) {
	fd, own := w.fd(), false
	for rest := name; rest != ""; {
		part := rest
		if len(part) >= pathChunk {
			i := strings.LastIndexByte(part[:pathChunk], '/')
			if i <= 0 {
				if own {
					_ = unix.Close(fd)
				}
				return nil, &fs.PathError{Op: "openat2", Path: name, Err: unix.ENAMETOOLONG}
			}
			part = rest[:i]
		}
		rest = strings.TrimPrefix(rest[len(part):], "/")
		next, err := openat2(fd, part, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if own {
			_ = unix.Close(fd)
		}
		if err != nil {
			return nil, err
		}
		fd, own = next, true
	}
	return &wsDir{fd: fd, name: name}, nil
}

// openParent opens the directory that holds the workspace path name and
// returns it with the entry's name in it.
func (w *workspace) openParent(name string) (*wsDir, string, error) {
	d, err := w.openDir(filepath.Dir(name))
	if err != nil {
		return nil, "", err
	}
	return d, filepath.Base(name), nil
}

// open opens the workspace path name (file or directory) for reading,
// following no link.
func (w *workspace) open(name string) (*os.File, error) {
	fd, err := openat2(w.fd(), name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// lstat is fstatat(AT_SYMLINK_NOFOLLOW) of the entry base of d.
func (d *wsDir) lstat(base string) (fs.FileInfo, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(d.fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: base, Err: err}
		}
		return statInfo(base, &st), nil
	}
}

// openFile opens the entry base of d, never through a link (O_NOFOLLOW).
func (d *wsDir) openFile(base string, flags int, perm fs.FileMode) (*os.File, error) {
	fd, err := openat(d.fd, base, flags, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), base), nil
}

// sub opens the directory base of d, never through a link.
func (d *wsDir) sub(base string) (*wsDir, error) {
	fd, err := openat(d.fd, base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) {
		// O_DIRECTORY|O_NOFOLLOW on a link fails with ENOTDIR: say that
		// it is a link (or was: a directory now was swapped back).
		if fi, lerr := d.lstat(base); lerr == nil && (fi.Mode()&fs.ModeSymlink != 0 || fi.IsDir()) {
			err = linkErr("openat", base, unix.ELOOP)
		}
	}
	if err != nil {
		return nil, err
	}
	return &wsDir{fd: fd, name: filepath.Join(d.name, base)}, nil
}

// readlink reads the link base of d.
func (d *wsDir) readlink(base string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		k, err := unix.Readlinkat(d.fd, base, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: base, Err: err}
		}
		if k < n {
			return string(buf[:k]), nil
		}
	}
}

// remove unlinks the entry base of d (a directory when dir); a link is
// removed itself.
func (d *wsDir) remove(base string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(d.fd, base, flags); err != nil {
		return &fs.PathError{Op: "remove", Path: base, Err: err}
	}
	return nil
}

// removeAll removes the entry base of d and, if it is a directory,
// everything in it, following no link (os.Root's RemoveAll, over d).
func (d *wsDir) removeAll(base string) error {
	r, err := rootAt(d.fd)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	return r.RemoveAll(base)
}

// mkdir makes the directory base in d.
func (d *wsDir) mkdir(base string, perm fs.FileMode) error {
	if err := unix.Mkdirat(d.fd, base, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "mkdir", Path: base, Err: err}
	}
	return nil
}

// symlink makes the link base in d, leading to target.
func (d *wsDir) symlink(target, base string) error {
	if err := unix.Symlinkat(target, d.fd, base); err != nil {
		return &fs.PathError{Op: "symlink", Path: base, Err: err}
	}
	return nil
}

// rename renames from in d to to in dst; with noReplace it fails
// (EEXIST) rather than replace an entry at to.
func (d *wsDir) rename(from string, dst *wsDir, to string, noReplace bool) error {
	var flags uint
	if noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(d.fd, from, dst.fd, to, flags); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// exchange swaps the entries a and b of d in one step (renameat2
// RENAME_EXCHANGE): both must exist; neither is ever absent.
func (d *wsDir) exchange(a, b string) error {
	if err := unix.Renameat2(d.fd, a, d.fd, b, unix.RENAME_EXCHANGE); err != nil {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
	}
	return nil
}

// sync makes d's changes durable; failures do not undo them.
func (d *wsDir) sync() { _ = unix.Fsync(d.fd) }

// root is an os.Root over d itself (its descriptor, not its name), for a
// walk confined to it.
func (d *wsDir) root() (*os.Root, error) { return rootAt(d.fd) }

// rootAt opens an os.Root at the directory the descriptor fd refers to.
// /proc/self/fd/N leads to that very directory whatever its name is now.
func rootAt(fd int) (*os.Root, error) {
	return os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
}

// sameEntry reports whether a and b (from lstat here or os's Stat) are
// the same file system entry: the same device and inode. (os.SameFile
// knows only os's own results.)
func sameEntry(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// statInfo is an fs.FileInfo for a stat result.
func statInfo(name string, st *unix.Stat_t) fs.FileInfo {
	return &statFileInfo{name: name, st: *st}
}

type statFileInfo struct {
	name string
	st   unix.Stat_t
}

func (fi *statFileInfo) Name() string { return fi.name }
func (fi *statFileInfo) Size() int64  { return fi.st.Size }
func (fi *statFileInfo) ModTime() time.Time {
	return time.Unix(fi.st.Mtim.Sec, fi.st.Mtim.Nsec)
}
func (fi *statFileInfo) IsDir() bool { return fi.Mode().IsDir() }
func (fi *statFileInfo) Sys() any {
	// The syscall package's type, as os.Stat's FileInfo carries it.
	return &syscall.Stat_t{Dev: fi.st.Dev, Ino: fi.st.Ino, Nlink: fi.st.Nlink, Mode: fi.st.Mode, Uid: fi.st.Uid, Gid: fi.st.Gid,
		Rdev: fi.st.Rdev, Size: fi.st.Size, Blksize: fi.st.Blksize, Blocks: fi.st.Blocks,
		Atim: syscall.Timespec(fi.st.Atim), Mtim: syscall.Timespec(fi.st.Mtim), Ctim: syscall.Timespec(fi.st.Ctim)}
}

func (fi *statFileInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// refuse turns an error of acting on the workspace path name (p as
// given) into an error signal. A link found on the way (swapped in after
// the check, or there all along for a path the check let through) is
// refused as the check refuses it, naming where it leads when that can
// still be told; nothing was done. followLast: the tool would have
// followed a link at the path's end.
func (w *workspace) refuse(p, name string, followLast bool, err error) *xctv1.Error {
	if !errors.Is(err, errThroughLink) {
		if errors.Is(err, unix.EXDEV) { // RESOLVE_BENEATH: it would leave the workspace
			return pathErr(wire.CodePermissionDenied, p, "path %q is outside the workspace: a symbolic link on it leads out", p)
		}
		return w.fail(p, err)
	}
	if e := w.direct(p, name, followLast); e != nil {
		return e
	}
	// Tell a link that leads out, or a loop, as os.Root would.
	stat := w.root.Lstat
	if followLast {
		stat = w.root.Stat
	}
	if _, serr := stat(name); serr != nil && (w.escapes(serr) || errors.Is(serr, syscall.ELOOP)) {
		return w.fail(p, serr)
	}
	return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
		"%q goes through a symbolic link (one was there when the tool acted; nothing was done): name a path without one (the policy judges the path as written)", p),
		map[string]any{"path": p})
}

// failIn turns an error of acting on the entry of the workspace path
// name (p as given) in the directory pd, held open, into an error signal.
// When the entry is not found and pd is no longer what the path names
// (it was removed, or replaced by a link, after it was opened), the path
// is refused as refuse does: nothing was done.
func (w *workspace) failIn(p, name string, pd *wsDir, err error) *xctv1.Error {
	if errors.Is(err, fs.ErrNotExist) && !w.stillAt(pd) {
		return w.refuse(p, name, false, linkErr("openat2", pd.name, unix.ELOOP))
	}
	return w.fail(p, err)
}

// stillAt reports whether the workspace path of d still names d.
func (w *workspace) stillAt(d *wsDir) bool {
	fd, err := openat2(w.fd(), d.name, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }()
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Fstat(d.fd, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// fd is the workspace's own descriptor, the start of every resolution.
func (w *workspace) fd() int { return int(w.dir.Fd()) }
