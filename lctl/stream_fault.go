package lctl

import (
	"errors"
	"reflect"
	"runtime"
	"sync"
)

// ErrFileChanged is what a stream of a mapped file (StreamOptions.Map)
// says when the file was cut shorter while it was read: the pages past
// its new end are gone from the mapping, and reading one faults (SIGBUS).
// The goroutines that read the mapping turn that fault into this error
// (debug.SetPanicOnFault and MappedFault) instead of the process dying
// with a stack dump.
var ErrFileChanged = errors.New("the file was cut shorter while lctl read it (a log being rotated or rewritten?): read a copy of it")

// mapped holds the spans of the files mapped for StreamOptions.Map (never
// unmapped), so that MappedFault tells a fault on one of them from any
// other.
var mapped struct {
	sync.Mutex
	spans [][2]uintptr
}

// addMapping records m as a mapped file's bytes.
func addMapping(m []byte) {
	if len(m) == 0 {
		return
	}
	start := reflect.ValueOf(m).Pointer() // the mapping's address, compared with a fault's
	mapped.Lock()
	mapped.spans = append(mapped.spans, [2]uintptr{start, start + uintptr(len(m))})
	mapped.Unlock()
}

// MappedFault says whether r, a value recovered from a panic in a
// goroutine that set debug.SetPanicOnFault, is a fault on the pages of a
// file mapped for StreamOptions.Map: that file was cut shorter while it
// was read (ErrFileChanged). Any other panic is not.
func MappedFault(r any) bool {
	e, ok := r.(runtime.Error)
	if !ok {
		return false
	}
	a, ok := e.(interface{ Addr() uintptr })
	if !ok {
		return false
	}
	addr := a.Addr()
	mapped.Lock()
	defer mapped.Unlock()
	for _, s := range mapped.spans {
		if addr >= s[0] && addr < s[1] {
			return true
		}
	}
	return false
}
