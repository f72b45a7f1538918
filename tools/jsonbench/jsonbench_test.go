// Package jsonbench measures JSON libraries on the work lctl does most:
// decoding one event of a chain file (its fields, and its data as
// map[string]any, which is what the reducer reads). It is its own module so
// the libraries it compares never become dependencies of XCT. Run it from
// this directory, on a chain lctlgen wrote:
//
//	go run ../../lctl/lctltest/lctlgen -n 100000 -o /tmp/w100k.lctl.json
//	JSONBENCH_FILE=/tmp/w100k.lctl.json go test -bench . -benchmem
//	JSONBENCH_FILE=/tmp/w100k.lctl.json GOEXPERIMENT=jsonv2 go test -tags jsonv2 -bench . -benchmem
//
// lctl's own reader is measured by BenchmarkFastEvent in package lctl, on
// the same events.
package jsonbench

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"os"
	"testing"

	"github.com/bytedance/sonic"
	gojson "github.com/goccy/go-json"
)

// event is an event as lctl holds it.
type event struct {
	ChainID   string         `json:"chain_id"`
	Seq       uint64         `json:"seq"`
	Type      string         `json:"type"`
	Timestamp string         `json:"timestamp"`
	Agent     string         `json:"agent"`
	Data      map[string]any `json:"data"`
	PrevHash  string         `json:"prev_hash"`
	Hash      string         `json:"hash"`
}

// corpus returns the events of JSONBENCH_FILE (one per line, as lctlgen
// writes them) and their total size.
func corpus(b *testing.B) ([][]byte, int64) {
	path := os.Getenv("JSONBENCH_FILE")
	if path == "" {
		b.Skip("set JSONBENCH_FILE to a chain lctlgen wrote")
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out [][]byte
	var size int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte(","))
		if len(line) == 0 || line[0] != '{' || bytes.HasPrefix(line, []byte(`{"lctl"`)) {
			continue
		}
		out = append(out, append([]byte(nil), line...))
		size += int64(len(line))
	}
	if len(out) == 0 {
		b.Fatal("no events in ", path)
	}
	return out, size
}

func run(b *testing.B, decode func([]byte, *event) error) {
	events, size := corpus(b)
	b.SetBytes(size / int64(len(events)))
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		var e event
		if err := decode(events[i%len(events)], &e); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkStdlibUnmarshal(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return stdjson.Unmarshal(raw, e) })
}

func BenchmarkStdlibDecoder(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return stdjson.NewDecoder(bytes.NewReader(raw)).Decode(e) })
}

func BenchmarkSonic(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return sonic.Unmarshal(raw, e) })
}

func BenchmarkSonicStd(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return sonic.ConfigStd.Unmarshal(raw, e) })
}

func BenchmarkGoJSON(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return gojson.Unmarshal(raw, e) })
}
