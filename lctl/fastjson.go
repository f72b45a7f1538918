package lctl

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// A fast reader for events as XCT and other writers store them. It turns
// one event's JSON into an Event in one pass, with exactly the values
// encoding/json would give (float64 numbers parsed by strconv, maps, []any,
// strings), and gives up (errUnsure) on anything where it would have to
// reproduce a subtle rule of encoding/json or of decodeFileEvent: invalid
// UTF-8, surrogate escapes, a seq that is not a plain integer, a key the
// spec's event does not have, a key given twice, null where a value is
// expected. The caller then decodes that event the careful way, so the
// result is always the same as decodeFileEvent's.

// smallNumbers are the integers events are full of (steps, durations,
// token counts, indexes) as ready-made values: a float64 in an any costs an
// allocation each time otherwise. Values are never changed in place, so
// sharing them is safe.
var smallNumbers = func() (l [4096]any) {
	for i := range l {
		l[i] = float64(i)
	}
	return l
}()

// cachedValue is a boxed string value and its text.
type cachedValue struct {
	s string
	v any
}

// MaxJSONDepth is how deeply objects and arrays may nest in a value the
// fast reader reads: encoding/json's own limit, so a deeper one is given
// up (errUnsure) and refused the careful way ("exceeded max depth"). The
// reader recursed once per level: a file of a few million brackets took
// lctl past Go's stack limit, a fatal error (`lctl replay` of a crafted
// chain file).
const MaxJSONDepth = 10000

// errUnsure says the fast reader did not decide: decode the careful way.
var errUnsure = errors.New("lctl: not decided by the fast reader")

// fastParser reads JSON values from b.
type fastParser struct {
	b []byte
	i int
	// depth is how many objects and arrays enclose the value being read
	// (value, skipValue): at most MaxJSONDepth.
	depth int
	// lineBytes is the bytes per rendered line of the last batch (Stream's
	// Line), to size the next batch's lines.
	lineBytes int
	// lineEnds is where each of a batch's lines ends, reused batch to batch.
	lineEnds []int
	// arenaFull counts the bytes of the batch's arenas that were full and
	// replaced; arenaBytes is the arena bytes per event of the last batch,
	// to size the next one's arena.
	arenaFull, arenaBytes int
	// keys interns object keys: the same few names repeat in every event.
	keys map[string]string
	// values holds short string values, boxed (strValue).
	values map[string]any
	// keyCache and valueCache sit in front of keys and values: most
	// lookups hit them without hashing.
	keyCache   [cacheSlots]string
	valueCache [cacheSlots]cachedValue
	// skipHashes leaves hash and prev_hash out of the events (checked, not
	// kept): only verify needs them.
	skipHashes bool
	// hashFrom and hashTo are where the last event's top-level hash member
	// lies in it, from the comma before it (-1: not found that way).
	hashFrom, hashTo int
	// fields decodes the data's members into slab (Event.fields) instead
	// of a map per event.
	fields bool
	slab   []dataField
	// dataFor, when set (StreamOptions.Data, with fields), says which
	// types' data to decode; any other event's data is only checked
	// (skipData).
	dataFor func(typ string) bool
	// unreadFor (StreamOptions.Unread) names a type's members that are
	// checked, not kept; unreadKey and unreadKey2 are the event's (set
	// before canonData: "" for none; unreadKey2 is unreadKey when one
	// is named), and unreadMade says canonData left one unread.
	unreadFor             func(typ string) string
	unreadKey, unreadKey2 string
	unreadMade            bool
	// lastNum is the last integer past smallNumbers read, lastBox it in
	// an any.
	lastNum float64
	lastBox any
	// prevEventHash is the hash of the event this parser read last.
	prevEventHash string
	// times parses timestamps, reading only the fraction when the second
	// is the last one's.
	times secondCache
	// arena, when set (a stream's batch), holds the batch's timestamps
	// and the JSON of the objects and arrays in its events' data (one
	// allocation for them all, not one each); rawStart is where the
	// event being read starts in it.
	arena    []byte
	rawStart int
	// alias says p.b lies in a mapping of the file that is never unmapped
	// (StreamOptions.Map): the strings and composite values the arena
	// would hold are taken over p.b's bytes instead, which are never
	// written; rawStart is then where the event's data starts in p.b,
	// and rawKept says a value of it was kept that way.
	alias, rawKept bool
	// copySmall (with alias) keeps a small object or array (a step's
	// tokens, a verdict's reasons) in the arena after all, with the
	// rest of its event's raw bytes (rawCopy: when nothing of the event
	// was kept over the mapping before it): the goroutine that applies
	// the events reads them there, beside what the decoding core wrote
	// for the batch, not in the mapping, whose pages that core's first
	// touch made cost it ~5% of stats' cycles (the page's translation,
	// the line brought over). Not for a stream that renders its lines
	// on the decoding cores (StreamOptions.Line), which read them there.
	copySmall, rawCopy bool
	// pairAt is where in the slab canonData's event's member tokens
	// lies, when member read it as a token pair (pairIn, pairOut); -1
	// none.
	pairAt          int
	pairIn, pairOut int64
	// stamp is where in the arena the last timestamp read by
	// stampOfSecond lies, stampTime its time: the stream takes it for an
	// event whose Timestamp is those bytes instead of parsing it again.
	stamp     *byte
	stampTime time.Time
	// sha is computedHash's digest, reused.
	sha hash.Hash
	// keyTab, valTab and topTab hold strings read before (rawTable): the
	// data's keys, its short string values, and the event's agent, chain
	// id and type.
	keyTab, valTab, topTab rawTable
	// firstType guesses the type of an event read by specEvent when the
	// one before has no shape; lastShape is that one's.
	firstType strGuess
	lastShape *dataShape
	// skipTab holds strings checked inside objects and arrays that are
	// kept as their JSON (its slots' values are not used).
	skipTab rawTable
	// generalData makes loopEvent read the data and the event's strings
	// without the tables (dataFields, strIntern, skipValue): the reference
	// the tests compare the tables' reads with.
	generalData bool
}

func newFastParser() *fastParser {
	return &fastParser{keys: make(map[string]string, 128), values: make(map[string]any, 128)}
}

// fastParsers keeps parsers (and the names they interned) for DecodeEvent.
var fastParsers = keep{pool: sync.Pool{New: func() any { return newFastParser() }}, spare: spares(8)}

func (p *fastParser) ws() {
	// Canonical JSON has no white space: one look.
	if p.i < len(p.b) && p.b[p.i] > ' ' {
		return
	}
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\n', '\r', '\t':
			p.i++
		default:
			return
		}
	}
}

// fastEvent decodes one event of a file, or returns errUnsure.
func (p *fastParser) fastEvent(raw []byte) (Event, error) {
	var e Event
	err := p.fastEventInto(&e, raw)
	return e, err
}

// fastEventInto is fastEvent decoding into *e, which must be zero.
func (p *fastParser) fastEventInto(e *Event, raw []byte) error {
	p.b, p.i = raw, 0
	slab := len(p.slab)
	if p.canonicalEvent(e) {
		return nil
	}
	if len(p.b) < 3 || p.b[0] != '{' || p.b[1] != '"' || p.b[2] != 'a' {
		// Not XCT's canonical JSON (whose first key is agent): maybe the
		// spec's order.
		*e = Event{}
		p.slab = p.slab[:slab]
		if p.specEvent(e) {
			return nil
		}
	}
	// Not laid out as canonical JSON or the spec's order (or not decided
	// that way): the general reader, from the start, on a clean event.
	*e = Event{}
	p.slab = p.slab[:slab]
	return p.loopEvent(e)
}

// loopEvent is fastEventInto's general reader: members in any order,
// white space anywhere.
func (p *fastParser) loopEvent(e *Event) error {
	p.i = 0
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return errUnsure
	}
	p.i++
	var seen uint16
	first := true
	p.hashFrom, p.hashTo = -1, -1
	for {
		// White space is skipped where what comes next is not what
		// canonical JSON puts there (one look, not two, per member).
		if p.i >= len(p.b) || p.b[p.i] <= ' ' {
			p.ws()
			if p.i >= len(p.b) {
				return errUnsure
			}
		}
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		member := p.i // the comma before the member (the brace's next byte for the first)
		if !first {
			if p.b[p.i] != ',' {
				return errUnsure
			}
			p.i++
			p.ws()
		}
		first = false
		bit := p.topKey()
		if bit == 0 {
			return errUnsure
		}
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return errUnsure
			}
		}
		p.i++
		p.ws()
		var dst *string
		switch bit {
		case 1:
			n, ok := p.plainUint()
			if !ok {
				return errUnsure
			}
			e.Seq = n
		case 2:
			dst = &e.Type
		case 4:
			dst = &e.Timestamp
		case 8:
			dst = &e.Agent
		case 16:
			dst = &e.ChainID
		case 32:
			dst = &e.PrevHash
		case 64:
			dst = &e.Hash
		case 128:
			if p.i >= len(p.b) || p.b[p.i] != '{' {
				return errUnsure
			}
			if p.fields {
				// Through the tables (canonData) whatever the layout: the
				// spec's key order and Python's white space come here.
				at, slab := p.i, len(p.slab)
				p.unreadKey, p.unreadKey2 = "", ""
				if p.generalData || !p.canonData(e, nil) {
					p.i, p.slab = at, p.slab[:slab]
					if !p.dataFields(e) {
						return errUnsure
					}
				}
				break
			}
			v, ok := p.value()
			if !ok {
				return errUnsure
			}
			e.Data = v.(map[string]any)
		default:
			return errUnsure
		}
		if seen&bit != 0 {
			return errUnsure
		}
		seen |= bit
		if dst != nil && p.skipHashes && bit&(32|64) != 0 {
			// Checked as the full read would, not kept.
			if !p.skipHash() {
				if _, ok := p.strKeep(false, false); !ok {
					return errUnsure
				}
			}
			dst = nil
		}
		if dst != nil && bit == 32 && p.prevEventHash != "" {
			// An event's prev_hash is the event before's hash: the same
			// string, not a copy, when this parser read that event.
			start := p.i
			if raw, ok := p.rawString(); ok && string(raw) == p.prevEventHash {
				*dst, dst = p.prevEventHash, nil
			} else {
				p.i = start
			}
		}
		if dst != nil && bit&(4|64) != 0 && p.arena != nil {
			// The timestamp, and the hash when kept (verify): in the
			// batch's arena, not an allocation each.
			if s, ok := p.arenaString(); ok {
				*dst, dst = s, nil
			}
		}
		if dst != nil && bit&(2|8|16) != 0 && !p.generalData {
			// The type, the agent, the chain id: from a table of the
			// ones read before, as canonicalEvent reads them.
			s, ok := p.tableString(&p.topTab, false)
			if !ok {
				return errUnsure
			}
			*dst, dst = s, nil
		}
		if dst != nil {
			// Timestamps and hashes differ in every event: not interned.
			s, ok := p.strIntern(bit&(4|32|64) == 0)
			if !ok {
				return errUnsure
			}
			*dst = s
		}
		if bit == 64 && p.b[member] == ',' {
			p.hashFrom, p.hashTo = member, p.i
		}
	}
	p.ws()
	if p.i != len(p.b) || seen&1 == 0 || e.Type == "" {
		return errUnsure
	}
	p.prevEventHash = e.Hash // compared byte for byte: never wrong, only unused
	return nil
}

// arenaString reads a string of plain ASCII into p.arena and returns it
// (a string over the arena's bytes, which are never written again);
// false, having read nothing, for any other string.
func (p *fastParser) arenaString() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	if p.alias {
		// The same strings, over the mapping's bytes.
		raw, ok := p.rawString()
		if !ok {
			return "", false
		}
		return aliasString(raw), true
	}
	start := p.i + 1
	if start+32 <= len(p.b) && len(p.arena)+32 <= cap(p.arena) {
		// A string of up to 31 bytes (a timestamp) with its quote in the
		// next four words, which are copied into the arena's room as
		// words and the arena cut after the string.
		b := p.b[start : start+32]
		w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		w2, w3 := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
		e := -1
		switch {
		case special(w0) != 0:
			e = bits.TrailingZeros64(special(w0)) >> 3
		case special(w1) != 0:
			e = 8 + bits.TrailingZeros64(special(w1))>>3
		case special(w2) != 0:
			e = 16 + bits.TrailingZeros64(special(w2))>>3
		case special(w3) != 0:
			e = 24 + bits.TrailingZeros64(special(w3))>>3
		}
		if e >= 0 {
			if b[e] != '"' {
				return "", false
			}
			if e == 0 {
				p.i = start + 1
				return "", true
			}
			at := len(p.arena)
			room := p.arena[at : at+32]
			binary.LittleEndian.PutUint64(room, w0)
			binary.LittleEndian.PutUint64(room[8:], w1)
			binary.LittleEndian.PutUint64(room[16:], w2)
			binary.LittleEndian.PutUint64(room[24:], w3)
			p.arena = p.arena[:at+e]
			p.i = start + e + 1
			// Bytes past the arena's length are its room, written here
			// before they are appended; once appended, never again.
			return unsafe.String(&p.arena[at], e), true //nolint:gosec // immutable bytes, see above
		}
	}
	for k := start; k+8 <= len(p.b); k += 8 {
		m := special(binary.LittleEndian.Uint64(p.b[k:]))
		if m == 0 {
			continue
		}
		e := k + bits.TrailingZeros64(m)>>3
		if p.b[e] != '"' {
			return "", false
		}
		if e == start {
			p.i = e + 1
			return "", true
		}
		if len(p.arena)+(e-start) > cap(p.arena) {
			p.arenaFull += len(p.arena)
			p.arena = make([]byte, 0, max(cap(p.arena), 4*(e-start)))
		}
		at := len(p.arena)
		p.arena = append(p.arena, p.b[start:e]...)
		p.i = e + 1
		// The arena's bytes are never written again once appended (a
		// full arena is replaced, not reused), so the string cannot change.
		return unsafe.String(&p.arena[at], e-start), true //nolint:gosec // immutable bytes, see above
	}
	return "", false
}

// aliasString is the string over b's bytes, which are never written
// (a mapping's, see fastParser.alias).
func aliasString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b)) //nolint:gosec // immutable bytes, see above
}

// skipHash moves past a string of 64 plain ASCII characters (a hash as
// events carry it) and reports whether there was one: eight words
// checked at once, where reading it as a string looks for its end first.
func (p *fastParser) skipHash() bool {
	b := p.b[p.i:]
	if len(b) < 66 || b[0] != '"' || b[65] != '"' {
		return false
	}
	b = b[:66]
	if hexLike(b[1:65]) {
		p.i += 66
		return true
	}
	m := special(binary.LittleEndian.Uint64(b[1:])) | special(binary.LittleEndian.Uint64(b[9:])) |
		special(binary.LittleEndian.Uint64(b[17:])) | special(binary.LittleEndian.Uint64(b[25:])) |
		special(binary.LittleEndian.Uint64(b[33:])) | special(binary.LittleEndian.Uint64(b[41:])) |
		special(binary.LittleEndian.Uint64(b[49:])) | special(binary.LittleEndian.Uint64(b[57:]))
	if m != 0 {
		return false
	}
	p.i += 66
	return true
}

// hexLike reports whether each of the 64 bytes of b is in 0x30-0x3f or
// 0x60-0x7f (bit 5 set, bit 4 or 6 set, bit 7 clear), as the digits of a
// hash in hex are: bytes a string may hold as they are (none is a quote,
// a backslash, a control character or past ASCII). Three words of bits
// over the eight words, where special looks at each word on its own;
// false says only that skipHash must look closer.
func hexLike(b []byte) bool {
	b = b[:64]
	x0, x1, x2, x3 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]),
		binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
	x4, x5, x6, x7 := binary.LittleEndian.Uint64(b[32:]), binary.LittleEndian.Uint64(b[40:]),
		binary.LittleEndian.Uint64(b[48:]), binary.LittleEndian.Uint64(b[56:])
	all := x0 & x1 & x2 & x3 & x4 & x5 & x6 & x7
	any := x0 | x1 | x2 | x3 | x4 | x5 | x6 | x7
	// Bit 4 of each byte moved to bit 6.
	four := (x0 | x0<<2) & (x1 | x1<<2) & (x2 | x2<<2) & (x3 | x3<<2) & (x4 | x4<<2) & (x5 | x5<<2) & (x6 | x6<<2) & (x7 | x7<<2)
	return all&(ones*0x20) == ones*0x20 && four&(ones*0x40) == ones*0x40 && any&highs == 0
}

// Top-level keys as topKey reports them: the bits of fastEventInto's
// seen.
var topKeys = [...]struct {
	quoted string
	bit    uint16
}{
	{`"seq"`, 1}, {`"type"`, 2}, {`"timestamp"`, 4}, {`"agent"`, 8},
	{`"chain_id"`, 16}, {`"prev_hash"`, 32}, {`"hash"`, 64}, {`"data"`, 128},
}

// topKeyWords are topKeys' quoted keys as two little-endian words, with
// the masks that keep only their bytes (every one is at most 16 bytes).
var topKeyWords = func() (w [len(topKeys)][4]uint64) {
	for k, t := range topKeys {
		w[k] = keyWords(t.quoted)
	}
	return w
}()

// keyWords is s (at most 16 bytes) as two little-endian words, each
// followed by the mask that keeps only s's bytes of it: the layout the
// key matchers compare eight bytes at a time.
func keyWords(s string) (w [4]uint64) {
	var b [16]byte
	copy(b[:], s)
	for i := range s {
		w[2*(i/8)+1] |= 0xff << (8 * (i % 8))
	}
	w[0] = binary.LittleEndian.Uint64(b[:8]) & w[1]
	w[2] = binary.LittleEndian.Uint64(b[8:]) & w[3]
	return w
}

// topKey reads an event's top-level key and returns its bit (topKeys), 0
// for another key or one that is not a plain string. The keys are matched
// as bytes, quotes included, without reading them as strings first: as
// two masked words when 16 bytes are there to read.
func (p *fastParser) topKey() uint16 {
	b := p.b[p.i:]
	if len(b) < 3 {
		return 0
	}
	k := topKeyIndex(b)
	if k < 0 {
		return 0
	}
	if len(b) >= 16 {
		w := &topKeyWords[k]
		if binary.LittleEndian.Uint64(b)&w[1] != w[0] || binary.LittleEndian.Uint64(b[8:])&w[3] != w[2] {
			return 0
		}
		p.i += len(topKeys[k].quoted)
		return topKeys[k].bit
	}
	q := topKeys[k].quoted
	if len(b) >= len(q) && string(b[:len(q)]) == q {
		p.i += len(q)
		return topKeys[k].bit
	}
	return 0
}

// topKeyIndex is the index in topKeys of the one key that the quoted key
// starting b (at least 3 bytes) can be, told by its first letters; -1 for
// none.
func topKeyIndex(b []byte) int {
	switch b[1] {
	case 's':
		return 0
	case 't':
		if b[2] == 'i' {
			return 2
		}
		return 1
	case 'a':
		return 3
	case 'c':
		return 4
	case 'p':
		return 5
	case 'h':
		return 6
	case 'd':
		return 7
	}
	return -1
}

// dataFields reads the data object into p.slab as the event's fields:
// the values value() would put in the map, without the map.
func (p *fastParser) dataFields(e *Event) bool {
	p.rawBegin(p.i)
	p.i++ // {
	start := len(p.slab)
	p.pairAt = -1
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
	} else {
		for {
			p.ws()
			k, ok := p.knownKey()
			if !ok {
				if k, ok = p.key(); !ok {
					return false
				}
			}
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				p.ws()
				if p.i >= len(p.b) || p.b[p.i] != ':' {
					return false
				}
			}
			p.i++
			p.ws()
			if !p.member(k) {
				return false
			}
			if p.i >= len(p.b) || p.b[p.i] <= ' ' {
				p.ws()
				if p.i >= len(p.b) {
					return false
				}
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == '}' {
				p.i++
				break
			}
			return false
		}
	}
	if p.slab == nil {
		p.slab = make([]dataField, 0, 64)
	}
	e.fields = p.slab[start:len(p.slab):len(p.slab)]
	p.rawEnd(e)
	p.keepPair(e, start)
	return true
}

// knownKey reads a data key XCT's and the spec's events use, matched as
// bytes with its quotes (the compiler compares constant-length slices in
// a word or two), and returns it with no interning; ok false, having read
// nothing, for any other key.
func (p *fastParser) knownKey() (string, bool) {
	b := p.b[p.i:]
	if len(b) < 3 || b[0] != '"' {
		return "", false
	}
	switch b[1] {
	case 'a':
		if len(b) >= 25 && string(b[1:25]) == `alternatives_considered"` {
			p.i += 25
			return "alternatives_considered", true
		}
		if len(b) >= 15 && string(b[1:15]) == `agent_profile"` {
			p.i += 15
			return "agent_profile", true
		}
	case 'c':
		if len(b) >= 12 && string(b[1:12]) == `confidence"` {
			p.i += 12
			return "confidence", true
		}
		if len(b) >= 11 && string(b[1:11]) == `consensus"` {
			p.i += 11
			return "consensus", true
		}
		if len(b) >= 10 && string(b[1:10]) == `category"` {
			p.i += 10
			return "category", true
		}
		if len(b) >= 10 && string(b[1:10]) == `contract"` {
			p.i += 10
			return "contract", true
		}
		if len(b) >= 7 && string(b[1:7]) == `chunk"` {
			p.i += 7
			return "chunk", true
		}
		if len(b) >= 6 && string(b[1:6]) == `code"` {
			p.i += 6
			return "code", true
		}
	case 'd':
		if len(b) >= 13 && string(b[1:13]) == `duration_ms"` {
			p.i += 13
			return "duration_ms", true
		}
		if len(b) >= 11 && string(b[1:11]) == `direction"` {
			p.i += 11
			return "direction", true
		}
		if len(b) >= 10 && string(b[1:10]) == `decision"` {
			p.i += 10
			return "decision", true
		}
		if len(b) >= 7 && string(b[1:7]) == `depth"` {
			p.i += 7
			return "depth", true
		}
	case 'f':
		if len(b) >= 16 && string(b[1:16]) == `facts_snapshot"` {
			p.i += 16
			return "facts_snapshot", true
		}
		if len(b) >= 7 && string(b[1:7]) == `facts"` {
			p.i += 7
			return "facts", true
		}
		if len(b) >= 6 && string(b[1:6]) == `from"` {
			p.i += 6
			return "from", true
		}
	case 'g':
		if len(b) >= 6 && string(b[1:6]) == `goal"` {
			p.i += 6
			return "goal", true
		}
	case 'i':
		if len(b) >= 8 && string(b[1:8]) == `intent"` {
			p.i += 8
			return "intent", true
		}
		if len(b) >= 7 && string(b[1:7]) == `index"` {
			p.i += 7
			return "index", true
		}
		if len(b) >= 4 && string(b[1:4]) == `id"` {
			p.i += 4
			return "id", true
		}
	case 'l':
		if len(b) >= 8 && string(b[1:8]) == `labels"` {
			p.i += 8
			return "labels", true
		}
	case 'm':
		if len(b) >= 11 && string(b[1:11]) == `max_steps"` {
			p.i += 11
			return "max_steps", true
		}
		if len(b) >= 9 && string(b[1:9]) == `message"` {
			p.i += 9
			return "message", true
		}
		if len(b) >= 7 && string(b[1:7]) == `model"` {
			p.i += 7
			return "model", true
		}
	case 'o':
		if len(b) >= 9 && string(b[1:9]) == `outcome"` {
			p.i += 9
			return "outcome", true
		}
		if len(b) >= 6 && string(b[1:6]) == `otel"` {
			p.i += 6
			return "otel", true
		}
	case 'p':
		if len(b) >= 11 && string(b[1:11]) == `principal"` {
			p.i += 11
			return "principal", true
		}
	case 'r':
		if len(b) >= 13 && string(b[1:13]) == `recoverable"` {
			p.i += 13
			return "recoverable", true
		}
		if len(b) >= 9 && string(b[1:9]) == `reasons"` {
			p.i += 9
			return "reasons", true
		}
		if len(b) >= 8 && string(b[1:8]) == `reason"` {
			p.i += 8
			return "reason", true
		}
		if len(b) >= 8 && string(b[1:8]) == `run_id"` {
			p.i += 8
			return "run_id", true
		}
	case 's':
		if len(b) >= 19 && string(b[1:19]) == `suggested_queries"` {
			p.i += 19
			return "suggested_queries", true
		}
		if len(b) >= 12 && string(b[1:12]) == `state_hash"` {
			p.i += 12
			return "state_hash", true
		}
		if len(b) >= 9 && string(b[1:9]) == `step_id"` {
			p.i += 9
			return "step_id", true
		}
		if len(b) >= 9 && string(b[1:9]) == `summary"` {
			p.i += 9
			return "summary", true
		}
		if len(b) >= 8 && string(b[1:8]) == `source"` {
			p.i += 8
			return "source", true
		}
		if len(b) >= 8 && string(b[1:8]) == `status"` {
			p.i += 8
			return "status", true
		}
		if len(b) >= 7 && string(b[1:7]) == `steps"` {
			p.i += 7
			return "steps", true
		}
		if len(b) >= 6 && string(b[1:6]) == `step"` {
			p.i += 6
			return "step", true
		}
	case 't':
		if len(b) >= 14 && string(b[1:14]) == `total_chunks"` {
			p.i += 14
			return "total_chunks", true
		}
		if len(b) >= 14 && string(b[1:14]) == `total_tokens"` {
			p.i += 14
			return "total_tokens", true
		}
		if len(b) >= 8 && string(b[1:8]) == `tokens"` {
			p.i += 8
			return "tokens", true
		}
		if len(b) >= 6 && string(b[1:6]) == `tags"` {
			p.i += 6
			return "tags", true
		}
		if len(b) >= 6 && string(b[1:6]) == `text"` {
			p.i += 6
			return "text", true
		}
		if len(b) >= 6 && string(b[1:6]) == `tool"` {
			p.i += 6
			return "tool", true
		}
		if len(b) >= 6 && string(b[1:6]) == `type"` {
			p.i += 6
			return "type", true
		}
		if len(b) >= 4 && string(b[1:4]) == `to"` {
			p.i += 4
			return "to", true
		}
	case 'w':
		if len(b) >= 10 && string(b[1:10]) == `warnings"` {
			p.i += 10
			return "warnings", true
		}
	}
	return "", false
}

// member reads the value of data member k onto p.slab: strings and
// numbers typed (no any, unless the boxed value costs nothing), the other
// kinds as value() reads them.
func (p *fastParser) member(k string) bool {
	if p.i >= len(p.b) {
		return false
	}
	if c := p.b[p.i]; c == '-' || (c >= '0' && c <= '9') {
		f, _, ok := p.numberF()
		if !ok {
			return false
		}
		p.slab = append(p.slab, dataField{key: k, v: numberField, n: f})
		return true
	}
	if c := p.b[p.i]; (c == '{' || c == '[') && p.arena != nil {
		// An object or an array: checked now, kept as its JSON and
		// decoded when asked for (most are never read, and their maps
		// were most of what reading an event allocated).
		start := p.i
		if end, ok := p.canonSkip(start); ok && !p.generalData {
			p.i = end
		} else if !p.skipValue() {
			return false
		}
		if p.alias && p.copySmall && !p.rawKept && !p.rawCopy && p.i-start <= copySmallMax {
			p.rawCopy, p.rawStart = true, len(p.arena)
		}
		if off, ok := p.keepSpan(start, p.i); ok {
			p.slab = append(p.slab, dataField{key: k, v: compositeField, n: rawSpan(off, p.i-start)})
			if k == "tokens" {
				// Read while its bytes are at hand (Event.TokenPair).
				if in, out, ok := (Object{raw: p.b[start:p.i]}).TokenPair(); ok {
					p.pairAt, p.pairIn, p.pairOut = len(p.slab)-1, in, out
				}
			}
			return true
		}
		p.i = start
	}
	var v any
	var ok bool
	if p.b[p.i] == '"' {
		if p.arena != nil {
			start := p.i
			if raw, ok := p.rawString(); ok && len(raw) > internMax && p.keepText(k, raw) {
				return true
			}
			p.i = start
		}
		v, ok = p.strValue() // what value() does for a string, called directly
	} else {
		v, ok = p.value()
	}
	if !ok {
		return false
	}
	p.slab = append(p.slab, dataField{key: k, v: v})
	return true
}

// keepText keeps raw, a long string of plain ASCII just read, in the
// arena as member k's value (textField); false when the event's raw bytes
// would be too many to say where it lies.
func (p *fastParser) keepText(k string, raw []byte) bool {
	n := len(raw)
	if p.arena == nil {
		return false
	}
	// Just read: p.i is past its closing quote.
	off, ok := p.keepSpan(p.i-1-n, p.i-1)
	if !ok {
		return false
	}
	p.slab = append(p.slab, dataField{key: k, v: textField, n: rawSpan(off, n)})
	return true
}

// rawBegin starts the raw bytes of the event's data, whose object starts
// at p.b[i].
func (p *fastParser) rawBegin(i int) {
	p.rawCopy = false
	if p.alias {
		p.rawStart, p.rawKept = i, false
		return
	}
	p.rawStart = len(p.arena)
}

// keepSpan keeps p.b[from:to], a value of the event's data, with its raw
// bytes (in the arena; with alias, where it lies) and returns where it
// lies in them; false when that is too far to say (rawSpan).
func (p *fastParser) keepSpan(from, to int) (int, bool) {
	n := to - from
	if p.alias && !p.rawCopy {
		off := from - p.rawStart
		if n >= maxRawSpan || off >= maxRawSpan {
			return 0, false
		}
		p.rawKept = true
		return off, true
	}
	if n >= maxRawSpan || len(p.arena)-p.rawStart >= maxRawSpan-n {
		return 0, false
	}
	p.keepRaw(p.b[from:to])
	return len(p.arena) - n - p.rawStart, true
}

// copySmallMax is the most bytes of an object or array copySmall keeps
// in the arena.
const copySmallMax = 64

// rawEnd gives e the raw bytes its data's values were kept in: the data
// read up to p.i, with alias.
func (p *fastParser) rawEnd(e *Event) {
	if p.alias && !p.rawCopy {
		if p.rawKept {
			e.raw = p.b[p.rawStart:p.i:p.i]
		}
		return
	}
	if len(p.arena) > p.rawStart {
		e.raw = p.arena[p.rawStart:len(p.arena):len(p.arena)]
	}
}

// keepRaw appends b to the arena, keeping the event's raw bytes (from
// rawStart) in one array.
func (p *fastParser) keepRaw(b []byte) {
	if len(p.arena)+len(b) > cap(p.arena) {
		mine := p.arena[p.rawStart:]
		p.arenaFull += p.rawStart
		grown := make([]byte, 0, max(2*cap(p.arena), 2*(len(mine)+len(b))+4096))
		p.arena = append(grown, mine...)
		p.rawStart = 0
	}
	p.arena = append(p.arena, b...)
}

// plainUint reads a seq written as a plain positive integer.
func (p *fastParser) plainUint() (uint64, bool) {
	start := p.i
	if b := p.b[min(start, len(p.b)):]; len(b) > 16 && b[0] >= '1' && b[0] <= '9' {
		// Up to seven digits (a seq below ten million) in one word: the
		// first byte that is not a digit found from the word's bytes less
		// '0' (below it, it wraps past 0x7f; above '9', adding 0x76 takes
		// it there; the digits before it neither borrow nor carry), the
		// digits combined in three multiplications.
		t := binary.LittleEndian.Uint64(b) - 0x3030303030303030
		if m := (t | (t + 0x7676767676767676)) & 0x8080808080808080; m != 0 {
			n := bits.TrailingZeros64(m) >> 3 // at least 1: b[0] is a digit
			if c := b[n]; c != '.' && c != 'e' && c != 'E' {
				v := t << (64 - 8*n) // the digits, the first most significant
				v = (v & 0x0F0F0F0F0F0F0F0F) * 2561 >> 8
				v = (v & 0x00FF00FF00FF00FF) * 6553601 >> 16
				v = (v & 0x0000FFFF0000FFFF) * 42949672960001 >> 32
				p.i += n
				return v, true
			}
		}
		// Up to 16 digits and the byte after them in bounds: no check of
		// the end at each digit.
		b = b[:17]
		n := uint64(b[0] - '0')
		j := 1
		for ; j < 16 && b[j]-'0' <= 9; j++ {
			n = n*10 + uint64(b[j]-'0')
		}
		if c := b[j]; c-'0' > 9 && c != '.' && c != 'e' && c != 'E' && n <= maxExactInt {
			p.i += j
			return n, true
		}
	}
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
		if p.i-start > 16 {
			return 0, false
		}
	}
	if p.i == start || (p.b[start] == '0') || n > maxExactInt {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}

// rawString reads a string without escapes or bytes past ASCII and returns
// its bytes (still in b); false for anything else.
func (p *fastParser) rawString() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	// Up to the first byte that is a quote, a backslash, a control
	// character or past ASCII: the string ends there if it is the quote.
	k := start + specialIndex(p.b[start:])
	if k == len(p.b) || p.b[k] != '"' {
		return nil, false
	}
	p.i = k + 1
	return p.b[start:k], true
}

// Words of repeated bytes for plainWord.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether none of the eight bytes of x is a quote, a
// backslash, below 0x20 or past ASCII: the bytes a string goes on with.
// (A byte that is one of those sets its high bit in m; a false alarm can
// only follow a true one, and the caller then looks byte by byte.)
func plainWord(x uint64) bool { return special(x) == 0 }

// special returns the high bits of the bytes of x (read little-endian)
// that are a quote, a backslash, below 0x20 or past ASCII, and maybe of
// bytes after the first such one (never before it): its lowest set bit
// is the first such byte's.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	m := (x - ones*0x20) &^ x
	m |= (q - ones) &^ q
	m |= (bs - ones) &^ bs
	return (m | x) & highs
}

// asciiWord reports whether none of the eight bytes of x is below 0x20 or
// past ASCII.
func asciiWord(x uint64) bool {
	return ((x-ones*0x20)&^x|x)&highs == 0
}

// str reads a string value, unescaping it; short ones are interned.
func (p *fastParser) str() (string, bool) { return p.strIntern(true) }

func (p *fastParser) strIntern(intern bool) (string, bool) { return p.strKeep(intern, true) }

// strKeep reads a string value; keep false checks it without making the
// string.
func (p *fastParser) strKeep(intern, keep bool) (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	// Up to the first byte that is not plain ASCII: most strings (names,
	// ids, hashes, times) end there, at their quote.
	k := start + specialIndex(p.b[start:])
	if k < len(p.b) && p.b[k] == '"' {
		p.i = k + 1
		switch {
		case !keep:
			return "", true
		case !intern:
			return string(p.b[start:k]), true
		}
		return p.intern(p.b[start:k]), true
	}
	// The closing quote, found with the vectorized search; a backslash
	// before it means escapes (the slow way, which also handles an escaped
	// quote).
	end := bytes.IndexByte(p.b[k:], '"')
	if end < 0 {
		return "", false
	}
	end += k - start
	s := p.b[start : start+end]
	if bytes.IndexByte(s[k-start:], '\\') >= 0 {
		return p.escaped(start)
	}
	ascii := true
	k -= start
	for k+8 <= len(s) && asciiWord(binary.LittleEndian.Uint64(s[k:])) {
		k += 8
	}
	for _, c := range s[k:] {
		if c < 0x20 {
			return "", false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	p.i = start + end + 1
	if !ascii && !utf8.Valid(s) {
		return "", false
	}
	if !keep {
		return "", true
	}
	if !intern {
		return string(s), true
	}
	return p.intern(s), true
}

// escaped reads a string that has escapes, from its first byte at start.
func (p *fastParser) escaped(start int) (string, bool) {
	out := make([]byte, 0, 64)
	j := start
	for j < len(p.b) {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(p.b) {
			return "", false
		}
		switch p.b[j+1] {
		case '"', '\\', '/':
			out = append(out, p.b[j+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if j+6 > len(p.b) {
				return "", false
			}
			r, err := strconv.ParseUint(string(p.b[j+2:j+6]), 16, 32)
			if err != nil || (r >= 0xD800 && r < 0xE000) {
				return "", false // surrogates: the careful way
			}
			out = utf8.AppendRune(out, rune(r))
			j += 6
			continue
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

// value reads any JSON value as encoding/json would into an any.
func (p *fastParser) value() (any, bool) {
	if p.i >= len(p.b) {
		return nil, false
	}
	if c := p.b[p.i]; c == '{' || c == '[' {
		if p.depth >= MaxJSONDepth {
			return nil, false
		}
		p.depth++
		v, ok := p.container(c)
		p.depth--
		return v, ok
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.strValue()
	case c == 't':
		if p.lit("true") {
			return true, true
		}
	case c == 'f':
		if p.lit("false") {
			return false, true
		}
	case c == 'n':
		if p.lit("null") {
			return nil, true
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, false
}

// container reads the object or array at p.b[p.i] (c is its first byte).
func (p *fastParser) container(c byte) (any, bool) {
	switch c {
	case '{':
		p.i++
		m := make(map[string]any)
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return m, true
		}
		for {
			p.ws()
			k, ok := p.key()
			if !ok {
				return nil, false
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, false
			}
			p.i++
			p.ws()
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			m[k] = v
			p.ws()
			if p.i >= len(p.b) {
				return nil, false
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == '}' {
				p.i++
				return m, true
			}
			return nil, false
		}
	case '[':
		p.i++
		l := make([]any, 0, 4)
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return l, true
		}
		for {
			p.ws()
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			l = append(l, v)
			p.ws()
			if p.i >= len(p.b) {
				return nil, false
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == ']' {
				p.i++
				return l, true
			}
			return nil, false
		}
	}
	return nil, false
}

// skipValue moves past a JSON value, accepting exactly what value
// accepts, without making it.
func (p *fastParser) skipValue() bool {
	if p.i >= len(p.b) {
		return false
	}
	if c := p.b[p.i]; c == '{' || c == '[' {
		if p.depth >= MaxJSONDepth {
			return false
		}
		p.depth++
		ok := p.skipContainer(c)
		p.depth--
		return ok
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.strKeep(false, false)
		return ok
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, _, ok := p.numberF()
		return ok
	}
	return false
}

// skipContainer moves past the object or array at p.b[p.i] (c is its
// first byte), accepting exactly what container accepts.
func (p *fastParser) skipContainer(c byte) bool {
	{
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == end {
			p.i++
			return true
		}
		for {
			p.ws()
			if end == '}' {
				if _, ok := p.strKeep(false, false); !ok {
					return false
				}
				p.ws()
				if p.i >= len(p.b) || p.b[p.i] != ':' {
					return false
				}
				p.i++
				p.ws()
			}
			if !p.skipValue() {
				return false
			}
			p.ws()
			if p.i >= len(p.b) {
				return false
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == end {
				p.i++
				return true
			}
			return false
		}
	}
}

// strValue reads a string value as an any. Short strings without escapes
// come from a table of ready-made values: tools, outcomes, agents and
// decisions repeat in every event, and a string in an any otherwise costs
// two allocations (the bytes and the header).
func (p *fastParser) strValue() (any, bool) {
	if raw, ok := p.rawString(); ok {
		if len(raw) > internMax {
			return string(raw), true
		}
		return p.boxedShort(raw), true
	}
	s, ok := p.strIntern(false)
	return s, ok
}

// boxedShort returns short bytes (at most internMax) as a string in an
// any, the same one for the same bytes.
func (p *fastParser) boxedShort(raw []byte) any {
	k := slot(raw)
	if c := &p.valueCache[k]; c.v != nil && c.s == string(raw) {
		return c.v
	}
	if v, ok := p.values[string(raw)]; ok {
		p.valueCache[k] = cachedValue{v.(string), v}
		return v
	}
	var v any = string(raw)
	if len(p.values) < internTables {
		p.values[v.(string)] = v
	}
	// Cached even when the table is full: a step's id repeats in its
	// next few events.
	p.valueCache[k] = cachedValue{v.(string), v}
	return v
}

// key reads an object key.
func (p *fastParser) key() (string, bool) {
	if raw, ok := p.rawString(); ok {
		return p.intern(raw), true
	}
	return p.str()
}

// internMax bounds the strings interned: names, types, agents, tools,
// outcomes repeat in every event; ids and text mostly do not.
const (
	internMax    = 32
	internTables = 8192
)

// slot picks a cache slot for short bytes: cheaper than hashing them, and
// a hit is checked byte for byte.
func slot(b []byte) int {
	n := len(b)
	if n == 0 {
		return 0
	}
	return (n*131 + int(b[0])*31 + int(b[n-1])*7 + int(b[n/2])) & (cacheSlots - 1)
}

// cacheSlots is the size of the parser's direct-mapped caches.
const cacheSlots = 512

// intern returns b as a string, the same string for the same short bytes:
// the few names every event repeats cost no allocation.
func (p *fastParser) intern(b []byte) string {
	if len(b) > internMax {
		return string(b)
	}
	k := slot(b)
	if c := p.keyCache[k]; c == string(b) && (len(b) > 0 || c == "") {
		return c
	}
	if s, ok := p.keys[string(b)]; ok {
		p.keyCache[k] = s
		return s
	}
	s := string(b)
	if len(p.keys) < internTables {
		p.keys[s] = s
	}
	return s
}

func (p *fastParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// number reads a number with JSON's grammar and parses it as encoding/json
// does (strconv.ParseFloat, 64 bits).
func (p *fastParser) number() (any, bool) {
	f, small, ok := p.numberF()
	if !ok {
		return nil, false
	}
	if small {
		return smallNumbers[int(f)], true
	}
	if f == math.Trunc(f) && f > 0 && f < 1<<53 {
		// A step number repeats in the step's next few events.
		if p.lastBox != nil && p.lastNum == f {
			return p.lastBox, true
		}
		p.lastNum, p.lastBox = f, f
		return p.lastBox, true
	}
	return f, true
}

// numberF reads a number as number does, as a float64; small reports a
// whole number below len(smallNumbers).
func (p *fastParser) numberF() (float64, bool, bool) {
	f, small, next, ok := scanNumber(p.b, p.i)
	if ok {
		p.i = next
	}
	return f, small, ok
}

// scanNumber is numberF on b from i; next is where the number ends.
func scanNumber(b []byte, i int) (float64, bool, int, bool) {
	start := i
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	if j >= len(b) {
		return 0, false, 0, false
	}
	small, simple := 0.0, true
	digits := j
	switch {
	case b[j] == '0':
		j++
	case b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			small = small*10 + float64(b[j]-'0')
			j++
		}
	default:
		return 0, false, 0, false
	}
	whole, frac := j-digits, 0
	if j < len(b) && b[j] == '.' {
		simple = false
		j++
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return 0, false, 0, false
		}
		frac = j - d
	}
	exp := false
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		simple, exp = false, true
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		d := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == d {
			return 0, false, 0, false
		}
	}
	// Integers of up to 15 digits are exact in a float64: no need to ask
	// strconv.
	if simple && j-start <= 15 {
		if b[start] == '-' {
			return -small, false, j, true
		}
		return small, small < float64(len(smallNumbers)), j, true
	}
	// A fraction of up to 15 digits in all and no exponent is m / 10^k with
	// both exact in a float64 (m < 2^52, k <= 22): one division, rounded
	// once, is the correctly rounded value, which strconv gives too (its
	// own exact path is this division).
	if frac > 0 && !exp && whole+frac <= 15 {
		m := uint64(0)
		for _, c := range b[digits : digits+whole] {
			m = m*10 + uint64(c-'0')
		}
		for _, c := range b[digits+whole+1 : digits+whole+1+frac] {
			m = m*10 + uint64(c-'0')
		}
		f := float64(m) / pow10[frac]
		if b[start] == '-' {
			f = -f
		}
		return f, false, j, true
	}
	v, err := strconv.ParseFloat(string(b[start:j]), 64)
	if err != nil {
		return 0, false, 0, false
	}
	return v, false, j, true
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
	1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// computedHash returns the hash of the content of the event just read
// (what ComputeHash returns), taking a shortcut when the event's bytes are
// its canonical JSON, as XCT stores and writes events: the SHA-256 of the
// bytes without the hash member is then the hash. If the shortcut does not
// give the event's own hash, the bytes were not canonical (or the event
// was changed), and the hash is computed the full way, which decides. The
// shortcut cannot accept wrongly: equal SHA-256 means these bytes are what
// was hashed when the event was sealed, and canonical JSON decodes to the
// values it encodes.
func (p *fastParser) computedHash(e *Event) (string, error) {
	if p.hashFrom > 0 && e.Hash != "" && len(e.Hash) == 64 && p.b[0] == '{' {
		if p.sha == nil {
			p.sha = sha256.New()
		}
		h := p.sha
		h.Reset()
		h.Write(p.b[:p.hashFrom])
		h.Write(p.b[p.hashTo:])
		var sum [sha256.Size]byte
		var text [2 * sha256.Size]byte
		hex.Encode(text[:], h.Sum(sum[:0]))
		if string(text[:]) == e.Hash {
			return e.Hash, nil
		}
	}
	return e.ComputeHash()
}

// The members of an event as canonical JSON lays them out (keys sorted,
// no white space), each with the separator before it, as little-endian
// words for canonicalEvent.
var (
	canonAgent    = wordOf(`{"agent"`)
	canonChainID  = wordOf(`,"chain_`)
	canonChainID2 = wordOf(`id":____`) & 0xffffffff
	canonData     = wordOf(`,"data":`)
	canonHash     = wordOf(`,"hash":`)
	canonPrev     = wordOf(`,"prev_h`)
	canonPrev2    = wordOf(`ash":___`) & 0xffffffffff
	canonSeq      = wordOf(`,"seq":_`) & 0xffffffffffffff
	canonTime     = wordOf(`,"timest`)
	canonTime2    = wordOf(`amp":___`) & 0xffffffffff
	canonType     = wordOf(`,"type":`)
)

// wordOf returns the first eight bytes of s as a little-endian word.
func wordOf(s string) uint64 { return binary.LittleEndian.Uint64([]byte(s)[:8]) }

// timestampString reads an event's timestamp, a string value: into the
// arena when there is one and the string is plain ASCII (arenaString), else
// interned.
func (p *fastParser) timestampString() (string, bool) {
	if p.arena != nil {
		if s, ok := p.stampOfSecond(); ok {
			return s, true
		}
		if s, ok := p.arenaString(); ok {
			return s, true
		}
	}
	return p.strIntern(false)
}

// canonicalEvent reads an event whose members are laid out as canonical
// JSON lays them out (what XCT writes: agent, chain_id, data, hash and
// prev_hash when there are, seq, timestamp, type; no white space), in
// one straight pass that expects each key where it must be, with exactly
// the values the general loop of fastEventInto gives. false, for anything
// else, leaves the event to that loop (the caller resets what this
// changed).
func (p *fastParser) canonicalEvent(e *Event) bool {
	b := p.b
	// Each fixed read below checks its bounds; none so short is such an
	// event.
	if len(b) < 96 || binary.LittleEndian.Uint64(b) != canonAgent || b[8] != ':' {
		return false
	}
	p.hashFrom, p.hashTo = -1, -1
	p.i = 9
	s, ok := p.tableString(&p.topTab, false)
	if !ok {
		return false
	}
	e.Agent = s
	if !p.expect13(canonChainID, canonChainID2, 0xffffffff, 12) {
		return false
	}
	if s, ok = p.tableString(&p.topTab, false); !ok {
		return false
	}
	e.ChainID = s
	if !p.expect8(canonData, 8) || p.i >= len(b) || b[p.i] != '{' {
		return false
	}
	skipped := ""
	if p.fields {
		// The type, peeked from the event's end: whether its data is
		// read, and the shape whose guesses canonData tries (any shape
		// would do: a guess is taken only where the bytes are its).
		peeked := ""
		var shape *dataShape
		ts := p.peekSlot()
		if ts != nil {
			if ts.shape == nil {
				ts.shape = new(dataShape)
			}
			shape = ts.shape
		}
		if ts != nil && p.unreadFor != nil {
			peeked = ts.s // for unreadOf, with Line too
		}
		if p.dataFor != nil {
			if ts != nil {
				t := ts.s
				peeked = t
				if !p.wantsData(t, shape) {
					if !p.skipData(e, shape) {
						return false
					}
					skipped = t
				}
			}
		}
		if skipped == "" {
			p.unreadKey, p.unreadKey2 = "", ""
			if peeked != "" {
				p.unreadKey, p.unreadKey2 = p.unreadOf(peeked, shape)
			}
			if !p.canonData(e, shape) {
				return false
			}
			if p.unreadMade {
				// Left unread as the peeked type's: the type must be it.
				skipped = peeked
			}
		}
	} else {
		v, ok := p.value()
		if !ok {
			return false
		}
		e.Data = v.(map[string]any)
	}
	// An unsealed event (what other writers and the spec's examples
	// carry) has neither hash nor prev_hash: both are optional here, as
	// in the general loop.
	if member := p.i; p.expect8(canonHash, 8) {
		if !p.canonHashValue(&e.Hash, false) {
			return false
		}
		p.hashFrom, p.hashTo = member, p.i
	}
	if p.expect13(canonPrev, canonPrev2, 0xffffffffff, 13) {
		if !p.canonHashValue(&e.PrevHash, true) {
			return false
		}
	}
	if !p.expect8m(canonSeq, 0xffffffffffffff, 7) {
		return false
	}
	n, ok := p.plainUint()
	if !ok {
		return false
	}
	e.Seq = n
	if !p.expect13(canonTime, canonTime2, 0xffffffffff, 13) {
		return false
	}
	if e.Timestamp, ok = p.timestampString(); !ok {
		return false
	}
	if !p.expect8(canonType, 8) {
		return false
	}
	if s, ok = p.tableString(&p.topTab, true); !ok || s == "" {
		return false
	}
	e.Type = s
	if p.i != len(b)-1 || b[p.i] != '}' || (skipped != "" && s != skipped) {
		return false
	}
	p.i++
	p.prevEventHash = e.Hash
	return true
}

// expect8 moves past the n bytes of w (a word of at most eight bytes,
// the rest of it bytes already compared) when they come next.
func (p *fastParser) expect8(w uint64, n int) bool {
	if p.i+8 > len(p.b) || binary.LittleEndian.Uint64(p.b[p.i:]) != w {
		return false
	}
	p.i += n
	return true
}

// expect8m is expect8 for a key shorter than a word: mask keeps its bytes.
func (p *fastParser) expect8m(w, mask uint64, n int) bool {
	if p.i+8 > len(p.b) || binary.LittleEndian.Uint64(p.b[p.i:])&mask != w {
		return false
	}
	p.i += n
	return true
}

// expect13 is expect8 for a key of n bytes, 9 to 16: w its first word,
// w2 (masked by mask) its second.
func (p *fastParser) expect13(w, w2, mask uint64, n int) bool {
	if p.i+16 > len(p.b) || binary.LittleEndian.Uint64(p.b[p.i:]) != w ||
		binary.LittleEndian.Uint64(p.b[p.i+8:])&mask != w2 {
		return false
	}
	p.i += n
	return true
}

// canonHashValue reads the value of hash (prev false) or prev_hash into
// *dst as fastEventInto's loop does: checked and not kept with
// skipHashes, the previous event's own string for a prev_hash that
// repeats it, in the arena (the hash) when there is one.
func (p *fastParser) canonHashValue(dst *string, prev bool) bool {
	if p.skipHashes {
		if !p.skipHash() {
			if _, ok := p.strKeep(false, false); !ok {
				return false
			}
		}
		return true
	}
	// A hash in hex (hexLike, then its closing quote) is a plain string
	// of 64 bytes: compared or copied without a look at each word.
	b, i := p.b, p.i
	hex := i+66 <= len(b) && b[i] == '"' && b[i+65] == '"' && hexLike(b[i+1:i+65])
	if prev && p.prevEventHash != "" {
		if hex {
			if string(b[i+1:i+65]) == p.prevEventHash {
				*dst = p.prevEventHash
				p.i += 66
				return true
			}
		} else {
			start := p.i
			if raw, ok := p.rawString(); ok && string(raw) == p.prevEventHash {
				*dst = p.prevEventHash
				return true
			}
			p.i = start
		}
	}
	if !prev && p.arena != nil {
		if hex && p.alias {
			*dst = aliasString(b[i+1 : i+65])
			p.i += 66
			return true
		}
		if hex {
			if len(p.arena)+64 > cap(p.arena) {
				p.arenaFull += len(p.arena)
				p.arena = make([]byte, 0, max(cap(p.arena), 4*64))
			}
			at := len(p.arena)
			p.arena = append(p.arena, b[i+1:i+65]...)
			p.i += 66
			// The arena's bytes are never written again (arenaString).
			*dst = unsafe.String(&p.arena[at], 64) //nolint:gosec // immutable bytes, see arenaString
			return true
		}
		if s, ok := p.arenaString(); ok {
			*dst = s
			return true
		}
	}
	s, ok := p.strIntern(false)
	*dst = s
	return ok
}
