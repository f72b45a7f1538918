package lctl

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
)

// Strings seen before, found by their bytes. An event's keys and most of
// its short values (tools, outcomes, agents, a step's id in its step's
// next events) repeat; a rawTable maps the exact bytes between a string's
// quotes to what reading them gave, so that reading them again is two
// word compares: no scan of each byte, no hashing, no allocation. Only
// bytes the careful reader has accepted are put in a table, and equal
// bytes decode to equal values, so a hit is exactly what the careful read
// would give (escapes and all), and checks the bytes as well as it did.

// rawMax is the most bytes between quotes a rawTable holds: three
// words, less the closing quote, which must lie in them.
const rawMax = 23

// rawKey is the bytes between a string's quotes as three little-endian
// words (zero past them) and their count (noRaw: none, see quoted).
// noRaw is a rawKey's count when it has no bytes: its count plus one
// is no slot's.
const noRaw = -2

type rawKey struct {
	w0, w1, w2 uint64
	n          int
}

// rawSlot is a rawKey (n its count plus one; 0: an empty slot) and what
// its bytes read as.
type rawSlot struct {
	w0, w1, w2 uint64
	n          int
	s          string
	v          any
	// shape is, in topTab, the data's shape of events of the type the
	// slot's bytes name (see dataShape); nil when none is known.
	shape *dataShape
}

// rawTable is a direct-mapped table of rawSlots.
type rawTable [1 << rawBits]rawSlot

// rawBits sets a rawTable's size: large enough that the few dozen values
// that repeat in every few events seldom share a slot.
const rawBits = 10

// quoted returns the bytes of the string that starts at b[i] (a quote) up
// to the next quote byte; n < 0 when there is none among the next 24 or
// in b. Fewer than 25 bytes left in b (a string near the end of an event
// whose data comes last, as in the spec's order) are read as 24 from the
// array beyond b when it has them (the next events' bytes, never
// written while they are read), the quote still in b. A quote byte may be
// an escaped one: then the careful read takes more bytes than n+2 and the
// bytes go in no table.
func quoted(b []byte, i int) (k rawKey) {
	left := len(b) - i - 1 // bytes after the opening quote
	if left < 24 {
		if i+25 > cap(b) {
			return rawKey{n: noRaw}
		}
		b = b[:i+25]
	}
	b = b[i+1 : i+25]
	w0 := binary.LittleEndian.Uint64(b)
	if m := zeroBytes(w0 ^ (ones * '"')); m != 0 {
		n := bits.TrailingZeros64(m) >> 3
		if n >= left {
			return rawKey{n: noRaw}
		}
		return rawKey{w0: w0 & (1<<(8*n) - 1), n: n}
	}
	w1 := binary.LittleEndian.Uint64(b[8:])
	if m := zeroBytes(w1 ^ (ones * '"')); m != 0 {
		n := bits.TrailingZeros64(m) >> 3
		if 8+n >= left {
			return rawKey{n: noRaw}
		}
		return rawKey{w0: w0, w1: w1 & (1<<(8*n) - 1), n: 8 + n}
	}
	w2 := binary.LittleEndian.Uint64(b[16:])
	if m := zeroBytes(w2 ^ (ones * '"')); m != 0 {
		n := bits.TrailingZeros64(m) >> 3
		if 16+n >= left {
			return rawKey{n: noRaw}
		}
		return rawKey{w0: w0, w1: w1, w2: w2 & (1<<(8*n) - 1), n: 16 + n}
	}
	return rawKey{n: noRaw}
}

// lastQuoted is quoted for a string that ends two bytes before the end
// of b (the type, last in a canonical event: `"t"}`), read without
// looking past b.
func lastQuoted(b []byte, i int) (k rawKey) {
	n := len(b) - 2 - (i + 1)
	if n < 0 || n > rawMax || b[len(b)-2] != '"' {
		k.n = noRaw
		return k
	}
	var buf [24]byte
	copy(buf[:], b[i+1:i+1+n])
	return rawKey{w0: binary.LittleEndian.Uint64(buf[:]), w1: binary.LittleEndian.Uint64(buf[8:]),
		w2: binary.LittleEndian.Uint64(buf[16:]), n: n}
}

// zeroBytes returns the high bits of x's zero bytes, and maybe of bytes
// after the first (never before it): its lowest set bit is the first
// zero byte's.
func zeroBytes(x uint64) uint64 { return (x - ones) &^ x & highs }

// slot returns k's slot.
func (t *rawTable) slot(k *rawKey) *rawSlot {
	return &t[((k.w0^bits.RotateLeft64(k.w1, 29)^k.w2^uint64(k.n))*0x9e3779b97f4a7c15)>>(64-rawBits)]
}

// lookup returns the slot holding k's bytes, nil when none does.
func (t *rawTable) lookup(k *rawKey) *rawSlot {
	s := t.slot(k)
	if s.n != k.n+1 || s.w0 != k.w0 || s.w1 != k.w1 || s.w2 != k.w2 {
		return nil
	}
	return s
}

// put remembers that k's bytes read as s (and v), when the careful read
// took exactly them and their quotes (read, the bytes it took, is n+2),
// and returns its slot (nil when it did not).
func (t *rawTable) put(k *rawKey, read int, s string, v any) *rawSlot {
	if k.n < 0 || read != k.n+2 {
		return nil
	}
	sl := t.slot(k)
	*sl = rawSlot{w0: k.w0, w1: k.w1, w2: k.w2, n: k.n + 1, s: s, v: v}
	return sl
}

// tableString reads a string as strIntern(true) does, through t; last
// says it ends two bytes before the end of the bytes (lastQuoted).
func (p *fastParser) tableString(t *rawTable, last bool) (string, bool) {
	s, _, ok := p.tableSlot(t, last)
	return s, ok
}

// tableSlot is tableString that also returns the string's slot in t (nil
// when it is in none).
func (p *fastParser) tableSlot(t *rawTable, last bool) (string, *rawSlot, bool) {
	var k rawKey
	if last {
		k = lastQuoted(p.b, p.i)
	} else {
		k = quoted(p.b, p.i)
	}
	if s := t.lookup(&k); s != nil {
		p.i += k.n + 2
		return s.s, s, true
	}
	start := p.i
	s, ok := p.strIntern(true)
	var sl *rawSlot
	if ok {
		sl = t.put(&k, p.i-start, s, nil)
	}
	return s, sl, ok
}

// Events of a type mostly carry the same keys in the same order, and
// many of them the same short values (a tool, a decision, a status): a
// dataShape holds, per type (in its slot of topTab), the strings that
// were at each place of the data the last time, and canonData compares
// the bytes there with them (two masked words) before it looks for them
// in its tables (a search for the closing quote, a hash, four compares).

// shapeMembers is how many members of a type's data its shape holds.
const shapeMembers = 8

// shapeMax is the most bytes between quotes a strGuess holds: with the
// closing quote, two words.
const shapeMax = 14

// dataShape is the keys and string values of a type's data as they were
// the last time, member by member.
type dataShape struct {
	keys, vals [shapeMembers]strGuess
	// agent is the agent of the type's last event; next, the type of the
	// event after it (with its shape).
	agent, next strGuess
	// asked says wants and unread hold what the parser's dataFor and
	// unreadFor say of the type (wantsData, unreadOf).
	asked           bool
	wants           bool
	unread, unread2 string
	// skipKeys and skipVals guess the keys and string values of the
	// type's data where dataSkip checks it without decoding it (their s
	// and v are not set: only where a string ends is taken from them).
	skipKeys, skipVals [shapeMembers]strGuess
}

// wantsData is p.dataFor(t) (set), asked once per type: t's shape, when
// there is one, keeps the answer. A command's function went through two
// or three closures and a switch on the type's name: ~170 instructions an
// event on the decoding cores.
func (p *fastParser) wantsData(t string, shape *dataShape) bool {
	if shape == nil {
		return p.dataFor(t)
	}
	if !shape.asked {
		p.askShape(t, shape)
	}
	return shape.wants
}

// unreadOf is p.unreadFor(t) ("" when not set) split into its members
// (unreadMembers), kept as wantsData keeps its answer.
func (p *fastParser) unreadOf(t string, shape *dataShape) (string, string) {
	if p.unreadFor == nil {
		return "", ""
	}
	if shape == nil {
		return unreadMembers(p.unreadFor(t))
	}
	if !shape.asked {
		p.askShape(t, shape)
	}
	return shape.unread, shape.unread2
}

// unreadMembers splits what StreamOptions.Unread says of a type: "" (none),
// one member's name, or two separated by a comma. With one, the second is
// that one again, so that canonData compares a key with both and never
// takes an empty second name for the empty key.
func unreadMembers(names string) (string, string) {
	a, b, two := strings.Cut(names, ",")
	if !two {
		return names, names
	}
	if a == "" || b == "" || strings.Contains(b, ",") {
		panic("lctl: StreamOptions.Unread names one member or two separated by a comma, not " + strconv.Quote(names))
	}
	return a, b
}

// askShape asks dataFor and unreadFor of t, shape's type. They are the
// stream's options, the same for the parser's life (dataFor may be set
// to nil, which the callers look at first).
func (p *fastParser) askShape(t string, shape *dataShape) {
	shape.asked = true
	shape.wants = p.dataFor == nil || p.dataFor(t)
	if p.unreadFor != nil {
		shape.unread, shape.unread2 = unreadMembers(p.unreadFor(t))
	}
}

// strGuess is a string expected at a place: its bytes between the quotes
// and the closing quote as two little-endian words (w0, w1) with masks
// that keep just them (m0, m1; m0 is 0 when there is no guess), their
// count, and what they read as (a key's string, a value's value).
// misses counts the misses since the last hit: a place whose string is
// new each time (a step's id) is guessed anew only now and then (miss).
type strGuess struct {
	w0, w1, m0, m1 uint64
	n              int
	s              string
	v              any
	misses         uint32
	// shape is, for a type's guess (dataShape.next), its type's shape.
	shape *dataShape
}

// miss records that g's guess was wrong and the string there is in sl
// (nil: in no table), and makes it the guess on the first two misses
// after a hit and every sixteenth after them.
func (g *strGuess) miss(sl *rawSlot) bool {
	g.misses++
	if g.misses <= 2 || g.misses%16 == 0 {
		g.set(sl)
		return true
	}
	return false
}

// set makes g a guess of the string in sl (from keyTab or valTab: its
// bytes are those of a string the careful read took, up to its quote),
// or no guess when it is longer than shapeMax or sl is nil.
func (g *strGuess) set(sl *rawSlot) {
	if sl == nil || sl.n-1 > shapeMax {
		g.m0 = 0
		return
	}
	n := sl.n - 1
	w0, w1 := sl.w0, sl.w1
	if n < 8 {
		w0 |= '"' << (8 * n)
	} else {
		w1 |= '"' << (8 * (n - 8))
	}
	g.setWords(w0, w1, n)
	g.s, g.v = sl.s, sl.v
}

// setWords makes g a guess of the n bytes (n <= shapeMax) in w0 and w1,
// the quote after them included.
func (g *strGuess) setWords(w0, w1 uint64, n int) {
	m0, m1 := ^uint64(0), uint64(0)
	if n < 7 {
		m0 = 1<<(8*(n+1)) - 1
	} else if n > 7 {
		m1 = 1<<(8*(n-7)) - 1
	}
	g.w0, g.w1, g.m0, g.m1, g.n = w0, w1, m0, m1, n
}

// missPlain is miss for dataSkip's guesses (dataShape.skipKeys and
// skipVals): the string at b[i] (its quote) is plain ASCII up to its
// quote at b[end], which asciiEnd found.
func (g *strGuess) missPlain(b []byte, i, end int) {
	g.misses++
	if g.misses > 2 && g.misses%16 != 0 {
		return
	}
	n := end - i - 1
	if n > shapeMax {
		g.m0 = 0
		return
	}
	var w [16]byte
	copy(w[:], b[i+1:end+1]) // the bytes and the quote
	g.setWords(binary.LittleEndian.Uint64(w[:]), binary.LittleEndian.Uint64(w[8:]), n)
}

// at says whether the string at b[i] (a quote) is g's: its bytes and a
// quote after them, within b (read as quoted reads: sixteen bytes, from
// the array beyond b when b ends sooner; false when the array ends
// sooner). g's bytes hold no quote and went into a table only when the
// careful read took exactly them and their quotes: the careful read of
// the string at b[i] takes them again and gives what it gave then, which
// is g's (and quoted, where it takes bytes, takes them: the table would
// give the same).
func (g *strGuess) at(b []byte, i int) bool {
	if g.m0 == 0 || i+17 > cap(b) || i+1+g.n >= len(b) {
		return false
	}
	w := b[i+1 : i+17]
	return binary.LittleEndian.Uint64(w)&g.m0 == g.w0 && binary.LittleEndian.Uint64(w[8:])&g.m1 == g.w1
}

// canonData reads the data object at p.i (its '{') into fields as
// dataFields does: for data laid out as canonical JSON lays it out, and
// for data with white space between its tokens (Python's separators, its
// indent), which costs a look at one byte where canonical JSON has none;
// false for anything it does not decide, which dataFields decides.
// Keys and short string values come from the parser's tables, whole
// numbers are read in place, other values as member reads them.
func (p *fastParser) canonData(e *Event, shape *dataShape) bool {
	b := p.b
	i := p.i + 1
	member := 0 // the member's place, for shape
	start := len(p.slab)
	p.rawBegin(p.i)
	p.unreadMade = false
	p.pairAt = -1
	if p.slab == nil {
		p.slab = make([]dataField, 0, 64)
	}
	i = skipAt(b, i)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				// White space where canonical JSON has none is looked
				// for only where the byte it has is not there.
				if i = skipAt(b, i); i >= len(b) || b[i] != '"' {
					return false
				}
			}
			// The key: the shape's, else from the table.
			var k string
			var kg, vg *strGuess // the member's guesses
			if shape != nil && member < shapeMembers {
				kg, vg = &shape.keys[member], &shape.vals[member]
			}
			member++
			if kg != nil && kg.at(b, i) {
				k = kg.s
				i += kg.n + 2
				kg.misses = 0
			} else {
				rk := quoted(b, i)
				if s := p.keyTab.lookup(&rk); s != nil {
					k = s.s
					i += rk.n + 2
					if kg != nil {
						kg.miss(s)
					}
				} else {
					p.i = i
					var ok bool
					if k, ok = p.knownKey(); !ok {
						if k, ok = p.key(); !ok {
							return false
						}
					}
					s := p.keyTab.put(&rk, p.i-i, k, nil)
					if kg != nil {
						kg.miss(s)
					}
					i = p.i
				}
			}
			if i >= len(b) || b[i] != ':' {
				if i = skipAt(b, i); i >= len(b) || b[i] != ':' {
					return false
				}
			}
			i++
			i = skipAt(b, i)
			if i >= len(b) {
				return false
			}
			// The value.
			if len(p.unreadKey) != 0 && (k == p.unreadKey || k == p.unreadKey2) && (b[i] == '"' || b[i] == '{' || b[i] == '[') {
				var ok bool
				if i, ok = p.unreadValue(i); !ok {
					return false
				}
				p.slab = append(p.slab, dataField{key: k, v: unreadField})
				p.unreadMade = true
			} else {
				switch c := b[i]; {
				case c == '"':
					if vg != nil && vg.at(b, i) {
						p.slab = append(p.slab, dataField{key: k, v: vg.v})
						i += vg.n + 2
						vg.misses = 0
						break
					}
					rk := quoted(b, i)
					if s := p.valTab.lookup(&rk); s != nil {
						p.slab = append(p.slab, dataField{key: k, v: s.v})
						i += rk.n + 2
						if vg != nil {
							vg.miss(s)
						}
						break
					}
					// Not in the table: most such strings are new (a step's id,
					// read first), so not looked for in the intern table either.
					p.i = i
					var v any
					if raw, ok := p.rawString(); ok {
						if len(raw) > internMax && p.keepText(k, raw) {
							i = p.i
							break
						}
						v = string(raw) // a copy: the table keeps it
					} else {
						s, ok := p.strIntern(false)
						if !ok {
							return false
						}
						v = s
					}
					if s, short := v.(string); short && len(s) <= internMax {
						sl := p.valTab.put(&rk, p.i-i, s, v)
						if vg != nil {
							vg.miss(sl)
						}
					}
					p.slab = append(p.slab, dataField{key: k, v: v})
					i = p.i
				case c >= '1' && c <= '9':
					// A whole number of up to 15 digits is exact in a float64.
					u := uint64(c - '0')
					j := i + 1
					for j < len(b) && j-i < 16 && b[j]-'0' <= 9 {
						u = u*10 + uint64(b[j]-'0')
						j++
					}
					if j < len(b) && j-i < 16 && b[j] != '.' && b[j] != 'e' && b[j] != 'E' {
						p.slab = append(p.slab, dataField{key: k, v: numberField, n: float64(u)})
						i = j
						break
					}
					fallthrough
				default:
					p.i = i
					if !p.member(k) {
						return false
					}
					i = p.i
				}
			}
			if i >= len(b) {
				return false
			}
			if b[i] == ',' {
				i++
				continue
			}
			if b[i] == '}' {
				i++
				break
			}
			if i = skipWS(b, i); i < len(b) && b[i] == ',' {
				i++
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	p.i = i
	e.fields = p.slab[start:len(p.slab):len(p.slab)]
	p.rawEnd(e)
	p.keepPair(e, start)
	return true
}

// keepPair gives e the token pair member read (Event.TokenPair), when it
// is its data's tokens: the last member of that name. start is where the
// event's members start in the slab.
func (p *fastParser) keepPair(e *Event, start int) {
	if p.pairAt >= start && p.pairAt < len(p.slab) && e.field("tokens") == &p.slab[p.pairAt] {
		e.pairSet, e.pairIn, e.pairOut = true, p.pairIn, p.pairOut
	}
}

// unreadValue checks the string, object or array at b[i] as decoding it
// would (a string of plain ASCII, else the careful read; an object or an
// array as member checks one it keeps) and returns where it ends.
func (p *fastParser) unreadValue(i int) (int, bool) {
	b := p.b
	if b[i] == '"' {
		if j, ok := asciiEnd(b, i+1); ok {
			return j + 1, true
		}
		p.i = i
		if _, ok := p.strKeep(false, false); !ok {
			return 0, false
		}
		return p.i, true
	}
	if end, ok := p.canonSkip(i); ok {
		return end, true
	}
	p.i = i
	if !p.skipValue() {
		return 0, false
	}
	return p.i, true
}

// canonSkip returns where the object or array at b[i] ends, for one at
// most 64 deep (laid out as canonical JSON lays it out, or with white
// space between its tokens), accepting exactly what skipValue accepts;
// false for anything else, which skipValue decides. Its strings are looked for in skipTab (bytes
// the careful check took before), its numbers checked in place.
func (p *fastParser) canonSkip(i int) (int, bool) {
	b := p.b
	if end, ok := flatSkip(b, i); ok {
		return end, true
	}
	var objects uint64 // bit d: the container at depth d is an object
	depth := 0
	for {
		// A value starts at b[i].
		i = skipAt(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			end := byte(']')
			if c == '{' {
				end = '}'
			}
			if j := i + 1; j < len(b) && (b[j] == end || b[j] <= ' ' && skipWS(b, j) < len(b) && b[skipWS(b, j)] == end) {
				i = skipWS(b, j) + 1
				break
			}
			if depth == 64 {
				return 0, false
			}
			objects &^= 1 << depth
			if c == '{' {
				objects |= 1 << depth
			}
			depth++
			i++
			if c == '{' {
				var ok bool
				if i, ok = p.skipKey(i); !ok {
					return 0, false
				}
			}
			continue
		case c == '"':
			var ok bool
			if i, ok = p.skipString(i); !ok {
				return 0, false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			_, _, next, ok := scanNumber(b, i)
			if !ok {
				return 0, false
			}
			i = next
		case c == 't' && i+4 <= len(b) && string(b[i:i+4]) == "true":
			i += 4
		case c == 'f' && i+5 <= len(b) && string(b[i:i+5]) == "false":
			i += 5
		case c == 'n' && i+4 <= len(b) && string(b[i:i+4]) == "null":
			i += 4
		default:
			return 0, false
		}
		// A value has ended at b[i]: what follows it in its container.
		for {
			if depth == 0 {
				return i, true
			}
			if i >= len(b) {
				return 0, false
			}
			object := objects&(1<<(depth-1)) != 0
			if b[i] == ',' {
				i++
				if object {
					var ok bool
					if i, ok = p.skipKey(i); !ok {
						return 0, false
					}
				}
				break
			}
			if (object && b[i] == '}') || (!object && b[i] == ']') {
				depth--
				i++
				continue
			}
			if j := skipWS(b, i); j > i {
				// White space, looked for only where canonical JSON's
				// byte is not.
				i = j
				continue
			}
			return 0, false
		}
	}
}

// skipKey moves past an object's key at b[i] and its colon, returning
// where its value starts.
func (p *fastParser) skipKey(i int) (int, bool) {
	j, ok := p.skipString(i)
	if !ok || j >= len(p.b) || p.b[j] != ':' {
		return p.skipKeyWS(i)
	}
	return j + 1, true
}

// skipKeyWS is skipKey with white space before the key and before its
// colon.
func (p *fastParser) skipKeyWS(i int) (int, bool) {
	i, ok := p.skipString(skipWS(p.b, i))
	if !ok {
		return 0, false
	}
	if i = skipWS(p.b, i); i >= len(p.b) || p.b[i] != ':' {
		return 0, false
	}
	return i + 1, true
}

// skipAt is skipWS with one look where there is no white space (as in
// canonical JSON): inlined where skipWS is not.
func skipAt(b []byte, i int) int {
	if i < len(b) && b[i] <= ' ' {
		return skip1(b, i)
	}
	return i
}

// skip1 is skipWS at white space, with the one space of Python's
// separators (", ", ": ") stepped over without a call.
func skip1(b []byte, i int) int {
	if b[i] == ' ' && i+1 < len(b) && b[i+1] > ' ' {
		return i + 1
	}
	return skipWS(b, i)
}

// skipWS returns where the white space JSON allows that starts at b[i]
// ends.
func skipWS(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c > ' ' || wsBits>>c&1 == 0 {
			return i
		}
		i++
	}
	return i
}

// wsBits has bit c set for each byte c that is JSON's white space.
const wsBits = 1<<' ' | 1<<'\n' | 1<<'\r' | 1<<'\t'

// skipString moves past the string at b[i], checked: found in skipTab,
// or checked the careful way and then put there.
func (p *fastParser) skipString(i int) (int, bool) {
	if i >= len(p.b) || p.b[i] != '"' {
		return 0, false
	}
	k := quoted(p.b, i)
	if p.skipTab.lookup(&k) != nil {
		return i + k.n + 2, true
	}
	save := p.i
	p.i = i
	_, ok := p.strKeep(false, false)
	end := p.i
	p.i = save
	if !ok {
		return 0, false
	}
	p.skipTab.put(&k, end-i, "", nil)
	return end, true
}

// specEvent reads an event whose members come in the spec's order (seq,
// type, timestamp, agent, data; what the reference implementation
// writes: no chain_id, no hashes), with or without white space between
// its tokens (Python's separators, its indent), in one straight pass
// with exactly the values the general loop gives; false, for anything
// else, leaves the event to that loop (the caller resets what this
// changed).
func (p *fastParser) specEvent(e *Event) bool {
	b := p.b
	i := skipAt(b, 0)
	if i+8 > len(b) || b[i] != '{' {
		return false
	}
	p.hashFrom, p.hashTo = -1, -1
	// "seq": a plain whole number.
	if i = skipAt(b, i+1); i+6 > len(b) || string(b[i:i+5]) != `"seq"` {
		return false
	}
	if i = skipAt(b, i+5); i >= len(b) || b[i] != ':' {
		return false
	}
	p.i = skipAt(b, i+1)
	n, ok := p.plainUint()
	if !ok {
		return false
	}
	e.Seq = n
	// "type"
	if j := pyKey(b, p.i, pyType0, pyType1, pyTypeM, pyTypeN); j >= 0 {
		p.i = j
	} else if !p.specKey(specType) {
		return false
	}
	// First the type that followed the last event's, with its shape.
	var shape *dataShape
	tg := &p.firstType
	if p.lastShape != nil {
		tg = &p.lastShape.next
	}
	var s string
	if tg.at(b, p.i) {
		s, shape = tg.s, tg.shape
		p.i += tg.n + 2
		tg.misses = 0
	} else {
		var ts *rawSlot
		if s, ts, ok = p.tableSlot(&p.topTab, false); !ok {
			return false
		}
		// The shape of the type's data (none without a slot).
		if ts != nil {
			if ts.shape == nil {
				ts.shape = new(dataShape)
			}
			shape = ts.shape
		}
		if tg.miss(ts) {
			tg.shape = shape
		}
	}
	p.lastShape = shape
	if s == "" {
		return false
	}
	e.Type = s
	// "timestamp"
	if j := pyKey(b, p.i, pyTimestamp0, pyTimestamp1, pyTimestampM, pyTimestampN); j >= 0 {
		p.i = j
	} else if !p.specKey(specTimestamp) {
		return false
	}
	if e.Timestamp, ok = p.timestampString(); !ok {
		return false
	}
	// "agent"
	if j := pyKey(b, p.i, pyAgent0, pyAgent1, pyAgentM, pyAgentN); j >= 0 {
		p.i = j
	} else if !p.specKey(specAgent) {
		return false
	}
	if shape != nil && shape.agent.at(b, p.i) {
		e.Agent = shape.agent.s
		p.i += shape.agent.n + 2
		shape.agent.misses = 0
	} else {
		var as *rawSlot
		if e.Agent, as, ok = p.tableSlot(&p.topTab, false); !ok {
			return false
		}
		if shape != nil {
			shape.agent.miss(as)
		}
	}
	// "data"
	if j := pyKey(b, p.i, pyData0, pyData1, pyDataM, pyDataN); j >= 0 {
		p.i = j
	} else if !p.specKey(specData) {
		return false
	}
	if p.i >= len(b) || b[p.i] != '{' {
		return false
	}
	if p.fields {
		if p.dataFor != nil && !p.wantsData(e.Type, shape) {
			if !p.skipData(e, shape) {
				return false
			}
		} else {
			p.unreadKey, p.unreadKey2 = p.unreadOf(e.Type, shape)
			if !p.canonData(e, shape) {
				return false
			}
		}
	} else {
		v, ok := p.value()
		if !ok {
			return false
		}
		e.Data = v.(map[string]any)
	}
	if i = skipAt(b, p.i); i >= len(b) || b[i] != '}' || skipAt(b, i+1) != len(b) {
		return false
	}
	p.i = len(b)
	p.prevEventHash = ""
	return true
}

// The keys after seq in the spec's order, quoted, for specKey.
const (
	specType = iota
	specTimestamp
	specAgent
	specData
)

// specKeyWords are the quoted keys as two little-endian words and the
// masks that keep their bytes (topKeyWords' layout), and their lengths.
var specKeyWords, specKeyLens = func() (w [4][4]uint64, n [4]int) {
	for k, q := range [...]string{`"type"`, `"timestamp"`, `"agent"`, `"data"`} {
		w[k], n[k] = keyWords(q), len(q)
	}
	return w, n
}()

// specPyWords are the keys as Python's separators write them with the
// comma before them and the colon after (`, "type": `), in specKeyWords'
// layout, and their lengths (at most 16: `, "timestamp": ` is 15).
var specPyWords, specPyLens = func() (w [4][4]uint64, n [4]int) {
	for k, q := range [...]string{`, "type": `, `, "timestamp": `, `, "agent": `, `, "data": `} {
		w[k], n[k] = keyWords(q), len(q)
	}
	return w, n
}()

// The py constants hold specPyWords as constants, per key its first word (all of
// it the key's), second word, the second's mask and the length
// (TestSpecPyConstants checks them against specPyWords): specKeyPy
// compares with them inline, without specKey's call and loads.
const (
	pyType0, pyType1, pyTypeM, pyTypeN                     = 0x226570797422202c, 0x203a, 0xffff, 10
	pyTimestamp0, pyTimestamp1, pyTimestampM, pyTimestampN = 0x73656d697422202c, 0x203a22706d6174, 0xffffffffffffff, 15
	pyAgent0, pyAgent1, pyAgentM, pyAgentN                 = 0x746e65676122202c, 0x203a22, 0xffffff, 11
	pyData0, pyData1, pyDataM, pyDataN                     = 0x226174616422202c, 0x203a, 0xffff, 10
)

// pyKey returns where the value after the key at b[i] starts when the
// key comes as Python's separators write it (w0, w1 masked by m, n
// bytes: the py constants) and no more white space follows it; -1
// otherwise, for specKey to decide. Small enough to be inlined, which
// saves specKey's call and loads on every member of a spec-ordered
// event (specEvent calls specKey when it says -1).
func pyKey(b []byte, i int, w0, w1, m uint64, n int) int {
	if i+16 <= len(b) {
		if w := b[i : i+16]; binary.LittleEndian.Uint64(w) == w0 && binary.LittleEndian.Uint64(w[8:])&m == w1 && w[n] > ' ' {
			return i + n
		}
	}
	return -1
}

// specKey moves past the comma before a member, its key k (quoted, as
// it must be written) and the colon after it, with white space anywhere
// between them, to its value.
func (p *fastParser) specKey(k int) bool {
	b := p.b
	if i := p.i; i+16 <= len(b) {
		// `, "type": ` and the like, as Python's separators write them,
		// in two words.
		w := &specPyWords[k]
		if binary.LittleEndian.Uint64(b[i:])&w[1] == w[0] && binary.LittleEndian.Uint64(b[i+8:])&w[3] == w[2] {
			p.i = skipAt(b, i+specPyLens[k])
			return true
		}
	}
	i := skipAt(b, p.i)
	if i >= len(b) || b[i] != ',' {
		return false
	}
	i = skipAt(b, i+1)
	w := &specKeyWords[k]
	if i+16 > len(b) || binary.LittleEndian.Uint64(b[i:])&w[1] != w[0] || binary.LittleEndian.Uint64(b[i+8:])&w[3] != w[2] {
		return false
	}
	if i = skipAt(b, i+specKeyLens[k]); i >= len(b) || b[i] != ':' {
		return false
	}
	p.i = skipAt(b, i+1)
	return true
}

// flatSkip returns where the value at b[i] ends when it is a flat object
// (a tokens object: keys and string values of ASCII without escapes,
// values whole numbers without sign) or an array of them (a verdict's
// reasons), with white space anywhere JSON allows it: valid JSON, so its
// end is the one skipValue finds. False for anything else, which
// canonSkip reads on its own (it looks no further than the first member
// that is not flat).
func flatSkip(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '[' {
		return flatObject(b, i)
	}
	if i = skipWS(b, i+1); i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		j, ok := flatObject(b, i)
		if !ok {
			return 0, false
		}
		if i = skipWS(b, j); i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = skipWS(b, i+1)
		default:
			return 0, false
		}
	}
}

// flatObject is flatSkip for an object.
func flatObject(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	if i = skipWS(b, i+1); i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		j, ok := asciiEnd(b, i+1)
		if !ok {
			return 0, false
		}
		if i = skipWS(b, j+1); i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i = skipWS(b, i+1); i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			if j, ok = asciiEnd(b, i+1); !ok {
				return 0, false
			}
			i = j + 1
		case c >= '1' && c <= '9':
			i++
			for i < len(b) && b[i]-'0' <= 9 {
				i++
			}
		case c == '0':
			i++
		default:
			return 0, false
		}
		// A number followed by a fraction, an exponent or more digits
		// after a 0 stops here: no comma or brace after it.
		if i = skipWS(b, i); i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// asciiEnd returns where the string whose bytes start at b[i] ends (its
// closing quote) when they are ASCII from 0x20 on without a backslash;
// false for anything else.
func asciiEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	e := i + specialIndex(b[i:])
	if e == len(b) {
		return 0, false
	}
	return e, b[e] == '"'
}

// skipData moves past the data object at p.i, checked as member checks an
// object it keeps as its JSON (canonSkip, else skipValue: what the
// decoding of the data accepts, each value read by the same checks), and
// marks the event's data as not decoded (StreamOptions.Data). shape,
// when set, is the event's type's: its guesses of the strings.
func (p *fastParser) skipData(e *Event, shape *dataShape) bool {
	if end, ok := p.dataSkip(p.i, shape); ok {
		p.i = end
	} else if end, ok := p.canonSkip(p.i); ok {
		p.i = end
	} else if !p.skipValue() {
		return false
	}
	e.skipped = true
	return true
}

// dataSkip returns where the data object at b[i] ends, checked member by
// member with the cheapest check that decides each: a string that is the
// guess of shape (its type's: the string at that place in the last event
// whose data it checked, when plain ASCII of up to shapeMax bytes; nil
// for none), a string of plain ASCII (asciiEnd) or else skipString, a
// whole number of up to 15 digits
// in place or else scanNumber, an object or array by canonSkip, a literal;
// so it accepts exactly what skipValue accepts. False for anything it
// does not decide, which canonSkip and skipValue decide.
func (p *fastParser) dataSkip(i int, shape *dataShape) (int, bool) {
	b := p.b
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	if i = skipAt(b, i+1); i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	member := 0 // the member's place, for shape's guesses
	for {
		// The key: the guess of the type's last event's key at this
		// place, when it is there (its bytes, plain ASCII, and a quote),
		// else found.
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		var kg, vg *strGuess
		if shape != nil && member < shapeMembers {
			kg, vg = &shape.skipKeys[member], &shape.skipVals[member]
		}
		member++
		if kg != nil && kg.at(b, i) {
			i += kg.n + 2
			kg.misses = 0
		} else if j, ok := asciiEnd(b, i+1); ok {
			if kg != nil {
				kg.missPlain(b, i, j)
			}
			i = j + 1
		} else if i, ok = p.skipString(i); !ok {
			return 0, false
		}
		if i = skipAt(b, i); i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i = skipAt(b, i+1); i >= len(b) {
			return 0, false
		}
		// The value.
		switch c := b[i]; {
		case c == '"':
			if vg != nil && vg.at(b, i) {
				i += vg.n + 2
				vg.misses = 0
			} else if j, ok := asciiEnd(b, i+1); ok {
				if vg != nil {
					vg.missPlain(b, i, j)
				}
				i = j + 1
			} else if i, ok = p.skipString(i); !ok {
				return 0, false
			}
		case c >= '1' && c <= '9':
			j := i + 1
			for j < len(b) && j-i < 16 && b[j]-'0' <= 9 {
				j++
			}
			if j < len(b) && j-i < 16 && (b[j] == ',' || b[j] == '}' || b[j] == ' ') {
				i = j
				break
			}
			_, _, next, ok := scanNumber(b, i)
			if !ok {
				return 0, false
			}
			i = next
		case c == '-' || c == '0':
			_, _, next, ok := scanNumber(b, i)
			if !ok {
				return 0, false
			}
			i = next
		case c == '{' || c == '[':
			j, ok := p.canonSkip(i)
			if !ok {
				return 0, false
			}
			i = j
		case c == 't' && i+4 <= len(b) && string(b[i:i+4]) == "true":
			i += 4
		case c == 'f' && i+5 <= len(b) && string(b[i:i+5]) == "false":
			i += 5
		case c == 'n' && i+4 <= len(b) && string(b[i:i+4]) == "null":
			i += 4
		default:
			return 0, false
		}
		if i = skipAt(b, i); i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipAt(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// peekSlot is the slot of topTab that holds the type of the canonical
// event in p.b, read from its end (`,"type":"T"}`, after the data); nil
// when it is not there or not in the table. Only a guess, for choosing
// whether to decode the data (the event's type, read where it lies, must
// equal it) and the shape canonData guesses from (any would do).
func (p *fastParser) peekSlot() *rawSlot {
	b := p.b
	n := len(b)
	if n < 12 || b[n-1] != '}' || b[n-2] != '"' {
		return nil
	}
	q := bytes.LastIndexByte(b[max(0, n-3-rawMax):n-2], '"')
	if q < 0 {
		return nil
	}
	q += max(0, n-3-rawMax)
	if q < 8 || binary.LittleEndian.Uint64(b[q-8:]) != canonType {
		return nil
	}
	k := lastQuoted(b, q)
	return p.topTab.lookup(&k)
}
