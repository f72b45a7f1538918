package redact

// hintIndex finds, in one pass over a string, which matchers have one of
// their hints in it, so a string with none (most of them) costs one scan
// instead of one search per hint.
type hintIndex struct {
	byFirst [256][]hintRef
	always  uint64 // matchers without hints
}

type hintRef struct {
	m    int
	hint string
	fold bool
}

// maxIndexed matchers fit in the mask; later ones always run.
const maxIndexed = 64

func newHintIndex(ms []matcher) *hintIndex {
	x := &hintIndex{}
	for i, m := range ms {
		if i >= maxIndexed {
			break
		}
		if len(m.hints) == 0 {
			x.always |= 1 << i
			continue
		}
		for _, h := range m.hints {
			if h == "" {
				x.always |= 1 << i
				continue
			}
			ref := hintRef{m: i, hint: h, fold: m.fold}
			c := h[0]
			x.byFirst[c] = append(x.byFirst[c], ref)
			if m.fold && c >= 'a' && c <= 'z' {
				x.byFirst[c-32] = append(x.byFirst[c-32], ref)
			}
		}
	}
	return x
}

// scan returns the mask of matchers worth running on s.
func (x *hintIndex) scan(s string) uint64 {
	mask := x.always
	for i := 0; i < len(s); i++ {
		for _, h := range x.byFirst[s[i]] {
			if mask&(1<<h.m) != 0 || len(s)-i < len(h.hint) {
				continue
			}
			if hasAt(s, i, h.hint, h.fold) {
				mask |= 1 << h.m
			}
		}
	}
	return mask
}

func hasAt(s string, i int, h string, fold bool) bool {
	if !fold {
		return s[i:i+len(h)] == h
	}
	for j := 0; j < len(h); j++ {
		if s[i+j]|0x20 != h[j] {
			return false
		}
	}
	return true
}
