package executor

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A program that may write owns what it makes (its sandbox user is the
// executor's own on the host), so it can take the executor's permissions
// away from a directory: no read or search (the scan for protected
// entries cannot see in, or stops there), no write (a protected entry in
// it cannot be moved aside). Left so, a .git with an fsmonitor or a
// .husky hook it made stayed for the next human, hidden or reported as
// merely "unchecked" (session 13, TestShellProtectedHiddenByModes). A
// directory the executor owns and cannot read or search is given back
// its owner's read and search permission by the scan (and stays so: a
// workspace the executor cannot read is of no use to it); one whose
// protected entry must be moved aside is given its owner's write
// permission for the rename, and its mode back after. Never by name:
// through a descriptor of the directory itself. Root's permission checks
// ignore modes, so an executor running as root never needs this.

// executorUID is the executor's effective user id: whose directories it
// may give permissions back.
var executorUID = os.Geteuid()

const (
	// modeScan is what the scan needs of a directory: read and search.
	modeScan = 0o500
	// modeRename is what renaming an entry of a directory needs of it.
	modeRename = 0o300
)

// giveBack adds want (owner permission bits) to the mode of the directory
// open as fd (any descriptor of it, O_PATH too) when the executor owns it
// and it lacks one of them; it returns the mode it had and whether it
// changed it.
func giveBack(fd int, want uint32) (uint32, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, false, err
	}
	mode := st.Mode & 0o7777
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != executorUID || executorUID == 0 || mode&want == want {
		return mode, false, nil
	}
	// fchmod refuses an O_PATH descriptor; its /proc/self/fd entry
	// leads to the directory itself, whatever its name is now.
	if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode|want, 0); err != nil {
		return mode, false, err
	}
	return mode, true, nil
}

// setMode sets the mode of the directory open as fd back to mode.
func setMode(fd int, mode uint32) error {
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), mode, 0)
}

// scanDirFlags open a directory for the scan: read, never through a link.
const scanDirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// openScanDir opens the directory name of dirfd for reading, not
// through a link; refused for want of permission, it gives the
// directory back its owner's read and search permission when the
// executor owns it (giveBack) and opens it again, through a descriptor
// of that same directory.
func openScanDir(dirfd int, name string) (int, error) {
	fd, err := unix.Openat(dirfd, name, scanDirFlags, 0)
	if !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	p, perr := unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if perr != nil {
		return -1, err
	}
	defer func() { _ = unix.Close(p) }()
	if _, changed, cerr := giveBack(p, modeScan); cerr != nil || !changed {
		return -1, err
	}
	return unix.Openat(p, ".", scanDirFlags, 0)
}

// openScanTop opens the directory at path (the workspace) for the scan,
// as openScanDir does a directory in it.
func openScanTop(path string) (*os.File, error) {
	f, err := os.Open(path)
	if !errors.Is(err, unix.EACCES) {
		return f, err
	}
	p, perr := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if perr != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(p) }()
	if _, changed, cerr := giveBack(p, modeScan); cerr != nil || !changed {
		return nil, err
	}
	fd, err := unix.Openat(p, ".", scanDirFlags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
