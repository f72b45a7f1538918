package analysis

import "slices"

// chunked is a list that grows in fixed chunks: appending never copies
// what is there (a slice of a million step timings grown by append copies
// it over and over, on the goroutine that applies the events in order).
// all turns it into one slice, after which it grows as a slice.
type chunked[T any] struct {
	chunks [][]T
	n      int
	// flat, once all was called, is the whole list.
	flat []T
	done bool
}

// chunkBits sets the chunk size (4,096 elements).
const chunkBits = 12

func (c *chunked[T]) add(v T) {
	c.n++
	if c.done {
		c.flat = append(c.flat, v)
		return
	}
	if (c.n-1)>>chunkBits == len(c.chunks) {
		c.chunks = append(c.chunks, make([]T, 0, 1<<chunkBits))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, v)
}

func (c *chunked[T]) len() int { return c.n }

// at returns the i-th element, for changing it in place.
func (c *chunked[T]) at(i int) *T {
	if c.done {
		return &c.flat[i]
	}
	return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)]
}

// all returns the list as one slice with room for extra more elements.
// The chunks are let go as they are copied, so the list is held about
// once, not twice; the slice is the list from then on.
func (c *chunked[T]) all(extra int) []T {
	if !c.done {
		c.flat = make([]T, 0, c.n+extra)
		for i, ch := range c.chunks {
			c.flat = append(c.flat, ch...)
			c.chunks[i] = nil
		}
		c.chunks, c.done = nil, true
	}
	return c.flat
}

// each calls fn with each element in order.
func (c *chunked[T]) each(fn func(i int, v *T)) {
	if c.done {
		for i := range c.flat {
			fn(i, &c.flat[i])
		}
		return
	}
	i := 0
	for _, ch := range c.chunks {
		for k := range ch {
			fn(i, &ch[k])
			i++
		}
	}
}

// appendDoubling is append, growing a full list to twice its length (as
// lctl's reducer does): append grows a long list by a quarter, copying it
// over and over.
func appendDoubling[T any](l []T, v T) []T {
	if len(l) == cap(l) && len(l) >= 256 {
		l = slices.Grow(l, len(l))
	}
	return append(l, v)
}
