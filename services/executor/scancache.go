package executor

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// scanCache keeps, for the scan for protected entries, what it read of
// each directory of the workspace, keyed by the directory's identity
// (device, inode) and checked against its change time: a directory's
// ctime changes whenever an entry is added to it, removed from it or
// renamed in or out of it, and no unprivileged process can set it. A
// rescan opens and fstats every directory (it must: a change deep down
// does not change its parents) but re-reads only those whose ctime
// changed, or that it does not know (a directory moved in from
// elsewhere, a reused inode: its ctime is its making's).
//
// A listing is kept only when it can be trusted: its directory's ctime
// is older, by scanTrustMargin, than the start of the scan that read it
// (a change within the same timestamp tick as the read, or within the
// file system's granularity, would leave the ctime as it was: such a
// directory is read again every time until its last change is old), and
// only on file systems whose directory ctimes are kept by the kernel
// that runs the executor (scanCacheFS; not a network file system whose
// server keeps its own clock, not overlayfs, not FUSE).
type scanCache struct {
	mu   sync.Mutex
	dirs map[entryID]*dirListing
	gen  uint32
	// reads counts the directories read (not taken from the cache), for
	// tests and benchmarks.
	reads int
	// lastWall and lastMono are the wall clock and the monotonic one at
	// the start of the last scan: a wall clock stepped back since (an
	// operator's date, NTP's step) could give a change the very ctime a
	// kept listing has, so every listing is then forgotten.
	lastWall int64
	lastMono time.Duration
	// margin, when not 0, is the trust margin instead of
	// scanTrustMargin (tests: a negative one trusts every listing).
	margin time.Duration
	// visits is the last scan's (scanWalk.visits), kept for its room.
	visits []scanVisit
}

// dirListing is what the scan needs of one directory.
type dirListing struct {
	ctime   unix.Timespec
	entries int
	// subdirs are the names of the subdirectories that are not
	// protected, each followed by a NUL (no name holds one).
	subdirs   string
	protected []string
	gen       uint32
}

// scanTrustMargin is how much older than the scan that read it a
// directory's ctime must be for its listing to be kept: more than a
// timestamp tick and the coarsest granularity of scanCacheFS (ext4 with
// 128-byte inodes keeps seconds).
var scanTrustMargin = 3 * time.Second

// monoBase is a start for the monotonic clock's readings.
var monoBase = time.Now()

// scanCacheFS are the file systems on which listings are kept: local
// ones, their timestamps the running kernel's.
var scanCacheFS = map[int64]bool{
	unix.EXT4_SUPER_MAGIC:  true, // ext2, ext3 too
	unix.XFS_SUPER_MAGIC:   true,
	unix.BTRFS_SUPER_MAGIC: true,
	unix.TMPFS_MAGIC:       true,
	unix.F2FS_SUPER_MAGIC:  true,
}

// scanCacheDirs bounds the listings kept (a few tens of bytes each, and
// the names of the subdirectories): past it, directories are read every
// time.
const scanCacheDirs = 1 << 19

// scanReadBuffer is the buffer of one getdents call: a few hundred names
// a call.
const scanReadBuffer = 64 << 10

// scanWalk is one scan.
type scanWalk struct {
	p      *protectedPaths
	c      *scanCache
	budget *int
	found  func(dirfd int, name, rel string) bool
	buf    []byte
	// trustBefore: a listing whose ctime is before it is kept.
	trustBefore time.Time
	devOK       map[uint64]bool
	// start is the coarse wall clock (the one the kernel stamps change
	// times with) at the start of the scan; visits are the directories
	// the scan met, in the order it met them, and next the one verify
	// checks next; future is the earliest change time met that is ahead
	// of the clock (zero: none).
	start  unix.Timespec
	visits []scanVisit
	next   int
	future unix.Timespec
}

// scanVisit is a directory the scan met: its identity, its change time
// when the scan read it (or took its listing from the cache), the
// listing, whether it was taken with a single fstatat (leaf), and, for
// a directory whose change time was then too recent to tell a later
// change in the same tick from none (recent), a digest of its entries
// (names and inodes) as read.
type scanVisit struct {
	id     entryID
	ctime  unix.Timespec
	l      *dirListing
	leaf   bool
	recent bool
	sum    *[sha256.Size]byte
}

// scanChanged begins the reason of a scan that met a change of the
// workspace while it ran (a directory renamed, an entry moved from a
// directory it had not read into one it had): what it read is not the
// workspace at any one moment, and a protected entry may be missing from
// it. The callers do the scan again a few times (scanAttempts), then
// refuse.
const scanChanged = "the workspace changed while it was scanned"

// scanChangedAt is the reason scanChanged, naming where.
func scanChangedAt(rel string) string {
	return scanChanged + " (at " + displayRel(rel) + ")"
}

// walk calls found for every protected entry in dir (the workspace path
// rel, depth directories below the top) and below it, never through a
// symbolic link: with the directory that holds it, its name and its
// workspace path (found returns false to stop the walk). It reads at most
// *budget names (a negative budget: no bound) and goes at most
// protectScanDepth directories down; it returns "" when it read
// everything, otherwise why it did not. Scans of the same protectedPaths
// run one at a time (they share the cache).
func (p *protectedPaths) walk(dir *os.File, rel string, depth int, budget *int, found func(dirfd int, name, rel string) bool) string {
	c := &p.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil {
		c.dirs = map[entryID]*dirListing{}
	}
	c.gen++
	now := time.Now()
	wall, mono := now.UnixNano(), now.Sub(monoBase)
	if c.lastWall != 0 && time.Duration(wall-c.lastWall) < mono-c.lastMono-time.Second {
		clear(c.dirs)
	}
	c.lastWall, c.lastMono = wall, mono
	w := scanWalk{
		p: p, c: c, budget: budget, found: found,
		buf:         make([]byte, scanReadBuffer),
		trustBefore: now.Add(-c.trustMargin()),
		devOK:       map[uint64]bool{},
		start:       coarseNow(),
		visits:      c.visits[:0],
	}
	defer func() {
		clear(w.visits) // the listings are not kept through it
		c.visits = w.visits[:0]
	}()
	cut := w.dir(int(dir.Fd()), rel, depth)
	if cut == "" {
		// What was read is the workspace at one moment only if no
		// directory changed since it was read: each is checked again,
		// once the clock is past the change times met (verify).
		w.settle()
		cut = w.verify(int(dir.Fd()), rel)
		if cut == "" && w.future != (unix.Timespec{}) && !tsBefore(coarseNow(), w.future) {
			cut = scanChanged + " (a directory's change time was ahead of the clock, and the clock reached it)"
		}
	}
	if cut == "" {
		// What the scan did not meet is gone (or moved out): forgotten.
		for id, l := range c.dirs {
			if l.gen != c.gen {
				delete(c.dirs, id)
			}
		}
	}
	return cut
}

func (c *scanCache) trustMargin() time.Duration {
	if c.margin != 0 {
		return c.margin
	}
	return scanTrustMargin
}

func (w *scanWalk) dir(fd int, rel string, depth int) string {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "directory " + displayRel(rel) + " could not be read: " + err.Error()
	}
	if st.Mode&modeScan != modeScan && int(st.Uid) == executorUID && executorUID != 0 {
		// Opened, so readable; not searchable: its entries could
		// neither be stat'ed nor opened (modes.go).
		if _, changed, err := giveBack(fd, modeScan); err != nil || !changed {
			return "directory " + displayRel(rel) + " cannot be searched (mode " + strconv.FormatUint(uint64(st.Mode&0o7777), 8) + ")"
		}
		if err := unix.Fstat(fd, &st); err != nil {
			return "directory " + displayRel(rel) + " could not be read: " + err.Error()
		}
	}
	id := entryID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is not uint64 everywhere
	l := w.c.dirs[id]
	v := scanVisit{id: id, ctime: st.Ctim, recent: w.recent(st.Ctim)}
	if l == nil || l.ctime != st.Ctim || v.recent {
		var h hash.Hash
		if v.recent {
			h = sha256.New()
		}
		var cut string
		if l, cut = w.read(fd, rel, h, true); cut != "" {
			return cut
		}
		if h != nil {
			v.sum = new([sha256.Size]byte)
			h.Sum(v.sum[:0])
		}
		l.ctime = st.Ctim
		if time.Unix(st.Ctim.Unix()).Before(w.trustBefore) && w.cacheable(fd, id.dev) && (len(w.c.dirs) < scanCacheDirs || w.c.dirs[id] != nil) {
			w.c.dirs[id] = l
		} else {
			delete(w.c.dirs, id)
		}
	}
	if cut := w.take(l); cut != "" {
		return cut
	}
	v.l = l
	w.visits = append(w.visits, v)
	for _, name := range l.protected {
		// The directories above were not protected (or the walk would
		// not be here): the name alone decided.
		if !w.found(fd, name, path.Join(rel, name)) {
			return "stopped"
		}
	}
	for rest := l.subdirs; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, "\x00")
		if done, cut := w.leaf(fd, name, rel, depth); done || cut != "" {
			if cut != "" {
				return cut
			}
			continue
		}
		r := path.Join(rel, name)
		sub, err := openScanDir(fd, name)
		switch {
		case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT):
			// Replaced meanwhile by a file or a link, or gone: renamed
			// perhaps, with what it holds, to a name already read.
			return scanChangedAt(r)
		case err != nil:
			return "directory " + displayRel(r) + " could not be opened: " + err.Error()
		case depth+1 > protectScanDepth:
			_ = unix.Close(sub)
			return fmt.Sprintf("directories are nested more than %d deep", protectScanDepth)
		}
		cut := w.dir(sub, r, depth+1)
		_ = unix.Close(sub)
		if cut != "" {
			return cut
		}
	}
	return ""
}

// take counts the listing l in the scan, and marks it met.
func (w *scanWalk) take(l *dirListing) string {
	l.gen = w.c.gen
	if *w.budget >= 0 {
		if *w.budget -= l.entries; *w.budget < 0 {
			return "the workspace holds more entries than the scan reads"
		}
	}
	return ""
}

// leaf takes from the cache, with a single fstatat and without opening
// it, the subdirectory name of the directory fd (depth below the top)
// when its listing is known, unchanged, and holds neither a
// subdirectory nor a protected entry (most directories of a package
// tree): done reports whether it did, or name is gone, or is no longer
// a directory (a link is never followed).
func (w *scanWalk) leaf(fd int, name, rel string, depth int) (done bool, cut string) {
	var st unix.Stat_t
	switch err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
		return true, scanChangedAt(path.Join(rel, name)) // gone: renamed perhaps
	case err != nil:
		return false, "" // opening it tells why
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return true, scanChangedAt(path.Join(rel, name)) // replaced meanwhile by a file or a link
	}
	id := entryID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is not uint64 everywhere
	l := w.c.dirs[id]
	if l == nil || l.ctime != st.Ctim || l.subdirs != "" || len(l.protected) != 0 || w.recent(st.Ctim) {
		return false, ""
	}
	if depth+1 > protectScanDepth {
		return false, "" // opening it tells
	}
	if cut := w.take(l); cut != "" {
		return true, cut
	}
	w.visits = append(w.visits, scanVisit{id: id, ctime: st.Ctim, l: l, leaf: true})
	return true, ""
}

// cacheable reports whether listings of the device dev (the directory
// fd is on it) are kept.
func (w *scanWalk) cacheable(fd int, dev uint64) bool {
	ok, known := w.devOK[dev]
	if !known {
		var sfs unix.Statfs_t
		ok = unix.Fstatfs(fd, &sfs) == nil && scanCacheFS[int64(sfs.Type)] //nolint:unconvert // Type is not int64 everywhere
		w.devOK[dev] = ok
	}
	return ok
}

// read reads the directory fd (the workspace path rel) whole with
// getdents, a large buffer at a time: only names whose type the
// directory does not hold are stat'ed. With h, every entry's inode and
// name go into it, in the order read. count says that the read is the
// scan's (counted in the budget and the cache's reads), not verify's.
func (w *scanWalk) read(fd int, rel string, h hash.Hash, count bool) (*dirListing, string) {
	l := &dirListing{}
	var subdirs []byte
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, "directory " + displayRel(rel) + " could not be read: " + err.Error()
	}
	c := w.c
	if count {
		c.reads++
	}
	for {
		n, err := unix.Getdents(fd, w.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, "directory " + displayRel(rel) + " could not be read: " + err.Error()
		}
		if n <= 0 {
			break
		}
		for off := 0; off+19 <= n; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			reclen := int(binary.NativeEndian.Uint16(w.buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return nil, "directory " + displayRel(rel) + " could not be read: a malformed entry"
			}
			typ := w.buf[off+18]
			name := w.buf[off+19 : off+reclen]
			off += reclen
			for i, b := range name {
				if b == 0 {
					name = name[:i]
					break
				}
			}
			if string(name) == "." || string(name) == ".." {
				continue
			}
			if h != nil {
				_, _ = h.Write(w.buf[off-reclen : off-reclen+8]) // the inode
				_, _ = h.Write(name)
				_, _ = h.Write([]byte{0})
			}
			l.entries++
			if count && *w.budget >= 0 && l.entries > *w.budget {
				return nil, "the workspace holds more entries than the scan reads"
			}
			if w.p.matchNameBytes(name) {
				l.protected = append(l.protected, string(name))
				continue
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if errors.Is(err, unix.ENOENT) {
						return nil, scanChangedAt(path.Join(rel, string(name))) // gone since listed
					}
					continue
				}
				if st.Mode&unix.S_IFMT == unix.S_IFDIR {
					typ = unix.DT_DIR
				}
			}
			if typ == unix.DT_DIR {
				subdirs = append(subdirs, name...)
				subdirs = append(subdirs, 0)
			}
		}
	}
	l.subdirs = string(subdirs)
	return l, ""
}

// matchNameBytes is matchName, without allocating for a short ASCII
// name (nearly every name).
func (p *protectedPaths) matchNameBytes(name []byte) bool {
	var tmp [64]byte
	if len(name) > len(tmp) {
		return p.matchName(string(name))
	}
	f := tmp[:len(name)]
	for i, b := range name {
		switch {
		case b >= 0x80 || b == '\\':
			return p.matchName(string(name))
		case 'A' <= b && b <= 'Z':
			b += 'a' - 'A'
		}
		f[i] = b
	}
	for len(f) > 0 && (f[len(f)-1] == '.' || f[len(f)-1] == ' ') {
		f = f[:len(f)-1]
	}
	for i, b := range f {
		if b == ':' && i > 0 {
			f = f[:i]
			break
		}
	}
	return p.folded[string(f)]
}

// A directory's change time is the kernel's coarse wall clock when it
// changed (current_time: the clock of the last timer tick, 4 ms here,
// up to 10 ms), cut to its file system's granularity (ext4 with 128-byte
// inodes: seconds). Since Linux 6.13 (multigrain timestamps: ext4, XFS,
// Btrfs, tmpfs), a change after the time was read by a stat gets a finer
// one, always later; before, a change within the same tick as the one
// the scan read left the time as it was. So the scan takes a change time
// as proof that nothing changed since it read a directory only when that
// time was already past when the scan started, by its granularity
// (recent); a recent directory is read once more by verify after the
// clock passed it (settle), its entries compared.

// coarseNow is the clock the kernel stamps change times with.
func coarseNow() unix.Timespec {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	}
	return ts
}

func tsBefore(a, b unix.Timespec) bool {
	return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec
}

func tsAdd(a unix.Timespec, d time.Duration) unix.Timespec {
	return unix.NsecToTimespec(a.Nano() + d.Nanoseconds())
}

// ctimeGranularity is at least the granularity of the file system that
// stamped the change time c: the largest power of ten that divides its
// nanoseconds (a whole second: 2 s, as FAT's).
func ctimeGranularity(c unix.Timespec) time.Duration {
	if c.Nsec == 0 {
		return 2 * time.Second
	}
	g := time.Duration(1)
	for n := c.Nsec; n%10 == 0 && g < 100*time.Millisecond; n /= 10 {
		g *= 10
	}
	return g
}

// scanFutureSlack: a change time more than this ahead of the scan's start
// (the wall clock was stepped back since) is not recent: no change can be
// stamped with it before the clock reaches it, which verify checks.
const scanFutureSlack = 5 * time.Second

// recent reports whether a change of a directory after the scan read it
// could leave its change time c as it was: c is not past, by the file
// system's granularity, when the scan started.
func (w *scanWalk) recent(c unix.Timespec) bool {
	if !tsBefore(tsAdd(w.start, scanFutureSlack), c) {
		return tsBefore(w.start, tsAdd(c, ctimeGranularity(c)))
	}
	if w.future == (unix.Timespec{}) || tsBefore(c, w.future) {
		w.future = c
	}
	return false
}

// settle waits until the coarse clock is past the change times of the
// recent directories met (by their granularity): a change from then on
// gets another change time. At most a tick, or the granularity of a file
// system that keeps seconds.
func (w *scanWalk) settle() {
	var until unix.Timespec
	for _, v := range w.visits {
		if v.recent {
			if end := tsAdd(v.ctime, ctimeGranularity(v.ctime)); tsBefore(until, end) {
				until = end
			}
		}
	}
	for {
		now := coarseNow()
		if !tsBefore(now, until) {
			return
		}
		time.Sleep(time.Duration(until.Nano()-now.Nano()) + time.Millisecond)
	}
}

// verify walks again, through the listings the scan read, the
// directories it met, in the same order, and returns "" when each is
// still the directory met there and has not changed since it was read
// (its change time; for a recent one, its entries read again too):
// then what the scan read is the workspace at the moment verify started.
// Otherwise it returns why not (scanChanged). fd is the directory
// (workspace path rel) of the next visit.
func (w *scanWalk) verify(fd int, rel string) string {
	if w.next >= len(w.visits) {
		return scanChangedAt(rel)
	}
	v := &w.visits[w.next]
	w.next++
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "directory " + displayRel(rel) + " could not be read: " + err.Error()
	}
	if (entryID{dev: uint64(st.Dev), ino: st.Ino}) != v.id || st.Ctim != v.ctime { //nolint:unconvert // Dev is not uint64 everywhere
		return scanChangedAt(rel)
	}
	if v.recent {
		// Read again, and only then its change time: still the one
		// the scan read, so nothing changed since the clock passed it.
		h := sha256.New()
		if _, cut := w.read(fd, rel, h, false); cut != "" {
			return cut
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if err := unix.Fstat(fd, &st); err != nil {
			return "directory " + displayRel(rel) + " could not be read: " + err.Error()
		}
		if v.sum == nil || sum != *v.sum || st.Ctim != v.ctime {
			return scanChangedAt(rel)
		}
	}
	for rest := v.l.subdirs; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, "\x00")
		if w.next < len(w.visits) && w.visits[w.next].leaf {
			lv := &w.visits[w.next]
			w.next++
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
				(entryID{dev: uint64(st.Dev), ino: st.Ino}) != lv.id || st.Ctim != lv.ctime { //nolint:unconvert // Dev is not uint64 everywhere
				return scanChangedAt(path.Join(rel, name))
			}
			continue
		}
		r := path.Join(rel, name)
		sub, err := openScanDir(fd, name)
		if err != nil {
			return scanChangedAt(r)
		}
		cut := w.verify(sub, r)
		_ = unix.Close(sub)
		if cut != "" {
			return cut
		}
	}
	return ""
}
