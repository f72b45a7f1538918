package lctl

import (
	"fmt"
	"sync"
)

// CanonicalStateJSON exposes the direct canonical encoder of State to the
// external tests, which compare it with Canonical.
func CanonicalStateJSON(s *State) ([]byte, error) { return s.canonicalJSON() }

// FastEventReader returns the stream's event reader (one parser, reused),
// for the benchmarks.
func FastEventReader() func([]byte) (Event, error) {
	p := newFastParser()
	return p.fastEvent
}

// HashedUnknown is the list State.Hash writes as "unknown_types".
func HashedUnknown(s *State) []uint64 { return s.hashedUnknown() }

// DigestForm is the canonical JSON State.Hash hashes (version 2).
func DigestForm(s *State) ([]byte, error) { return s.digestForm() }

// DecodePair returns a function that decodes raw with canonicalEvent and
// with loopEvent, each on its own parser kept from call to call (so that
// strings read before come from its tables), set up as the arguments
// say, and returns both events, whether canonicalEvent decided, and where
// each put the hash member.
func DecodePair() func(raw []byte, skipHashes, fields, arena bool, prev string) (c, l Event, ok bool, hashAt [2][2]int, err error) {
	pc, pl := newFastParser(), newFastParser()
	pl.generalData = true
	return func(raw []byte, skipHashes, fields, arena bool, prev string) (c, l Event, ok bool, hashAt [2][2]int, err error) {
		setup := func(p *fastParser) {
			p.skipHashes, p.fields = skipHashes, fields
			p.arena, p.slab = nil, nil
			if arena {
				p.arena = make([]byte, 0, 64)
			}
			p.prevEventHash = prev
			p.b, p.i = raw, 0
		}
		setup(pc)
		ok = pc.canonicalEvent(&c)
		setup(pl)
		err = pl.loopEvent(&l)
		if ok && pc.prevEventHash != pl.prevEventHash {
			err = fmt.Errorf("prev %q, loop %q", pc.prevEventHash, pl.prevEventHash)
		}
		return c, l, ok, [2][2]int{{pc.hashFrom, pc.hashTo}, {pl.hashFrom, pl.hashTo}}, err
	}
}

// SetChunks makes the stream read files in chunks of n bytes (slack more
// read at once), after a first batch of first events, decoded in batches
// of events; it returns what puts the sizes back.
func SetChunks(n, slack int64, first, events int) func() {
	b, s, f, e := chunkBytes, chunkSlack, firstBatch, chunkEvents
	chunkBytes, chunkSlack, firstBatch, chunkEvents = n, slack, first, events
	return func() { chunkBytes, chunkSlack, firstBatch, chunkEvents = b, s, f, e }
}

// MappedChunks counts the chunks the stream has taken from a mapping of
// the file (StreamOptions.Map).
func MappedChunks() int64 { return mappedChunks.Load() }

// SetGiveBack makes a mapped stream give its pages back every n bytes; it
// returns what puts the size back.
func SetGiveBack(n int64) func() {
	b := giveBackBytes
	giveBackBytes = n
	return func() { giveBackBytes = b }
}

// ChunksRead counts the chunks the stream has read at offsets.
func ChunksRead() int64 { return chunksRead.Load() }

// LoopPair returns a function that decodes raw twice, on parsers kept
// from call to call: as a stream does (fastEventInto: canonicalEvent,
// specEvent, loopEvent, through the tables) and the general way
// (loopEvent without the tables: dataFields, strIntern, skipValue), with
// fields in a batch's arena.
func LoopPair() func(raw []byte) (tables, general Event, errT, errG error) {
	pt, pg := newFastParser(), newFastParser()
	pg.generalData = true
	return func(raw []byte) (tables, general Event, errT, errG error) {
		for _, p := range []*fastParser{pt, pg} {
			p.fields, p.arena, p.slab = true, make([]byte, 0, 64), nil
			p.b, p.i = raw, 0
		}
		errT = pt.fastEventInto(&tables, raw)
		errG = pg.loopEvent(&general)
		return tables, general, errT, errG
	}
}

// specParser is SpecEventDecides's parser, made new for every call.
var specParser struct {
	sync.Mutex
	p *fastParser
}

// SpecEventDecides reports whether specEvent decides raw (on a parser of
// its own, with fields in an arena). The parser is in the state a new one
// is in, without allocating one: a parser is large (~25 KB), and under the
// race detector each allocation of one cost ~4 ms (TestLoopTablesMatchGeneral
// spent most of its time there).
func SpecEventDecides(raw []byte) bool {
	specParser.Lock()
	defer specParser.Unlock()
	if specParser.p == nil {
		specParser.p = newFastParser()
	}
	p := specParser.p
	keys, values := p.keys, p.values
	clear(keys)
	clear(values)
	*p = fastParser{keys: keys, values: values} // what newFastParser gives
	p.fields, p.arena = true, make([]byte, 0, 64)
	p.b, p.i = raw, 0
	var e Event
	return p.specEvent(&e)
}

// RaceDetector: the test binary runs under the race detector (the
// equivalence tests over long chains check fewer events there).
const RaceDetector = raceDetector

// DataKeys lists the keys of a streamed event's data fields, in order.
func DataKeys(e *Event) []string {
	var ks []string
	for i := range e.fields {
		ks = append(ks, e.fields[i].key)
	}
	return ks
}
