package lctl

import "sync"

// keep is a sync.Pool for lctl's large reused values (the 1 MiB read
// buffers, the ~25 KB parsers) that, in a binary built with the race
// detector, first keeps up to a few of them in a free list of its own.
// Under the race detector sync.Pool drops a quarter of what is put back
// (on purpose: code must not count on getting it again), so those values
// are allocated again, and there each allocation costs milliseconds (the
// span cleared, the detector's shadow memory reset): more than half of
// the lctl package's CPU under -race went to that (189 s, 82 s with the
// free list). The free list is a buffered
// channel, so the detector sees a put happen before the get that returns
// the value, as it does for sync.Pool. When it is full, or empty, the
// sync.Pool takes over, so that path runs under the detector too.
// Without the race detector raceDetector is a constant false and keep is
// its sync.Pool alone: the same code as before, and nothing kept past a
// garbage collection.
type keep struct {
	pool  sync.Pool
	spare chan any
}

// spares returns the race detector's free list for a keep, with room for
// n values; nil (none) without the race detector.
func spares(n int) chan any {
	if raceDetector {
		return make(chan any, n)
	}
	return nil
}

// Get returns a kept value, or a fresh one.
func (k *keep) Get() any {
	if raceDetector {
		select {
		case v := <-k.spare:
			return v
		default:
		}
	}
	return k.pool.Get()
}

// Put keeps v for a later Get.
func (k *keep) Put(v any) {
	if raceDetector {
		select {
		case k.spare <- v:
			return
		default:
		}
	}
	k.pool.Put(v)
}
