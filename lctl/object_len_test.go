package lctl_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

// TestObjectLen: an object member's Len is the number of keys of the map
// the full read makes of it (a key given twice, or once escaped, counted
// once), streamed (keys read, nothing decoded) and decoded alike.
func TestObjectLen(t *testing.T) {
	objects := map[string]int{
		`{}`:      0,
		`{"a":1}`: 1,
		`{ "a" : {"x":[1,{"y":2}]} , "b" : "s" }`:                           2,
		`{"a":1,"b":2,"a":3}`:                                               2,
		`{"ab":1,"a\u0062":2,"c":[],"d":{}}`:                                3,
		`{"F1":{"confidence":0.5,"text":"t"},"F10":{"text":"u"},"F2":null}`: 3,
		// Sorted keys (counted without a parser), as Python writes them,
		// with strings and nested values holding the separators.
		`{"F1": {"text": "a, \"b\": }"}, "F2": [1, {"c": "}"}], "F3": "x,y", "F4": -1.5e3, "F5": true}`: 5,
		`{"a":1,"a":2}`:                 1,
		`{"b":1,"a":2}`:                 2,
		`{"a":1,"b":2,"b":3}`:           2,
		`{"a":1,"b\u0061":2}`:           2,
		"{\n  \"a\": 1,\n  \"é\": 2\n}": 2,
	}
	var file strings.Builder
	file.WriteString(`{"lctl":"4.0","chain":{"id":"c"},"events":[`)
	var want []int
	seq := 0
	for obj, n := range objects {
		if seq > 0 {
			file.WriteString(",\n")
		}
		seq++
		file.WriteString(`{"seq":` + strconv.Itoa(seq) + `,"type":"checkpoint","data":{"facts_snapshot":` + obj + `}}`)
		want = append(want, n)
	}
	file.WriteString("]}")
	streamed := 0
	err := lctl.Stream(strings.NewReader(file.String()), lctl.StreamOptions{Fields: true, SkipHashes: true}, func(*lctl.StreamHeader) error { return nil },
		func(e *lctl.StreamEvent) error {
			o, ok := e.Object("facts_snapshot")
			if !ok || o.Len() != want[streamed] {
				t.Errorf("event %d streamed: Len %d (%v), want %d", e.Seq, o.Len(), ok, want[streamed])
			}
			streamed++
			return nil
		})
	if err != nil || streamed != len(want) {
		t.Fatalf("streamed %d of %d: %v", streamed, len(want), err)
	}
	f, err := lctl.Decode(strings.NewReader(file.String()), lctl.FormatJSON, lctl.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Events {
		o, ok := f.Events[i].Object("facts_snapshot")
		m, _ := f.Events[i].Data["facts_snapshot"].(map[string]any)
		if !ok || o.Len() != want[i] || len(m) != want[i] {
			t.Errorf("event %d decoded: Len %d, map %d, want %d", i+1, o.Len(), len(m), want[i])
		}
	}
}
