package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// objectMembers must give exactly what the decoder gives wherever it
// answers, and answer wherever the decoder accepts: it is strictObject's
// path for every well-formed decision.
func checkMembersAgree(t *testing.T, in []byte) {
	t.Helper()
	fast, ok := objectMembers(in)
	slow, err := strictObjectDecoded(in)
	if ok != (err == nil) {
		t.Fatalf("%q: objectMembers ok=%v, the decoder's error %v", in, ok, err)
	}
	if !ok {
		return
	}
	if len(fast) != len(slow) {
		t.Fatalf("%q: %d members, the decoder %d", in, len(fast), len(slow))
	}
	for k, v := range slow {
		f, found := fast[k]
		if !found {
			t.Fatalf("%q: key %q missing", in, k)
		}
		var a, b bytes.Buffer
		if json.Compact(&a, f) != nil || json.Compact(&b, v) != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("%q: key %q is %q, the decoder's %q", in, k, f, v)
		}
		if cap(f) != len(f) {
			t.Fatalf("%q: key %q's value can grow into what follows it", in, k)
		}
	}
}

var memberCases = []string{
	`{}`, ` { } `, "{\n}\n", `{"a":1}`, `{"a":1,"b":2}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`,
	`{"a\"b":"c\\"}`, `{"é":true,"\u00e9":false}`, "{\"\xff\":1}", "{\"\xff\":1,\"\xfe\":2}",
	`{"next_step":{"tool":"fs.write","arguments":{"path":"a","n":[1,2,{"x":"]}"}]},"goal":"g"}}`,
	`{"a" : [ ] , "b" : { } , "c" : null , "d" : -1.5e3 , "e" : "}" }`,
	`{"a":{"a":1,"a":2}}`, `[]`, `null`, `"x"`, `1`, `{`, `{"a":1}x`, `{"a":1}{}`, `{"a"}`, ``, `   `,
	`{"a":1,}`, `{"a":tru}`, `{"a":"\x"}`,
	`{"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
}

func TestObjectMembersAsTheDecoder(t *testing.T) {
	for _, c := range memberCases {
		checkMembersAgree(t, []byte(c))
	}
}

func FuzzObjectMembers(f *testing.F) {
	for _, c := range memberCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkMembersAgree(t, in) })
}
