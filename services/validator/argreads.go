package validator

import (
	"slices"
	"strconv"
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
// has(f.path)) reads files.*.path. Over an object a macro ranges over its
// member names, which are strings, so no value is read there.
const elements = "*"

// values is the path step of every value of an object, read through a
// macro over its names: args.flags.exists(k, args.flags[k] == true) reads
// flags.{}.
const values = "{}"

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
		p, ok := argPath(c.Args()[0], vars)
		if !ok {
			return nil, false
		}
		if name, ok := stringLiteral(c.Args()[1]); ok {
			return append(p, name), true
		}
		// args.cmd[0]: one element of a list (session 19).
		if n, ok := indexLiteral(c.Args()[1]); ok {
			return append(p, indexStep(n)), true
		}
		// args.m[k], k ranging over args.m: a value of the object.
		if ix := c.Args()[1]; ix.Kind() == celast.IdentKind {
			if kp := vars[ix.AsIdent()]; kp != nil && slices.Equal(kp, append(slices.Clone(p), elements)) {
				return append(p, values), true
			}
		}
		return nil, false
	}
	return nil, false
}

// indexStep is the path step of a list's element n, read by its index:
// args.cmd[0] == "rm" compares cmd.[0].
func indexStep(n int) string { return "[" + strconv.Itoa(n) + "]" }

// stepIndex is the element a path step reads by index, if it is one.
func stepIndex(step string) (int, bool) {
	if len(step) < 3 || step[0] != '[' || step[len(step)-1] != ']' {
		return 0, false
	}
	n, err := strconv.Atoi(step[1 : len(step)-1])
	return n, err == nil && n >= 0 && indexStep(n) == step
}

// indexLiteral is the element a constant index names (CEL takes an int,
// a uint or a whole double): none for a negative one, which errs.
func indexLiteral(e celast.Expr) (int, bool) {
	if e.Kind() != celast.LiteralKind {
		return 0, false
	}
	const most = 1 << 30
	switch v := e.AsLiteral().(type) {
	case types.Int:
		return int(v), v >= 0 && v < most
	case types.Uint:
		return int(v), v < most
	case types.Double:
		return int(v), v >= 0 && v < most && float64(v) == float64(int(v))
	}
	return 0, false
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
		for step, sub := range r {
			if n, ok := stepIndex(step); ok && n < len(list) {
				if given, read, found = sub.spelledOtherwise(list[n]); found {
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
	if sub, ok := r[values]; ok {
		for _, e := range obj {
			if given, read, found = sub.spelledOtherwise(e); found {
				return given, read, true
			}
		}
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
// another JSON type at a compared argument is refused SCHEMA_INVALID. The
// same holds for a comparison with a typed expression (args.assignee ==
// run.principal, a string; args.group in run.roles) and, through a macro
// over an object's names, for its values (args.flags[k] == true); two
// arguments compared with each other (args.source == args.target) must
// be of one type (session 18).

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

// typeKind is the JSON type of a CEL type (0: none, or dyn).
func typeKind(t *types.Type) jsonKind {
	if t == nil {
		return 0
	}
	switch t.Kind() {
	case types.StringKind:
		return kindString
	case types.BoolKind:
		return kindBool
	case types.IntKind, types.UintKind, types.DoubleKind:
		return kindNumber
	}
	return 0
}

// operandKind is the JSON type of what a rule compares an argument with:
// a constant's, or the checked type of an expression (run.principal, a
// string; run.step, an int; run.labels["env"], a string). An argument's
// value is dyn: no type.
func operandKind(ast *celast.AST, e celast.Expr) jsonKind {
	if k := literalKind(e); k != 0 {
		return k
	}
	return typeKind(ast.GetType(e.ID()))
}

// argCompare is an argument a condition compares with constants or typed
// expressions, and their types.
type argCompare struct {
	path  []string
	kinds jsonKind
}

// argPair is two arguments a condition compares with each other (==,
// !=): a tool may take values of two types as equal (JavaScript's "a" ==
// ["a"], a server converting both to strings) where CEL's == is false.
type argPair struct {
	a, b []string
}

// comparedArgs finds the arguments a checked condition compares with
// constants or typed expressions (==, != either side, in a list of
// constants or a typed list or map: args.group in run.roles), and the
// pairs of arguments it compares with each other.
func comparedArgs(ast *celast.AST) ([]argCompare, []argPair) {
	var out []argCompare
	var pairs []argPair
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
				p, ok := argPath(args[0], vars)
				if !ok {
					continue
				}
				if args[1].Kind() != celast.ListKind {
					// A typed collection: run.roles, run.labels.
					if t := ast.GetType(args[1].ID()); t != nil && len(t.Parameters()) > 0 &&
						(t.Kind() == types.ListKind || t.Kind() == types.MapKind) {
						add(p, typeKind(t.Parameters()[0]))
					}
					continue
				}
				var k jsonKind
				for _, el := range args[1].AsList().Elements() {
					lk := operandKind(ast, el)
					if lk == 0 {
						k = 0 // a list of other things: not a type to hold it to
						break
					}
					k |= lk
				}
				add(p, k)
				continue
			}
			pa, okA := argPath(args[0], vars)
			pb, okB := argPath(args[1], vars)
			switch {
			case okA && okB:
				if len(pa) > 0 && len(pb) > 0 && !slices.Equal(pa, pb) {
					pairs = append(pairs, argPair{a: slices.Clone(pa), b: slices.Clone(pb)})
				}
			case okA:
				add(pa, operandKind(ast, args[1]))
			case okB:
				add(pb, operandKind(ast, args[0]))
			}
		}
	}
	return out, pairs
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

// fullKind is v's JSON type, objects and arrays included (0 for null).
func fullKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return ""
}

// unlikePair finds a pair of arguments of args compared by ps whose values
// are of two JSON types (null or absent aside): their paths and types.
// Paths through a list's elements or an object's values (a macro's
// variable: args.files.exists(f, f.src == f.dst)) hold every value
// reached on either side to one type: which element the macro pairs
// with which is its own (a nested one pairs every element with every
// other), so one of another type anywhere is refused (session 19).
func unlikePair(ps []argPair, args map[string]any) (a, b, ka, kb string, found bool) {
	for _, p := range ps {
		var kinds []string
		var paths []string
		note := func(path []string) func(any) {
			return func(v any) {
				if k := fullKind(v); k != "" && !slices.Contains(kinds, k) {
					kinds = append(kinds, k)
					paths = append(paths, strings.Join(path, "."))
				}
			}
		}
		eachValueAt(p.a, args, note(p.a))
		eachValueAt(p.b, args, note(p.b))
		if len(kinds) > 1 {
			return paths[0], paths[1], kinds[0], kinds[1], true
		}
	}
	return "", "", "", "", false
}

// eachValueAt calls f with each value at path in v: every element of a
// list where the path says elements, every value of an object where it
// says values, one element where it gives an index.
func eachValueAt(path []string, v any, f func(any)) {
	if len(path) == 0 {
		f(v)
		return
	}
	switch x := v.(type) {
	case []any:
		if path[0] == elements {
			for _, e := range x {
				eachValueAt(path[1:], e, f)
			}
		} else if n, ok := stepIndex(path[0]); ok && n < len(x) {
			eachValueAt(path[1:], x[n], f)
		}
	case map[string]any:
		if path[0] == values {
			for _, e := range x {
				eachValueAt(path[1:], e, f)
			}
		} else if e, ok := x[path[0]]; ok {
			eachValueAt(path[1:], e, f)
		}
	}
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
	if list, ok := v.([]any); ok {
		if path[0] == elements {
			for _, e := range list {
				if otherTypeAt(path[1:], kinds, e) {
					return true
				}
			}
			return false
		}
		if n, ok := stepIndex(path[0]); ok {
			return n < len(list) && otherTypeAt(path[1:], kinds, list[n])
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	if path[0] == values {
		for _, e := range m {
			if otherTypeAt(path[1:], kinds, e) {
				return true
			}
		}
		return false
	}
	e, ok := m[path[0]]
	return ok && otherTypeAt(path[1:], kinds, e)
}
