package executor

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// respondSlow is respond's conversion as it was before plain results were
// taken as they are: the result encoded, decoded, converted.
func respondSlow(t testing.TB, result any) *xctv1.Response {
	t.Helper()
	raw, err := json.Marshal(result)
	if err != nil {
		t.Fatalf("marshal %v: %v", result, err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	resp, err := wire.SuccessResponse(v)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type respondStruct struct {
	Name  string   `json:"name"`
	Count int      `json:"count"`
	Tags  []string `json:"tags,omitempty"`
}

// A tool's result becomes the same Response whether it is taken as it is
// (plain JSON values) or read back from its encoding (anything else).
func TestRespondSameAsEncodedAndDecoded(t *testing.T) {
	t.Parallel()
	s := &Service{}
	st := &servedTool{desc: &xctv1.ToolDescriptor{Name: "t"}, maxBytes: 1 << 20}
	for _, c := range []struct {
		name   string
		result any
		plain  bool
	}{
		{"nil", nil, true},
		{"bool", true, true},
		{"float", 1.5, true},
		{"negative zero", math.Copysign(0, -1), true},
		{"large float", 1e300, true},
		{"string with html and unicode", "<a href='x'>&é✓</a>", true},
		{"nested", map[string]any{"ok": true, "list": []any{1.0, "two", nil, map[string]any{"x": []any{}}}, "empty": map[string]any{}}, true},
		{"int", 42, false},
		{"map of ints", map[string]any{"n": 3, "m": int64(1) << 60}, false},
		{"struct", respondStruct{Name: "a", Count: 2, Tags: []string{"x"}}, false},
		{"pointer to struct", &respondStruct{Name: "p"}, false},
		{"string slice", []string{"a", "b"}, false},
		{"typed map", map[string]string{"k": "v"}, false},
		{"json number", json.Number("12.50"), false},
		{"raw message", json.RawMessage(`{"a":[1,2]}`), false},
		{"invalid utf-8 string", "a\xffb", false},
		{"invalid utf-8 key", map[string]any{"k\xfe": 1.0}, false},
		{"invalid utf-8 deep", []any{map[string]any{"k": []any{"\xc3"}}}, false},
		{"bytes", []byte("hi"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := plainJSON(c.result); got != c.plain {
				t.Errorf("plainJSON = %v, want %v", got, c.plain)
			}
			got := s.respond(st, outcome{result: c.result})
			if want := respondSlow(t, c.result); !proto.Equal(got, want) {
				t.Errorf("respond = %v\nencoded and decoded = %v", got, want)
			}
		})
	}
	// What cannot be encoded is not kept either way (the tool succeeded:
	// a success that says so).
	for _, bad := range []any{math.NaN(), math.Inf(1), map[string]any{"x": math.Inf(-1)}, func() {}} {
		if r := s.respond(st, outcome{result: bad}); notKeptOf(r) != NotKeptNotJSON {
			t.Errorf("respond(%T) = %v, want a result not kept (NOT_JSON)", bad, r)
		}
	}
	// The limits still hold for plain results.
	small := &servedTool{desc: &xctv1.ToolDescriptor{Name: "t"}, maxBytes: 16}
	r := s.respond(small, outcome{result: strings.Repeat("x", 32)})
	if m, _ := r.GetSuccess().GetResult().AsInterface().(map[string]any); notKeptOf(r) != NotKeptTooLarge || m["bytes"] != 34.0 || m["limit"] != 16.0 {
		t.Errorf("a plain result over the limit = %v, want a result not kept (OUTPUT_TOO_LARGE, 34 bytes, limit 16)", r)
	}
	var deep any = "leaf"
	for range wire.MaxDepth + 1 {
		deep = []any{deep}
	}
	r = s.respond(st, outcome{result: deep})
	if m, _ := r.GetSuccess().GetResult().AsInterface().(map[string]any); notKeptOf(r) != NotKeptTooDeep || m["depth"] != float64(wire.MaxDepth+1) {
		t.Errorf("a plain result nested past the limit = %v, want a result not kept (TOO_DEEP, depth %d)", r, wire.MaxDepth+1)
	}
	// An error is an error: nothing to keep.
	if r := s.respond(small, outcome{err: wire.Errorf(wire.CodeNotFound, "gone")}); r.GetError().GetCode() != string(wire.CodeNotFound) {
		t.Errorf("an error = %v", r)
	}
}

// Whatever JSON decodes to is plain, and taking it as it is equals reading
// its encoding back.
func FuzzPlainJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",null,true]}`, `"\u003c"`, `-0`, `1e308`, `[[],{}]`, `"\ud800"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		raw, err := json.Marshal(v)
		if err != nil || wire.Depth(raw) > wire.MaxDepth {
			return
		}
		if !plainJSON(v) {
			t.Fatalf("decoded JSON %s is not plain", doc)
		}
		var back any
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, back) {
			t.Fatalf("%s: taken as it is %#v, read back %#v", doc, v, back)
		}
	})
}

// BenchmarkRespond turns a tool's result into its Response: "now" as
// respond does, "decoded" as it did before plain results were taken as
// they are (encode, decode, convert).
func BenchmarkRespond(b *testing.B) {
	s := &Service{}
	st := &servedTool{desc: &xctv1.ToolDescriptor{Name: "t"}, maxBytes: 16 << 20}
	entries := make([]any, 1000)
	for i := range entries {
		entries[i] = map[string]any{"name": "file-" + strings.Repeat("x", i%20), "size": float64(i * 100), "dir": i%7 == 0}
	}
	for _, c := range []struct {
		name   string
		result any
	}{
		{"small", map[string]any{"ok": true}},
		{"file-64KiB", map[string]any{"path": "a.txt", "content": strings.Repeat("line of text\n", 64<<10/13), "bytes": 65536.0}},
		{"list-1000", map[string]any{"entries": entries}},
	} {
		b.Run(c.name+"/now", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.respond(st, outcome{result: c.result}).GetError() != nil {
					b.Fatal("error")
				}
			}
		})
		b.Run(c.name+"/decoded", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				respondSlow(b, c.result)
			}
		})
	}
}
