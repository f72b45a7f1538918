package lctl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"sorted keys, no space", `{"b": 1, "a": [true, null, "x"]}`, `{"a":[true,null,"x"],"b":1}`},
		// RFC 8785 §3.2.2.3 number examples.
		{"numbers", `[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001, -0, 1e21, 1e-7, 100, 0.1]`,
			`[333333333.3333333,1e+30,4.5,0.002,1e-27,0,1e+21,1e-7,100,0.1]`},
		{"escapes", `{"s": "\u0000\b\f\n\r\t\"\\/<>&\u00e9\u2028"}`, "{\"s\":\"\\u0000\\b\\f\\n\\r\\t\\\"\\\\/<>&\u00e9\u2028\"}"},
		// RFC 8785 §3.2.3: sorting by UTF-16 code units.
		{"utf16 order", `{"\u20ac": 1, "\r": 2, "\ud83d\ude00": 3, "1": 4, "\u00f6": 5}`, "{\"\\r\":2,\"1\":4,\"\u00f6\":5,\"\u20ac\":1,\"\U0001F600\":3}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(tc.in), &v); err != nil {
				t.Fatal(err)
			}
			got, err := lctl.Canonical(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestCanonicalGoValuesMatchJSONValues(t *testing.T) {
	goVal := map[string]any{"step": 3, "n": int64(7), "labels": map[string]string{"b": "2", "a": "1"}, "list": []map[string]any{{"x": 1}}}
	raw, _ := json.Marshal(goVal)
	var jsonVal any
	_ = json.Unmarshal(raw, &jsonVal)
	a, err := lctl.Canonical(goVal)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := lctl.Canonical(jsonVal)
	if !bytes.Equal(a, b) {
		t.Fatalf("go %s != json %s", a, b)
	}
}

func chain(t *testing.T, n int) []lctl.Event {
	t.Helper()
	var events []lctl.Event
	prev := ""
	for i := 1; i <= n; i++ {
		e := lctl.Event{ChainID: "c", Seq: uint64(i), Type: "step_start", Timestamp: "2026-01-01T00:00:00Z", Agent: "a", Data: map[string]any{"i": float64(i)}}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		events = append(events, e)
	}
	return events
}

func TestVerifyNamesTheFirstBrokenEvent(t *testing.T) {
	if err := lctl.Verify(chain(t, 5)); err != nil {
		t.Fatalf("intact chain: %v", err)
	}
	tests := []struct {
		name    string
		mutate  func([]lctl.Event) []lctl.Event
		wantSeq uint64
		reason  string
	}{
		{"edited data", func(c []lctl.Event) []lctl.Event { c[2].Data["i"] = 99.0; return c }, 3, "edited"},
		{"edited agent", func(c []lctl.Event) []lctl.Event { c[3].Agent = "mallory"; return c }, 4, "edited"},
		{"removed", func(c []lctl.Event) []lctl.Event { return append(c[:1], c[2:]...) }, 3, "removed"},
		{"reordered", func(c []lctl.Event) []lctl.Event { c[1], c[2] = c[2], c[1]; return c }, 3, "reordered"},
		{"rehashed after edit", func(c []lctl.Event) []lctl.Event {
			c[1].Data["i"] = 42.0
			_ = c[1].Seal(c[0].Hash) // the forger re-seals the event, but the next link breaks
			return c
		}, 3, "prev_hash"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := lctl.Verify(tc.mutate(chain(t, 5)))
			var ve *lctl.VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v", err)
			}
			if ve.Seq != tc.wantSeq || !strings.Contains(ve.Reason, tc.reason) {
				t.Fatalf("got %v, want seq %d mentioning %q", ve, tc.wantSeq, tc.reason)
			}
		})
	}
}

func TestFileRoundTripJSONAndYAML(t *testing.T) {
	events := chain(t, 3)
	for _, format := range []lctl.Format{lctl.FormatJSON, lctl.FormatYAML} {
		var buf bytes.Buffer
		if err := lctl.NewFile("c", events).Encode(&buf, format); err != nil {
			t.Fatal(err)
		}
		f, err := lctl.DecodeFile(&buf, format)
		if err != nil {
			t.Fatalf("format %d: %v", format, err)
		}
		if f.Chain.ID != "c" || len(f.Events) != 3 {
			t.Fatalf("format %d: %+v", format, f)
		}
		if err := lctl.Verify(f.Events); err != nil {
			t.Fatalf("format %d: hashes do not survive the round trip: %v", format, err)
		}
	}
}

func TestDecodeFileErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"truncated", "{\n  \"lctl\": \"4.0\",\n  \"chain\": {\"id\": \"x\"},\n  \"events\": [", "truncated"},
		{"syntax", "{\"lctl\": \"4.0\",\n \"chain\" {}}", "line 2"},
		{"wrong version", `{"lctl":"3.0","chain":{"id":"x"},"events":[]}`, `"3.0"`},
		{"no chain id", `{"lctl":"4.0","chain":{},"events":[]}`, "chain.id"},
		{"no events", `{"lctl":"4.0","chain":{"id":"x"}}`, "missing events"},
		{"event without seq", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"type":"a"}]}`, "position 1: missing seq"},
		{"bad seq", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":1.5,"type":"a"}]}`, "positive integer"},
		{"data not object", `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":1,"type":"a","data":[1]}]}`, "data must be an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lctl.DecodeFile(strings.NewReader(tc.in), lctl.FormatJSON)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestUnknownEventTypesAreKept(t *testing.T) {
	in := `{"lctl":"4.0","chain":{"id":"x"},"events":[{"seq":1,"type":"quantum_flux","timestamp":"2024-01-15T10:30:00Z","agent":"a","data":{"k":1}}]}`
	f, err := lctl.DecodeFile(strings.NewReader(in), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if f.Events[0].Type != "quantum_flux" || f.Events[0].Data["k"] != 1.0 {
		t.Fatalf("event = %+v", f.Events[0])
	}
}

func TestValidateChainID(t *testing.T) {
	for _, ok := range []string{"run-1", "A_b-9", strings.Repeat("a", 128)} {
		if err := lctl.ValidateChainID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", "a>", "../x", strings.Repeat("a", 129), "ü"} {
		if err := lctl.ValidateChainID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDataOfFastPathMatchesJSON(t *testing.T) {
	in := map[string]any{
		"int": 3, "i64": int64(-7), "u64": uint64(9), "f": 1.5, "s": "x<>&\u2028", "b": true, "nil": nil,
		"labels": map[string]string{"team": "platform"}, "argv": []string{"ls", "-l"},
		"nested": map[string]any{"list": []any{1, "two", map[string]any{"k": 3.25}}},
	}
	fast, err := lctl.DataOf(in)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(in)
	var slow map[string]any
	_ = json.Unmarshal(raw, &slow)
	a, _ := json.Marshal(fast)
	b, _ := json.Marshal(slow)
	if !bytes.Equal(a, b) {
		t.Fatalf("fast %s\nslow %s", a, b)
	}
	in["labels"].(map[string]string)["team"] = "changed"
	if fast["labels"].(map[string]any)["team"] != "platform" {
		t.Fatal("DataOf did not copy")
	}
	// Types the fast path does not convert go through JSON; invalid values fail.
	type point struct{ X int }
	if d, err := lctl.DataOf(map[string]any{"p": point{X: 1}}); err != nil || d["p"].(map[string]any)["X"] != 1.0 {
		t.Fatalf("struct value: %v %v", d, err)
	}
	if _, err := lctl.DataOf(map[string]any{"nan": math.NaN()}); err == nil {
		t.Fatal("NaN accepted")
	}
}

func TestStoredEventIsCanonical(t *testing.T) {
	e := chain(t, 2)[1]
	e.Data = map[string]any{"z": "<&>", "a": []any{1.0, map[string]any{"y": nil, "b": "\u00e9"}}}
	if err := e.Seal(e.PrevHash); err != nil {
		t.Fatal(err)
	}
	body, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(body, &generic); err != nil {
		t.Fatal(err)
	}
	again, _ := lctl.Canonical(generic)
	if !bytes.Equal(body, again) {
		t.Fatalf("stored body is not canonical:\n%s\n%s", body, again)
	}
	back, err := lctl.DecodeEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := back.ComputeHash(); h != e.Hash {
		t.Fatal("decoded event hashes differently")
	}
}

// DataShared gives what DataOf gives (reflect.DeepEqual, and the same
// canonical bytes), shares what is already JSON values and copies the way
// to anything it converts, leaving its input as it was.
func TestDataSharedAsDataOf(t *testing.T) {
	args := map[string]any{"path": "a", "n": []any{1.0, "x", map[string]any{"k": nil}}}
	cases := []map[string]any{
		nil, {}, {"step": 3, "arguments": args},
		{"int": 3, "i64": int64(-7), "u64": uint64(9), "i32": int32(2), "f": 1.5, "s": "x<>&\u2028", "b": true, "nil": nil,
			"labels": map[string]string{"team": "platform"}, "argv": []string{"ls", "-l"},
			"nested": map[string]any{"list": []any{1, "two", map[string]any{"k": 3.25}}}},
		{"nilmap": map[string]any(nil), "nillist": []any(nil), "deep": []any{[]any{map[string]any{"x": 1}}}},
		{"p": struct{ X int }{1}}, {"nan": math.NaN()}, {"bad": "\xff"}, {"\xfe": 1.0}, {"inner": []any{math.Inf(1)}},
	}
	for _, in := range cases {
		before, _ := json.Marshal(in)
		want, werr := lctl.DataOf(in)
		got, gerr := lctl.DataShared(in)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: DataOf error %v, DataShared %v", before, werr, gerr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: DataShared %#v, DataOf %#v", before, got, want)
		}
		a, _ := lctl.Canonical(got)
		b, _ := lctl.Canonical(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: canonical %s and %s", before, a, b)
		}
		if after, _ := json.Marshal(in); !bytes.Equal(before, after) {
			t.Fatalf("input changed: %s -> %s", before, after)
		}
	}
	// Already JSON values: nothing copied. An int beside them: a new top
	// level, the arguments shared.
	plain := map[string]any{"arguments": args, "tool": "t"}
	got, _ := lctl.DataShared(plain)
	if reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(plain).UnsafePointer() {
		t.Fatal("a payload of JSON values was copied")
	}
	mixed := map[string]any{"arguments": args, "step": 1}
	got, _ = lctl.DataShared(mixed)
	if reflect.ValueOf(got).UnsafePointer() == reflect.ValueOf(mixed).UnsafePointer() || got["step"] != 1.0 || mixed["step"] != 1 {
		t.Fatal("the int was not converted in a copy")
	}
	if reflect.ValueOf(got["arguments"]).UnsafePointer() != reflect.ValueOf(args).UnsafePointer() {
		t.Fatal("the arguments were copied")
	}
	// Sharing a payload of JSON values allocates nothing: not even the
	// interface values of its strings and numbers.
	allJSON := map[string]any{"s": "x", "f": 2.5, "b": true, "nil": nil, "list": []any{"a", 1.0, false}, "arguments": args}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := lctl.DataShared(allJSON); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("DataShared of JSON values made %v allocations", n)
	}
}
