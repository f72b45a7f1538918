package validator

import (
	"strconv"
	"strings"
)

// nulArgument reports whether a string or a member name in v holds a NUL
// (U+0000), and where, as a path under at ("path", "opts.list[2]").
//
// A tool server written in C, or one that hands a string to a C library
// (a resolver, a file open, a database client taking a C string), reads a
// string only up to its first NUL, while a policy reads it whole: a rule
// denying paths that end in ".env" allowed ".env\u0000.txt", which such a
// server opens as ".env". The built-in tools are Go's and refuse a NUL
// where it matters (a path, a header, a URL, a program's argument); a
// tool of a server (MCP or gRPC, source set) is not known to, so its
// proposals with a NUL are denied, whatever the policy says.
func nulArgument(v any, at string) (string, bool) {
	switch x := v.(type) {
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return at, true
		}
	case map[string]any:
		for k, e := range x {
			p := k
			if at != "" {
				p = at + "." + k
			}
			if strings.IndexByte(k, 0) >= 0 {
				return p, true
			}
			if w, ok := nulArgument(e, p); ok {
				return w, true
			}
		}
	case []any:
		for i, e := range x {
			if w, ok := nulArgument(e, at+"["+strconv.Itoa(i)+"]"); ok {
				return w, true
			}
		}
	}
	return "", false
}
