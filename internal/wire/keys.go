package wire

import (
	"slices"
	"unicode/utf8"

	"github.com/xct-dev/xct/internal/namefold"
)

// KeyClash finds, in one object of v (JSON values: maps, slices,
// scalars) at any depth, two member names that a reader of the object may
// take for one: equal once normalized (NFKC), case-folded (full Unicode
// folding: "SQL", the long s in "ſql" and the Kelvin sign in "\u212Aind"
// fold to plain letters) and rid of invisible format characters (a
// zero-width space). Go's encoding/json matches struct fields that way
// (the last member wins), as do .NET's web defaults: a policy reading
// args.sql and a tool server reading the other member would judge one
// call and make another. It returns the two names, sorted, and whether it
// found any; the walk stops at the first.
func KeyClash(v any) (a, b string, found bool) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) > 1 {
			if a, b, found = objectKeyClash(v); found {
				return a, b, true
			}
		}
		for _, e := range v {
			if a, b, found = KeyClash(e); found {
				return a, b, true
			}
		}
	case []any:
		for _, e := range v {
			if a, b, found = KeyClash(e); found {
				return a, b, true
			}
		}
	}
	return "", "", false
}

// objectKeyClash is KeyClash for the names of one object. Names that are
// plain lower-case ASCII (most are) are their own key and need no
// allocation; a map is made only when one is not.
func objectKeyClash(m map[string]any) (a, b string, found bool) {
	plain := true
	for k := range m {
		if !lowerASCII(k) {
			plain = false
			break
		}
	}
	if plain {
		return "", "", false // distinct names, each its own key
	}
	seen := make(map[string]string, len(m))
	for k := range m {
		key := memberKey(k)
		if other, dup := seen[key]; dup {
			pair := []string{k, other}
			slices.Sort(pair)
			return pair[0], pair[1], true
		}
		seen[key] = k
	}
	return "", "", false
}

func lowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// MemberKey is the form of a member name that KeyClash compares (and the
// validator, against a schema's names): two names a reader may take for
// one have the same key.
func MemberKey(s string) string { return memberKey(s) }

// memberKey is the form of a member name that KeyClash compares.
func memberKey(s string) string {
	if lowerASCII(s) {
		return s
	}
	return namefold.Fold(s)
}
