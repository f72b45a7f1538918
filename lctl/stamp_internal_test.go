package lctl

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// TestStampOfSecondMatchesParse: timestamps read as a stream reads them
// (timestampString, then the stream's time: stampOfSecond's when it read
// the bytes, else secondCache.parse) give the same string, the same
// bytes read and the same time (==) as arenaString and parse alone, for
// every millisecond of two seconds taken in turn (with three digits and
// without trailing zeros) and the forms the fast read must leave alone:
// longer fractions, no fraction, another zone, a
// byte of the second edited, an escape, bytes cut short, an arena full.
func TestStampOfSecondMatchesParse(t *testing.T) {
	var inputs []string
	secs := []string{"2026-11-21T09:00:00", "2026-11-21T09:00:01", "1969-12-31T23:59:59"}
	for _, sec := range secs {
		for ms := range 1000 {
			inputs = append(inputs, fmt.Sprintf(`"%s.%03dZ"`, sec, ms))
			// As a writer that drops the fraction's trailing zeros
			// writes it (".37Z", ".5Z", no fraction at all).
			if sec == secs[0] {
				inputs = append(inputs, `"`+time.Date(2026, 11, 21, 9, 0, 0, ms*1e6, time.UTC).Format(time.RFC3339Nano)+`"`)
			}
			if ms%97 == 0 {
				inputs = append(inputs, fmt.Sprintf(`"%s.%03dZ"`, secs[0], ms))
			}
		}
	}
	base := secs[0]
	for _, f := range []string{".5Z", ".12Z", ".123456Z", ".123456789Z", "Z", ".037+00:00", ".037z", ".03aZ", ".0370Z", ".037Z\\u0030", ".037 Z", "..37Z"} {
		inputs = append(inputs, `"`+base+".000Z\"", `"`+base+f+`"`)
	}
	for i := range 19 {
		for _, c := range []byte{'0', '9', 'X', ':', '-', 0x80} {
			b := []byte(base)
			b[i] = c
			inputs = append(inputs, `"`+base+".001Z\"", `"`+string(b)+`.002Z"`)
		}
	}
	inputs = append(inputs, `"`+base+".003Z\"", `"\u0032026-11-21T09:00:00.004Z"`, `"`+base+`.005Z`, `"`+base+`.006`)
	r := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		inputs = append(inputs, fmt.Sprintf(`"%s.%03dZ"`, secs[r.IntN(2)], r.IntN(1000)))
	}
	p, ref := newFastParser(), newFastParser()
	hits := 0
	for k, in := range inputs {
		// Another event's bytes after the string, as in a batch.
		buf := []byte(in + `, "agent": "a"}`)
		if k%50 == 7 {
			buf = []byte(in) // cut right after it
		}
		room := 64
		if k%13 == 5 {
			room = 20 // too little room left in the arena
		}
		p.arena, ref.arena = make([]byte, 0, room), make([]byte, 0, room)
		p.b, p.i, ref.b, ref.i = buf, 0, buf, 0
		p.stamp = nil
		got, gok := p.timestampString()
		want, wok := ref.arenaString()
		if !wok {
			want, wok = ref.strIntern(false)
		}
		if got != want || gok != wok || p.i != ref.i {
			t.Fatalf("%s: read %q %v to %d, arenaString and strIntern %q %v to %d", in, got, gok, p.i, want, wok, ref.i)
		}
		if !gok || got == "" {
			continue
		}
		var gt, wt = p.stampTime, ref.times
		gotOK := true
		if p.stamp == nil || unsafe.StringData(got) != p.stamp {
			gt, gotOK = p.times.parse(got)
		} else {
			hits++
		}
		wantT, wantOK := wt.parse(want)
		ref.times = wt
		if gt != wantT || gotOK != wantOK {
			t.Fatalf("%s: time %v %v, parse %v %v", in, gt, gotOK, wantT, wantOK)
		}
	}
	if hits < len(inputs)/2 {
		t.Fatalf("stampOfSecond read %d of %d timestamps: the test does not exercise it", hits, len(inputs))
	}
}
