package validator

import (
	"slices"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/xct-dev/xct/internal/wire"
)

// A rule judges an argument by the name it reads (args.path, has(args.path),
// args["path"], "path" in args, at any depth: args.opts.mask). A tool's
// server may read another spelling as that name: Go's encoding/json
// decoding into a struct takes "PATH", "Path" or "pat\u212Ah" for path. When
// the tool's schema names the argument, schemaNameClash refuses such a
// spelling; when it does not (an MCP or gRPC server's `{"type": "object"}`,
// or properties that leave it out), only the policy says which name is
// meant. So a member named as a rule of the tool reads an argument, but in
// another spelling (wire.MemberKey), is refused SCHEMA_INVALID: the rule
// would judge the proposal as if the argument were absent while the server
// acts on it (attack17b: a deny rule on args.path let {"PATH": ".env"}
// through).

// argReads are the argument names a condition reads, as a tree: each
// member read, with the members read inside it.
type argReads map[string]argReads

// add records the path of member names p (outermost first).
func (r argReads) add(p []string) {
	for _, name := range p {
		next, ok := r[name]
		if !ok {
			next = argReads{}
			r[name] = next
		}
		r = next
	}
}

// readArgs finds the argument paths a checked condition reads.
func readArgs(ast *celast.AST) argReads {
	out := argReads{}
	root := celast.NavigateAST(ast)
	vars := iterVarsOf(root)
	isReader := func(e celast.NavigableExpr) bool {
		switch e.Kind() {
		case celast.SelectKind:
			return true
		case celast.CallKind:
			fn := e.AsCall().FunctionName()
			return fn == "_[_]" || fn == "@in"
		}
		return false
	}
	for _, e := range celast.MatchDescendants(root, isReader) {
		if e.Kind() == celast.CallKind && e.AsCall().FunctionName() == "@in" {
			// "name" in args.x: a member of args.x named so.
			args := e.AsCall().Args()
			if len(args) != 2 {
				continue
			}
			name, ok := stringLiteral(args[0])
			if !ok {
				continue
			}
			if p, ok := argPath(args[1], vars); ok {
				out.add(append(p, name))
			}
			continue
		}
		if p, ok := argPath(e, vars); ok && len(p) > 0 {
			out.add(p)
		}
	}
	return out
}

// elements is the path step of a list's elements: args.files.exists(f,
// has(f.path)) reads files.*.path.
const elements = "*"

// iterVars are the comprehension variables (all, exists, map, filter)
// that range over a list an argument path names, each with that path and
// elements. A name bound to two ranges, or to a range that is not an
// argument, is nil: not followed (scopes are not told apart).
type iterVars map[string][]string

func iterVarsOf(root celast.NavigableExpr) iterVars {
	vars := iterVars{}
	for _, e := range celast.MatchDescendants(root, celast.KindMatcher(celast.ComprehensionKind)) {
		c := e.AsComprehension()
		name := c.IterVar()
		p, ok := argPath(c.IterRange(), vars)
		if old, seen := vars[name]; c.HasIterVar2() || !ok || (seen && !slices.Equal(old, append(p, elements))) {
			vars[name] = nil
			continue
		}
		vars[name] = append(p, elements)
	}
	return vars
}

// argPath returns the member names e reads from args, outermost first
// (args.opts.mask: opts, mask; args["key"]: key; args: none), and whether
// e is such a read.
func argPath(e celast.Expr, vars iterVars) ([]string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		if e.AsIdent() == varArgs {
			return nil, true
		}
		p, ok := vars[e.AsIdent()]
		return slices.Clone(p), ok && p != nil
	case celast.SelectKind:
		s := e.AsSelect()
		p, ok := argPath(s.Operand(), vars)
		if !ok {
			return nil, false
		}
		return append(p, s.FieldName()), true
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != "_[_]" || len(c.Args()) != 2 {
			return nil, false
		}
		name, ok := stringLiteral(c.Args()[1])
		if !ok {
			return nil, false
		}
		p, ok := argPath(c.Args()[0], vars)
		if !ok {
			return nil, false
		}
		return append(p, name), true
	}
	return nil, false
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// spelledOtherwise finds, in v, a member named as r reads an argument at
// that place but in another spelling: it returns the name given and the
// one read.
func (r argReads) spelledOtherwise(v any) (given, read string, found bool) {
	if list, ok := v.([]any); ok {
		if sub, ok := r[elements]; ok {
			for _, e := range list {
				if given, read, found = sub.spelledOtherwise(e); found {
					return given, read, true
				}
			}
		}
		return "", "", false
	}
	obj, ok := v.(map[string]any)
	if !ok || len(r) == 0 {
		return "", "", false
	}
	for k, e := range obj {
		if sub, ok := r[k]; ok {
			if given, read, found = sub.spelledOtherwise(e); found {
				return given, read, true
			}
			continue
		}
		key := ""
		for name := range r {
			if isASCII(k) && isASCII(name) {
				if strings.EqualFold(k, name) {
					return k, name, true
				}
				continue
			}
			if key == "" {
				key = wire.MemberKey(k)
			}
			if wire.MemberKey(name) == key {
				return k, name, true
			}
		}
	}
	return "", "", false
}

// A rule comparing an argument with a constant (args.recursive == true,
// args.mode != "safe", args.level in [1, 2]) judges it only as a value of
// the constant's type: CEL's == across types is false, not an error. A
// deny rule `has(args.recursive) && args.recursive == true` let
// {"recursive": "true"} through (and "false", 1, {}), which a server in
// Python or JavaScript reads as true (`if args.get("recursive")`). Where the
// tool's schema types the argument, the schema refuses such a value; where
// it does not, the rules' comparisons say which type is meant: a value of
// another JSON type at a compared argument is refused SCHEMA_INVALID.

// jsonKind is a JSON value's type, as a rule's constant gives it.
type jsonKind uint8

const (
	kindString jsonKind = 1 << iota
	kindNumber
	kindBool
)

func (k jsonKind) String() string {
	var out []string
	for _, c := range []struct {
		k    jsonKind
		name string
	}{{kindString, "a string"}, {kindNumber, "a number"}, {kindBool, "a boolean"}} {
		if k&c.k != 0 {
			out = append(out, c.name)
		}
	}
	return strings.Join(out, " or ")
}

// literalKind is the JSON type of a CEL constant (0: none, or null).
func literalKind(e celast.Expr) jsonKind {
	if e.Kind() != celast.LiteralKind {
		return 0
	}
	switch e.AsLiteral().(type) {
	case types.String:
		return kindString
	case types.Bool:
		return kindBool
	case types.Int, types.Uint, types.Double:
		return kindNumber
	}
	return 0
}

// argCompare is an argument a condition compares with constants, and
// their types.
type argCompare struct {
	path  []string
	kinds jsonKind
}

// comparedArgs finds the arguments a checked condition compares with
// constants: ==, != (either side) and in a list of constants.
func comparedArgs(ast *celast.AST) []argCompare {
	var out []argCompare
	add := func(p []string, k jsonKind) {
		if len(p) == 0 || k == 0 {
			return
		}
		for i := range out {
			if slices.Equal(out[i].path, p) {
				out[i].kinds |= k
				return
			}
		}
		out = append(out, argCompare{path: slices.Clone(p), kinds: k})
	}
	root := celast.NavigateAST(ast)
	vars := iterVarsOf(root)
	for _, fn := range []string{"_==_", "_!=_", "@in"} {
		for _, call := range celast.MatchDescendants(root, celast.FunctionMatcher(fn)) {
			args := call.AsCall().Args()
			if len(args) != 2 {
				continue
			}
			if fn == "@in" {
				if args[1].Kind() != celast.ListKind {
					continue
				}
				p, ok := argPath(args[0], vars)
				if !ok {
					continue
				}
				var k jsonKind
				for _, el := range args[1].AsList().Elements() {
					lk := literalKind(el)
					if lk == 0 {
						k = 0 // a list of other things: not a type to hold it to
						break
					}
					k |= lk
				}
				add(p, k)
				continue
			}
			if p, ok := argPath(args[0], vars); ok {
				add(p, literalKind(args[1]))
			} else if p, ok := argPath(args[1], vars); ok {
				add(p, literalKind(args[0]))
			}
		}
	}
	return out
}

// valueKind is v's JSON type as jsonKind (0 for null, objects and arrays,
// which no constant compares equal to).
func valueKind(v any) jsonKind {
	switch v.(type) {
	case string:
		return kindString
	case float64, int, int64:
		return kindNumber
	case bool:
		return kindBool
	}
	return 0
}

// otherType finds an argument of args compared by cs whose value is of
// none of the compared types (null aside): its path and the types.
func otherType(cs []argCompare, args map[string]any) (string, jsonKind, bool) {
	for _, c := range cs {
		if otherTypeAt(c.path, c.kinds, args) {
			return strings.Join(c.path, "."), c.kinds, true
		}
	}
	return "", 0, false
}

// otherTypeAt reports whether the value at path in v (each element of a
// list where the path says elements) is of none of kinds.
func otherTypeAt(path []string, kinds jsonKind, v any) bool {
	if len(path) == 0 {
		return v != nil && valueKind(v)&kinds == 0
	}
	if path[0] == elements {
		if list, ok := v.([]any); ok {
			for _, e := range list {
				if otherTypeAt(path[1:], kinds, e) {
					return true
				}
			}
			return false
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	e, ok := m[path[0]]
	return ok && otherTypeAt(path[1:], kinds, e)
}
