package lctl

import "syscall"

// mapFile maps the file r reads, its first size bytes, read-only, for
// StreamOptions.Map: nil when it cannot (not a file, empty, too large).
// The mapping is never unmapped: the events' strings may point into it
// for as long as the process runs. A file cut shorter meanwhile faults
// the goroutine that reads past its new end (stream_fault.go).
func mapFile(r positionalReader, size int64) []byte {
	c, ok := r.(syscall.Conn)
	if !ok || size <= 0 || int64(int(size)) != size {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var m []byte
	cerr := rc.Control(func(fd uintptr) {
		m, err = syscall.Mmap(int(fd), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED) //nolint:gosec // fd from the file, size a positive int
	})
	if cerr != nil || err != nil {
		return nil
	}
	addMapping(m)
	return m
}

// giveBackMapped drops the pages of m's bytes [from, to) that lie whole
// inside it from the process (MADV_DONTNEED): the file's pages stay in
// the page cache, and a string that points into them reads them again
// from there. It returns where the pages given back end.
func giveBackMapped(m []byte, from, to int64) int64 {
	page := int64(syscall.Getpagesize())
	from = (from + page - 1) / page * page
	to = to / page * page
	if to <= from || to > int64(len(m)) {
		return from
	}
	_ = syscall.Madvise(m[from:to], syscall.MADV_DONTNEED) // advice: nothing to do when refused
	return to
}
