package lctl

import (
	"encoding/binary"
	"time"
	"unsafe"
)

// parseTimeFast parses the form events carry almost always, RFC 3339 in
// UTC with an optional fraction ("2026-11-21T09:00:00.037Z"), without the
// general parser: a million events parse in milliseconds. Anything else
// (another zone, a leap second, a malformed field) reports false and the
// caller uses time.Parse, which decides.
func parseTimeFast(s string) (time.Time, bool) {
	base, nsec, ok := parseTimeParts(s)
	if !ok {
		return time.Time{}, false
	}
	return base.Add(time.Duration(nsec)), true
}

// parseTimeParts is parseTimeFast in two parts: the whole second (from
// s[:19]) and the nanoseconds of the fraction.
func parseTimeParts(s string) (time.Time, int, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, 0, false
	}
	num := func(a, b int) (int, bool) {
		n := 0
		for i := a; i < b; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, 0, false
	}
	if day > daysIn(time.Month(month), year) {
		return time.Time{}, 0, false
	}
	nsec, ok := timeFraction(s[19 : len(s)-1])
	if !ok {
		return time.Time{}, 0, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC), nsec, true
}

// timeFraction reads what follows the seconds of a timestamp before its
// Z: nothing, or a dot and one to nine digits, as nanoseconds.
func timeFraction(rest string) (int, bool) {
	if len(rest) == 4 && rest[0] == '.' {
		// Milliseconds, what most writers give: the loop below, unrolled.
		a, b, c := rest[1]-'0', rest[2]-'0', rest[3]-'0'
		if a > 9 || b > 9 || c > 9 {
			return 0, false
		}
		return (int(a)*100 + int(b)*10 + int(c)) * 1e6, true
	}
	nsec := 0
	if len(rest) > 0 {
		if rest[0] != '.' || len(rest) < 2 || len(rest) > 10 {
			return 0, false
		}
		for i := 1; i < len(rest); i++ {
			c := rest[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			nsec = nsec*10 + int(c-'0')
		}
		nsec *= fractionScale[len(rest)-1]
	}
	return nsec, true
}

// fractionScale[n] turns n digits of a fraction into nanoseconds.
var fractionScale = [...]int{1e9, 1e8, 1e7, 1e6, 1e5, 1e4, 1e3, 1e2, 1e1, 1}

// secondCache remembers the whole second of the last timestamp parsed:
// consecutive events mostly fall in the same second, and then only the
// fraction is read (parsing the date and time costs two time.Date calls).
type secondCache struct {
	prefix string // the timestamp's first 19 bytes, "" for none
	base   time.Time
	unix   int64 // base's Unix seconds
	// w0, w1, w2 are prefix as little-endian words (w2: its last three
	// bytes), for fastParser.stampOfSecond.
	w0, w1, w2 uint64
}

// parse is ParseTime with the cache.
func (c *secondCache) parse(s string) (time.Time, bool) {
	if len(s) >= 20 && c.prefix != "" && s[len(s)-1] == 'Z' && s[:19] == c.prefix {
		if nsec, ok := timeFraction(s[19 : len(s)-1]); ok {
			// base.Add(nsec), made directly: a time in UTC (no location)
			// without a monotonic reading, as time.Date makes base.
			return time.Unix(c.unix, int64(nsec)).UTC(), true
		}
	}
	if base, nsec, ok := parseTimeParts(s); ok {
		c.prefix, c.base, c.unix = s[:19], base, base.Unix()
		c.w0 = binary.LittleEndian.Uint64([]byte(s[:8]))
		c.w1 = binary.LittleEndian.Uint64([]byte(s[8:16]))
		c.w2 = uint64(s[16]) | uint64(s[17])<<8 | uint64(s[18])<<16
		return base.Add(time.Duration(nsec)), true
	}
	return ParseTime(s)
}

func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// stampOfSecond reads, at p.i, a timestamp in the second of the last one
// parsed (p.times) with a fraction of three digits, as nearly every
// event's is ("2026-11-21T09:00:00.037Z"): its 24 bytes compared with the
// second as three words, copied into the arena as three words, and its
// time made from the second and the digits, kept for the stream
// (p.stamp, p.stampTime). It is what arenaString and secondCache.parse
// give for those bytes (a string of plain ASCII up to its quote; the
// cached second's time and the three-digit fraction) at ~40 instructions
// where they took ~300. false, having read nothing, for anything else.
func (p *fastParser) stampOfSecond() (string, bool) {
	c := &p.times
	b, i := p.b, p.i
	if c.prefix == "" || i+26 > len(b) || !p.alias && len(p.arena)+24 > cap(p.arena) || b[i] != '"' {
		return "", false
	}
	w := b[i+1 : i+26] // the 24 bytes and the closing quote
	w0 := binary.LittleEndian.Uint64(w)
	w1 := binary.LittleEndian.Uint64(w[8:])
	w2 := binary.LittleEndian.Uint64(w[16:])
	if w0 != c.w0 || w1 != c.w1 || w2&0xffffff != c.w2 || w[19] != '.' || w[23] != 'Z' || w[24] != '"' {
		return "", false
	}
	d0, d1, d2 := w[20]-'0', w[21]-'0', w[22]-'0'
	if d0 > 9 || d1 > 9 || d2 > 9 {
		return "", false
	}
	p.i = i + 26
	p.stampTime = time.Unix(c.unix, int64((int(d0)*100+int(d1)*10+int(d2))*1e6)).UTC()
	if p.alias {
		// The mapping's bytes (see fastParser.alias).
		p.stamp = &w[0]
		return unsafe.String(&w[0], 24), true //nolint:gosec // immutable bytes, see fastParser.alias
	}
	at := len(p.arena)
	room := p.arena[at : at+24]
	binary.LittleEndian.PutUint64(room, w0)
	binary.LittleEndian.PutUint64(room[8:], w1)
	binary.LittleEndian.PutUint64(room[16:], w2)
	p.arena = p.arena[:at+24]
	p.stamp = &p.arena[at]
	// The arena's bytes are never written again (arenaString).
	return unsafe.String(&p.arena[at], 24), true //nolint:gosec // immutable bytes, see arenaString
}
