package lctl_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

// TestSpecExamplesLoad loads every example chain of the spec (stored
// verbatim under testdata/spec) and replays it.
func TestSpecExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/spec/*.lctl.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("spec examples: %v %v", files, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := lctl.Decode(bytes.NewReader(raw), lctl.FormatYAML, lctl.DecodeOptions{ChainID: lctl.ChainIDForPath(path)})
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Events) == 0 {
				t.Fatal("no events")
			}
			s := lctl.Replay(f.Chain.ID, f.Events, 0)
			if s.EventCount != len(f.Events) {
				t.Errorf("replayed %d of %d events", s.EventCount, len(f.Events))
			}
			// Written and read back, in both formats, nothing changes.
			for _, format := range []lctl.Format{lctl.FormatJSON, lctl.FormatYAML} {
				var buf bytes.Buffer
				if err := f.Encode(&buf, format); err != nil {
					t.Fatal(err)
				}
				back, err := lctl.DecodeFile(&buf, format)
				if err != nil {
					t.Fatalf("%v: %v\n%s", format, err, buf.String())
				}
				assertSameEvents(t, f.Events, back.Events)
				if len(f.Extra) != len(back.Extra) {
					t.Errorf("%v: top-level keys %v became %v", format, f.Extra, back.Extra)
				}
			}
		})
	}
}

func assertSameEvents(t *testing.T, a, b []lctl.Event) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d events became %d", len(a), len(b))
	}
	for i := range a {
		ca, _ := lctl.Canonical(a[i])
		cb, _ := lctl.Canonical(b[i])
		if !bytes.Equal(ca, cb) {
			t.Fatalf("event %d changed:\n%s\n%s", i+1, ca, cb)
		}
	}
}

// TestOtherImplementations reads what other LCTL writers produce.
func TestOtherImplementations(t *testing.T) {
	in := `{"lctl": 4, "chain": "py-run", "events": [
	  {"seq": "1", "type": "step_start", "timestamp": "2024-01-15T10:30:00.123456", "agent": "a", "data": {"intent": "x"}, "parent_id": 7},
	  {"seq": 2, "type": "step_end", "timestamp": 1705314601.5, "agent": "a", "data": {"tokens": {"in": 10, "out": 5}}},
	  {"seq": 3, "type": "llm_trace", "timestamp": "2024-01-15 10:30:02+00:00", "agent": null, "data": null}
	], "streaming": {"enabled": true}}`
	f, err := lctl.DecodeFile(strings.NewReader(in), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if f.Chain.ID != "py-run" || f.LCTL != "4.0" || len(f.Events) != 3 {
		t.Fatalf("file = %+v", f)
	}
	if e := f.Events[0]; e.Seq != 1 || e.Extra["parent_id"] != 7.0 || e.Time().IsZero() {
		t.Errorf("event 1 = %+v", e)
	}
	if e := f.Events[1]; e.Timestamp != "2024-01-15T10:30:01.5Z" {
		t.Errorf("numeric timestamp read as %q", e.Timestamp)
	}
	if e := f.Events[2]; e.Time().IsZero() || e.Agent != "" || e.Data != nil {
		t.Errorf("event 3 = %+v", e)
	}
	if s := lctl.Replay("py-run", f.Events, 0); s.Tokens != (lctl.Tokens{Input: 10, Output: 5}) || len(s.UnknownTypes) != 1 {
		t.Errorf("tokens %+v unknown %v", s.Tokens, s.UnknownTypes)
	}
	wantWarnings := []string{"chain is a plain string", `seq "1" is a string`, "is a number; read as Unix time"}
	for _, w := range wantWarnings {
		if !strings.Contains(strings.Join(f.Warnings, "\n"), w) {
			t.Errorf("warnings %q lack %q", f.Warnings, w)
		}
	}
	if f.Extra["streaming"] == nil {
		t.Errorf("the streaming section was dropped")
	}
	// Extra event fields are kept through a write and covered by the hash.
	if err := f.Events[0].Seal(""); err != nil {
		t.Fatal(err)
	}
	h := f.Events[0].Hash
	f.Events[0].Extra["parent_id"] = 8.0
	if h2, _ := f.Events[0].ComputeHash(); h2 == h {
		t.Error("changing an extra field did not change the hash")
	}
}

// TestDecodeErrorsNameTheEvent checks the messages for broken files.
func TestDecodeErrorsNameTheEvent(t *testing.T) {
	tests := []struct {
		name, in string
		format   lctl.Format
		want     string
	}{
		{"truncated in an event", "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"x\"},\"events\":[\n{\"seq\":1,\"type\":\"a\"},\n{\"seq\":2,\"ty", lctl.FormatJSON,
			"line 3, column 13, in the event at position 2, which starts on line 3: the file is truncated"},
		{"not an object", `[1,2]`, lctl.FormatJSON, "a chain file is a JSON object, found a list"},
		{"events not a list", `{"lctl":"4.0","chain":{"id":"x"},"events":{}}`, lctl.FormatJSON, "events must be a list, found an object"},
		{"events null", `{"lctl":"4.0","chain":{"id":"x"},"events":null}`, lctl.FormatJSON, "events must be a list, found null"},
		{"duplicate key", `{"lctl":"4.0","chain":{"id":"x"},"events":[],"events":[]}`, lctl.FormatJSON, `key "events" appears twice`},
		{"trailing data", `{"lctl":"4.0","chain":{"id":"x"},"events":[]} {}`, lctl.FormatJSON, "unexpected data after the chain object"},
		{"type missing", "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"x\"},\"events\":[\n  {\"seq\":1,\"type\":\"a\"},\n  {\"seq\":2}]}", lctl.FormatJSON,
			"line 3: event at position 2 (seq 2): missing type"},
		{"agent not a string", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":1,"type":"a","agent":3}]}`, lctl.FormatJSON, "agent must be a string, got a number"},
		{"seq not a number", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":"one","type":"a"}]}`, lctl.FormatJSON, `seq "one" is not a positive integer`},
		{"seq zero", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":0,"type":"a"}]}`, lctl.FormatJSON, "seq 0 is not a positive integer"},
		{"event null", `{"lctl":"4.0","chain":{"id":"x"},"events":[null]}`, lctl.FormatJSON, "an event must be an object, found null"},
		{"yaml event line", "lctl: \"4.0\"\nchain: {id: x}\nevents:\n  - seq: 1\n    type: a\n  - seq: 2\n    data: [1]\n    type: b\n", lctl.FormatYAML,
			"line 6: event at position 2 (seq 2): data must be an object, got a list"},
		{"yaml syntax", "lctl: \"4.0\"\nchain: {id: x\n", lctl.FormatYAML, "yaml: line "},
		{"yaml empty", "", lctl.FormatYAML, "the file is empty"},
		{"yaml infinity", "lctl: \"4.0\"\nchain: {id: x}\nevents:\n  - seq: 1\n    type: a\n    data: {x: .inf}\n", lctl.FormatYAML, ".inf is not a JSON number"},
		{"unknown major version", `{"lctl":"5.0","chain":{"id":"x"},"events":[]}`, lctl.FormatJSON, `lctl version "5.0" has major version 5, which this lctl does not know`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lctl.DecodeFile(strings.NewReader(tc.in), tc.format)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestYAMLKeepsTimestampText checks that a YAML timestamp is read as the
// text it was hashed as, however YAML would read it as a date.
func TestYAMLKeepsTimestampText(t *testing.T) {
	e := lctl.Event{ChainID: "c", Seq: 1, Type: "t", Timestamp: "2024-01-15T10:30:00.500+02:00", Agent: "a",
		Data: map[string]any{"when": "2024-01-15", "n": "1.0", "b": "true", "null": "null", "multi": "a\nb", "empty": "", "f": 0.1, "big": 1e21, "neg": -3.0}}
	if err := e.Seal(""); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := lctl.NewFile("c", []lctl.Event{e}).Encode(&buf, lctl.FormatYAML); err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(&buf, lctl.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(f.Events); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	// An unquoted timestamp written by hand keeps its text too.
	hand := "lctl: '4.0'\nchain: {id: c}\nevents:\n  - seq: 1\n    type: t\n    timestamp: 2024-01-15T10:30:00.500+02:00\n"
	f, err = lctl.DecodeFile(strings.NewReader(hand), lctl.FormatYAML)
	if err != nil || f.Events[0].Timestamp != "2024-01-15T10:30:00.500+02:00" {
		t.Fatalf("timestamp %q, %v", f.Events[0].Timestamp, err)
	}
}

// TestEncodeSpecOrder checks the file layout: keys in the spec's order.
func TestEncodeSpecOrder(t *testing.T) {
	e := lctl.Event{Seq: 1, Type: "step_start", Timestamp: "2024-01-15T10:30:00Z", Agent: "a", Data: map[string]any{"intent": "x"}}
	for format, want := range map[lctl.Format]string{
		lctl.FormatJSON: "{\n  \"lctl\": \"4.0\",\n  \"chain\": {\n    \"id\": \"c\"\n  },\n  \"events\": [\n    {\n      \"seq\": 1,\n      \"type\": \"step_start\",\n" +
			"      \"timestamp\": \"2024-01-15T10:30:00Z\",\n      \"agent\": \"a\",\n      \"data\": {\n        \"intent\": \"x\"\n      }\n    }\n  ]\n}\n",
		lctl.FormatYAML: "lctl: \"4.0\"\nchain:\n  id: c\nevents:\n  - seq: 1\n    type: step_start\n    timestamp: \"2024-01-15T10:30:00Z\"\n    agent: a\n    data: {intent: x}\n",
	} {
		var buf bytes.Buffer
		if err := lctl.NewFile("c", []lctl.Event{e}).Encode(&buf, format); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Errorf("%v:\n%s\nwant\n%s", format, buf.String(), want)
		}
	}
}

func TestChainIDForPath(t *testing.T) {
	for in, want := range map[string]string{
		"runs/security-review.lctl.json": "security-review",
		"x/streaming.lctl.YAML":          "streaming",
		"my chain.json":                  "my-chain",
		"weird/é.yml":                    "-",
		".lctl.json":                     "chain",
	} {
		if got := lctl.ChainIDForPath(in); got != want {
			t.Errorf("ChainIDForPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckSequence(t *testing.T) {
	mk := func(seqs ...uint64) []lctl.Event {
		var out []lctl.Event
		for i, s := range seqs {
			out = append(out, lctl.Event{Seq: s, Type: "t", Agent: "a", Timestamp: "2024-01-15T10:30:0" + string(rune('0'+i%10)) + "Z"})
		}
		return out
	}
	tests := []struct {
		name  string
		chain []lctl.Event
		kinds []string
	}{
		{"in order", mk(1, 2, 3), nil},
		{"gap", mk(1, 2, 5), []string{lctl.ProblemMissingSeq}},
		{"starts late", mk(3, 4), []string{lctl.ProblemMissingSeq}},
		{"duplicate", mk(1, 2, 2, 3), []string{lctl.ProblemDuplicateSeq}},
		{"swapped", mk(1, 3, 2, 4), []string{lctl.ProblemOutOfOrder, lctl.ProblemOutOfOrder}},
		{"time backwards", func() []lctl.Event { c := mk(1, 2, 3); c[2].Timestamp = "2024-01-15T10:29:00Z"; return c }(), []string{lctl.ProblemTimestampOrder}},
		{"bad time", func() []lctl.Event { c := mk(1, 2); c[1].Timestamp = "yesterday"; return c }(), []string{lctl.ProblemBadTimestamp}},
		{"other chain", func() []lctl.Event { c := mk(1, 2); c[1].ChainID = "other"; return c }(), []string{lctl.ProblemChainID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := lctl.CheckSequence("c", tc.chain)
			var kinds []string
			for _, p := range ps {
				kinds = append(kinds, p.Kind)
				if !strings.Contains(p.Message, "event ") {
					t.Errorf("message names no event: %s", p.Message)
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("kinds %v, want %v (%v)", kinds, tc.kinds, ps)
			}
		})
	}
}

// FuzzDecodeFile feeds arbitrary bytes to the chain decoder, as JSON and
// as YAML: it must not panic, and what it accepts must encode and decode
// again to the same events, and replay.
func FuzzDecodeFile(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/spec/*.lctl.yaml")
	for _, path := range seeds {
		raw, _ := os.ReadFile(path)
		f.Add(raw, true)
	}
	f.Add([]byte(`{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":1,"type":"a","data":{"k":[1,{"z":null}]}}]}`), false)
	f.Add([]byte(`{"lctl":4,"chain":"x","events":[{"seq":"2","type":"b","timestamp":1705314601.5,"extra":1}]}`), false)
	f.Add([]byte("{\"lctl\":\"4.0\",\"chain\":{\"id\":\"x\"},\"events\":[{\"seq\":1,"), false)
	f.Add([]byte("lctl: '4.0'\nchain: {id: x}\nevents:\n  - &e {seq: 1, type: a}\n  - *e\n  - {<<: *e, seq: 3}\n"), true)
	f.Fuzz(func(t *testing.T, raw []byte, yaml bool) {
		format := lctl.FormatJSON
		if yaml {
			format = lctl.FormatYAML
		}
		file, err := lctl.Decode(bytes.NewReader(raw), format, lctl.DecodeOptions{ChainID: "fuzz"})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		lctl.Replay(file.Chain.ID, file.Events, 0)
		lctl.CheckSequence(file.Chain.ID, file.Events)
		_ = lctl.Verify(file.Events)
		for _, out := range []lctl.Format{lctl.FormatJSON, lctl.FormatYAML} {
			var buf bytes.Buffer
			if err := file.Encode(&buf, out); err != nil {
				return // values JSON cannot hold (none should reach here)
			}
			back, err := lctl.DecodeFile(&buf, out)
			if err != nil {
				t.Fatalf("re-reading what was written as %v: %v\n%s", out, err, buf.String())
			}
			if len(back.Events) != len(file.Events) {
				t.Fatalf("%d events became %d", len(file.Events), len(back.Events))
			}
			for i := range file.Events {
				a, _ := lctl.Canonical(file.Events[i])
				b, _ := lctl.Canonical(back.Events[i])
				if !bytes.Equal(a, b) {
					t.Fatalf("event %d changed through %v:\n%s\n%s", i+1, out, a, b)
				}
			}
		}
	})
}

// TestDecodeLargeFile reads a file large enough to be decoded in parallel:
// the events come back in order, and the first bad event is the one named.
func TestDecodeLargeFile(t *testing.T) {
	events := lctltest.Chain("big", 5000, lctltest.Options{Seal: true})
	var buf bytes.Buffer
	if err := lctl.NewFile("big", events).Encode(&buf, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(buf.Bytes()), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(f.Events); err != nil {
		t.Fatal(err)
	}
	// Break events 4001 and 4500: the error names 4001.
	raw := buf.String()
	for _, seq := range []string{"4001", "4500"} {
		raw = strings.Replace(raw, `"seq": `+seq+`,`, `"seq": -1,`, 1)
	}
	_, err = lctl.DecodeFile(strings.NewReader(raw), lctl.FormatJSON)
	if err == nil || !strings.Contains(err.Error(), "event at position 4001: seq -1 is not a positive integer") {
		t.Fatalf("err = %v", err)
	}
}
