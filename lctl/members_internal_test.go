package lctl

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestMembersMatchPerName: the members of a streamed object found in one
// pass read exactly as the object's own Float and Get of each name, on
// random objects: flat ones and ones with escapes, nested values, keys
// given twice, white space, numbers of every shape, the names absent.
func TestMembersMatchPerName(t *testing.T) {
	names := []string{"input", "in", "input_tokens", "prompt_tokens", "output", "out", "output_tokens", "completion_tokens"}
	keys := append([]string{"other", "i", "inputs", `in\u0070ut`}, names...)
	values := []string{"12", "-3", "0", "1.5", "1e3", "9007199254740993", "1e400", `"12"`, `"a\"b"`, "true", "null", `{"input": 1}`, "[1, 2]", "[]", `"x"`}
	r := rand.New(rand.NewPCG(8, 15))
	// The race detector finds nothing in this one goroutine, and it makes
	// each round ~600 times slower (sync.Pool drops parsers under it, so
	// parsedAt allocates one per call): a fiftieth of the rounds there
	// (a tenth still took 220 s at load 25).
	rounds := 20_000
	if raceDetector {
		rounds = 400
	}
	flat := 0
	for round := range rounds {
		var b strings.Builder
		b.WriteByte('{')
		for k := range r.IntN(6) {
			if k > 0 {
				b.WriteString([]string{",", ", ", " ,\n  "}[r.IntN(3)])
			}
			fmt.Fprintf(&b, `"%s"%s%s`, keys[r.IntN(len(keys))], []string{":", ": ", " : "}[r.IntN(3)], values[r.IntN(len(values))])
		}
		b.WriteByte('}')
		raw := []byte(b.String())
		check := decodeComposite(raw)
		if _, ok := check.(map[string]any); !ok {
			t.Fatalf("round %d: the test's object is not JSON: %s", round, raw)
		}
		o := Object{raw: raw}
		// Where the flat reader finds a member (when it reads the object)
		// is where the parser does (whose skipValue does not step over a
		// number out of float64's range: such objects are left out here).
		for _, name := range keys {
			if off, ok := flatAt(raw, name); ok && !strings.Contains(b.String(), "1e400") && off != parsedAt(raw, name) {
				t.Fatalf("%s: member %s at %d, the parser finds it at %d", raw, name, off, parsedAt(raw, name))
			}
		}
		// AppendStr writes what Str gives.
		for _, name := range keys {
			got, ok := o.AppendStr([]byte("x"), name)
			want, wok := o.Str(name)
			if ok != wok || string(got) != "x"+want {
				t.Fatalf("%s: AppendStr(%s) = %q %v, Str %q %v", raw, name, got, ok, want, wok)
			}
		}
		m := o.Members(names)
		if m.flat {
			flat++
		}
		for i, name := range names {
			f, ok := m.Float(i)
			wf, wok := o.Float(name)
			if f != wf || ok != wok || !reflect.DeepEqual(m.Get(i), o.Get(name)) {
				t.Fatalf("%s: member %s: %v %v %#v, want %v %v %#v", raw, name, f, ok, m.Get(i), wf, wok, o.Get(name))
			}
		}
		// The same through a decoded object.
		dm := Object{m: check.(map[string]any)}
		md := dm.Members(names)
		for i, name := range names {
			f, ok := md.Float(i)
			wf, wok := dm.Float(name)
			if f != wf || ok != wok || !reflect.DeepEqual(md.Get(i), dm.Get(name)) {
				t.Fatalf("%s (decoded): member %s differs", raw, name)
			}
		}
	}
	if flat < rounds/10 || flat > rounds*9/10 {
		t.Fatalf("%d of %d objects read in one pass: the test does not exercise both ways", flat, rounds)
	}
}
