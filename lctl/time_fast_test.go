package lctl

import (
	"fmt"
	"testing"
	"time"
)

// The fast path agrees with time.Parse on what it accepts and leaves the
// rest to it.
func TestParseTimeFastAgrees(t *testing.T) {
	for _, s := range []string{
		"2026-11-21T09:00:00Z", "2026-11-21T09:00:00.037Z", "2026-11-21T09:00:00.123456789Z",
		"2024-02-29T23:59:59.5Z", "1999-12-31T00:00:00.000000001Z",
	} {
		got, ok := parseTimeFast(s)
		want, err := time.Parse(time.RFC3339Nano, s)
		if !ok || err != nil || !got.Equal(want) || got.Location() != want.Location() {
			t.Errorf("%s: fast %v %v, time.Parse %v %v", s, got, ok, want, err)
		}
	}
	for _, s := range []string{
		"2026-11-21T09:00:00+02:00", "2023-02-29T09:00:00Z", "2026-13-01T09:00:00Z", "2026-11-21T24:00:00Z",
		"2026-11-21T09:00:60Z", "2026-11-21T09:00:00.Z", "2026-11-21T09:00:00.1234567890Z", "2026-11-21 09:00:00Z",
		"2026-11-21T09:00:0xZ", "x",
	} {
		if _, ok := parseTimeFast(s); ok {
			t.Errorf("%s: the fast path accepted it", s)
		}
	}
	if _, ok := ParseTime("2026-11-21T09:00:00+02:00"); !ok {
		t.Error("ParseTime no longer reads a zone offset")
	}
}

// TestSecondCache: parsing through the cache of the last second gives
// what ParseTime gives, exactly (same instant, same location, same
// representation), on a run of timestamps that share seconds, change
// them, and mix in forms the fast path does not take.
func TestSecondCache(t *testing.T) {
	var c secondCache
	for _, s := range []string{
		"2026-11-21T09:00:00.037Z", "2026-11-21T09:00:00.074Z", "2026-11-21T09:00:00Z", "2026-11-21T09:00:00.5Z",
		"2026-11-21T09:00:00.Z", "2026-11-21T09:00:00.1234567890Z", "2026-11-21T09:00:00.12x4Z",
		"2026-11-21T09:00:01.000000001Z", "2026-11-21T09:00:01+02:00", "2026-11-21T09:00:01.9Z",
		"2026-11-21 09:00:01.9Z", "2026-11-21T09:00:01.9", "2024-02-29T23:59:59.999999999Z", "2024-02-29T23:59:59.1Z", "x", "",
		"2024-02-29T23:59:59.0x4Z", "2024-02-29T23:59:59./00Z", "2024-02-29T23:59:59.:00Z", "2024-02-29T23:59:59.00/Z",
		"2024-02-29T23:59:59.999Z", "2024-02-29T23:59:59.000Z", "2024-02-29T23:59:59.0000Z", "1969-12-31T23:59:59.123Z",
		"1969-12-31T23:59:59.5Z", "0001-01-01T00:00:00.001Z", "0001-01-01T00:00:00.002Z",
	} {
		got, ok := c.parse(s)
		want, wok := ParseTime(s)
		if ok != wok || got != want {
			t.Errorf("%q: cached %v %v, ParseTime %v %v", s, got, ok, want, wok)
		}
	}
}

// TestSecondCacheMilliseconds: every millisecond of a cached second (the
// unrolled three digits) reads as time.Parse reads it, to the
// representation.
func TestSecondCacheMilliseconds(t *testing.T) {
	var c secondCache
	for _, sec := range []string{"2026-11-21T09:00:00", "1969-12-31T23:59:59", "2024-02-29T23:59:59"} {
		for ms := range 1000 {
			s := fmt.Sprintf("%s.%03dZ", sec, ms)
			got, ok := c.parse(s)
			want, err := time.Parse(time.RFC3339Nano, s)
			if !ok || err != nil || got != want {
				t.Fatalf("%q: cached %v %v, time.Parse %v %v", s, got, ok, want, err)
			}
		}
	}
}

// TestTimeFractionEveryLength: a fraction of one to nine digits reads as
// time.Parse reads it.
func TestTimeFractionEveryLength(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, d := range []string{"987654321", "000000001", "100000000", "050505050"} {
			s := "2026-11-21T09:00:00." + d[:n] + "Z"
			got, ok := parseTimeFast(s)
			want, err := time.Parse(time.RFC3339Nano, s)
			if !ok || err != nil || !got.Equal(want) {
				t.Errorf("%s: fast %v %v, time.Parse %v %v", s, got, ok, want, err)
			}
		}
	}
}
