package wire

import "testing"

func TestKeyClash(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		v    any
		a, b string // "" when none
	}{
		{"plain names", map[string]any{"path": "a", "content": "b"}, "", ""},
		{"one name", map[string]any{"Path": "a"}, "", ""},
		{"case", map[string]any{"path": "a", "Path": "b"}, "Path", "path"},
		{"long s", map[string]any{"sql": "a", "ſql": "b"}, "sql", "ſql"},
		{"Kelvin sign", map[string]any{"kind": "a", "\u212aind": "b"}, "kind", "\u212aind"},
		{"full width", map[string]any{"sql": "a", "ｓｑｌ": "b"}, "sql", "ｓｑｌ"},
		{"zero-width space", map[string]any{"sql": "a", "s\u200bql": "b"}, "sql", "s\u200bql"},
		{"NFC and NFD", map[string]any{"caf\u00e9": 1.0, "cafe\u0301": 2.0}, "cafe\u0301", "caf\u00e9"},
		{"upper case, distinct", map[string]any{"Path": "a", "Content": "b"}, "", ""},
		{"in an array", []any{1.0, map[string]any{"x": []any{map[string]any{"ID": 1.0, "id": 2.0}}}}, "ID", "id"},
		{"same name in two objects", map[string]any{"a": map[string]any{"id": 1.0}, "b": map[string]any{"id": 2.0}}, "", ""},
		{"scalars", "Path", "", ""},
	} {
		a, b, found := KeyClash(tt.v)
		if found != (tt.a != "") || a != tt.a || b != tt.b {
			t.Errorf("%s: KeyClash = %q, %q, %v; want %q, %q", tt.name, a, b, found, tt.a, tt.b)
		}
	}
}

func BenchmarkKeyClashPlain(b *testing.B) {
	args := map[string]any{"path": "config/app.yaml", "content": "x", "mode": "overwrite", "options": map[string]any{"mkdirs": true}}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, found := KeyClash(args); found {
			b.Fatal("clash")
		}
	}
}

func TestMemberKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"path", "PATH", true},
		{"sql", "ſql", true},
		{"Kind", "kind", true},
		{"path", "path", false},
		{"path", "paths", false},
		{"a", "b", false},
	} {
		if got := c.a != c.b && MemberKey(c.a) == MemberKey(c.b); got != c.want {
			t.Errorf("%q and %q one name: %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
