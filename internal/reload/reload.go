// Package reload keeps a value parsed from files current: the files are
// looked at again (size and modification time) when the value is asked for,
// at most once per interval, and re-read and re-parsed when any of them
// changed. A change that does not parse keeps the last good value, so a
// half-written rotation never takes a working credential away.
package reload

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// Files is a value of type T parsed from a fixed list of files.
type Files[T any] struct {
	paths   []string
	parse   func(data [][]byte) (T, error)
	every   time.Duration
	onError func(error)

	mu      sync.Mutex
	val     T
	stamps  []stamp
	checked time.Time
	problem string // the last reload error reported, so it is reported once
}

// stamp is what identifies a version of a file without reading it.
type stamp struct {
	size int64
	mod  time.Time
	ok   bool
}

// New reads and parses the files now; it fails when they cannot be read or
// parsed. every bounds how often Get looks at the files (0: every time).
// onError, if not nil, hears about a changed file that could not be read or
// parsed (once per distinct problem); the last good value stays in force.
func New[T any](parse func(data [][]byte) (T, error), every time.Duration, onError func(error), paths ...string) (*Files[T], error) {
	if len(paths) == 0 {
		return nil, errors.New("reload: no files")
	}
	f := &Files[T]{paths: slices.Clone(paths), parse: parse, every: every, onError: onError}
	stamps := f.stat()
	val, err := f.read()
	if err != nil {
		return nil, err
	}
	f.val, f.stamps, f.checked = val, stamps, time.Now()
	return f, nil
}

// Get returns the current value, re-reading the files first if they
// changed since they were last read.
func (f *Files[T]) Get() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.checked) < f.every {
		return f.val
	}
	f.checked = now
	stamps := f.stat()
	if slices.Equal(stamps, f.stamps) {
		return f.val
	}
	val, err := f.read()
	if err != nil {
		if msg := err.Error(); msg != f.problem {
			f.problem = msg
			if f.onError != nil {
				f.onError(err)
			}
		}
		return f.val
	}
	f.val, f.stamps, f.problem = val, stamps, ""
	return f.val
}

func (f *Files[T]) stat() []stamp {
	out := make([]stamp, len(f.paths))
	for i, p := range f.paths {
		if fi, err := os.Stat(p); err == nil {
			out[i] = stamp{size: fi.Size(), mod: fi.ModTime(), ok: true}
		}
	}
	return out
}

func (f *Files[T]) read() (T, error) {
	var zero T
	data := make([][]byte, len(f.paths))
	for i, p := range f.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return zero, fmt.Errorf("read %s: %w", p, err)
		}
		data[i] = b
	}
	val, err := f.parse(data)
	if err != nil {
		return zero, fmt.Errorf("%v: %w", f.paths, err)
	}
	return val, nil
}
