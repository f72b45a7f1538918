package validator

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/xct-dev/xct/internal/catalog"
)

// Severity says how much a lint finding matters.
type Severity string

// Severities of lint findings.
const (
	// SeverityError is a mistake: the policy does not say what its author
	// meant (a tool that does not exist, for instance).
	SeverityError Severity = "error"
	// SeverityWarning is a rule that can never change a decision, or a
	// condition that is constant.
	SeverityWarning Severity = "warning"
)

// Finding is one thing Lint found, at a position a person can jump to.
type Finding struct {
	// File and Line locate the finding (the rule's first line).
	File string
	Line int
	// RuleID names the rule; empty for findings about a rate limit.
	RuleID string
	// Severity is error or warning.
	Severity Severity
	// Msg says what is wrong and why.
	Msg string
}

// String renders the finding as "file:line: severity: rule "id": message".
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.File)
	if f.Line > 0 {
		b.WriteString(":" + strconv.Itoa(f.Line))
	}
	b.WriteString(": " + string(f.Severity) + ": ")
	if f.RuleID != "" {
		b.WriteString("rule " + strconv.Quote(f.RuleID) + ": ")
	}
	b.WriteString(f.Msg)
	return b.String()
}

// LintFiles is `xct policy lint`: it loads the policy files as the
// validator would (every compile or type error is returned as an error of
// *PolicyError values, with file and line) and lints the result. cat may
// be nil; given, names of tools it does not have are errors.
func LintFiles(cat *catalog.Catalog, paths ...string) ([]Finding, error) {
	set, err := LoadPolicyFiles(paths...)
	if err != nil {
		return nil, err
	}
	return Lint(set, cat), nil
}

// Lint reports what in a compiled policy cannot do what it seems to:
//
//   - a rule that never decides anything because another rule matches
//     whenever it does and wins (deny beats require_approval beats allow),
//     e.g. an allow fully covered by a deny without `when`;
//   - a rule that repeats another: same effect, covering selectors, the same
//     condition or none;
//   - a condition that is always false (the rule never matches) or always
//     true (leave `when` out);
//   - with a catalog: tool patterns, rate limits and `tool == "..."`
//     comparisons that name no tool in it (errors), and a size() of an
//     argument that a tool the rule selects does not type (a warning).
//
// Enforced files are linted together, since their rules are evaluated
// together; each shadow file on its own. Findings come in file order.
func Lint(set *PolicySet, cat *catalog.Catalog) []Finding {
	var out []Finding
	if !set.defaultEnforced {
		out = append(out, lintRules(set.enforced.rules)...)
	}
	for _, sh := range set.shadows {
		out = append(out, lintRules(sh.rs.rules)...)
	}
	if cat != nil {
		out = append(out, unknownToolFindings(set, cat)...)
		out = append(out, untypedSizeFindings(set, cat)...)
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return out
}

// lintRules finds constant conditions and rules that never decide.
func lintRules(rules []rule) []Finding {
	var out []Finding
	for j := range rules {
		r := &rules[j]
		if r.when != nil {
			switch r.when.constant {
			case -1:
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: "never matches: its condition is always false"})
				continue
			case 1:
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: "its condition is always true; leave `when` out"})
			}
		}
		if r.action == actionAllow && r.when != nil {
			if words := submitterWords(r.when); len(words) > 0 {
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: fmt.Sprintf("allows on what the run's submitter writes (%s): a submitter can write whatever this rule allows on; "+
						"use it to ask for more (require_approval, deny), never to allow", strings.Join(words, ", "))})
			}
		}
		if r.action != actionAllow && r.when != nil {
			for _, dir := range nestedPrefixDirs(r.when) {
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: fmt.Sprintf("checks the nested directory %q by prefix: moving or deleting its parent %q acts on it without this rule matching "+
						"(fs.move %s elsewhere, change it there, move it back); write p.touches(%q), which matches a parent too",
						dir, path.Dir(dir), path.Dir(dir), dir)})
			}
		}
		for i := range rules {
			d := &rules[i]
			if i == j || (d.when != nil && d.when.constant == -1) || !covers(d, r) {
				continue
			}
			where := fmt.Sprintf("rule %q (%s:%d, %s)", d.id, d.file, d.line, d.action)
			if strength(d.action) > strength(r.action) {
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: fmt.Sprintf("never decides: %s matches whenever this %s rule does, and %s wins", where, r.action, d.action)})
				break
			}
			if d.action == r.action && i < j {
				out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
					Msg: fmt.Sprintf("adds nothing: %s matches whenever it does, with the same effect", where)})
				break
			}
		}
	}
	return out
}

// nestedPrefixDirs lists the nested directories (a/b, not a) a condition
// that never calls touches checks by prefix: p.startsWith("a/b/") or
// p.matches("^a/b(/|$)") (either form of matches). Such a check misses a
// move or delete of a parent: fs.move a → c, write c/b/x, move c back,
// each step judged on paths that do not start with a/b (attack16b's
// finding; CEL's p.touches(dir) matches a parent too). A top-level
// directory's only parent is the workspace, which the fs tools refuse to
// move or delete.
func nestedPrefixDirs(c *condition) []string {
	if c.ast == nil {
		return nil
	}
	root := celast.NavigateAST(c.ast.NativeRep())
	if len(celast.MatchDescendants(root, celast.FunctionMatcher("touches"))) > 0 {
		return nil
	}
	literal := func(e celast.Expr) (string, bool) {
		if e.Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().(types.String)
		return string(s), ok
	}
	var out []string
	add := func(dir string) {
		dir = strings.TrimRight(strings.TrimPrefix(dir, "./"), "/")
		if strings.Contains(dir, "/") && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	for _, fn := range []string{"startsWith", "matches"} {
		for _, call := range celast.MatchDescendants(root, celast.FunctionMatcher(fn)) {
			args := call.AsCall().Args()
			if len(args) == 0 {
				continue
			}
			lit, ok := literal(args[len(args)-1])
			if !ok {
				continue
			}
			if fn == "startsWith" {
				add(lit)
			} else if dir, ok := regexpDirPrefix(lit); ok {
				add(dir)
			}
		}
	}
	slices.Sort(out)
	return out
}

// regexpDirPrefix returns the directory an anchored regular expression
// starts with ("^deploy/prod(/|$)", "^deploy/prod/.*": deploy/prod): the
// literal text after ^ (a \. is a dot) up to the first other
// metacharacter, cut back to its last / unless what stops it ends a name
// (end, (, $, /).
func regexpDirPrefix(re string) (string, bool) {
	rest, ok := strings.CutPrefix(re, "^")
	if !ok {
		return "", false
	}
	var b strings.Builder
	i := 0
	for i < len(rest) {
		ch := rest[i]
		switch {
		case ch == '\\' && i+1 < len(rest) && strings.IndexByte("./-_", rest[i+1]) >= 0:
			b.WriteByte(rest[i+1])
			i += 2
			continue
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '/', ch == '_', ch == '-':
			b.WriteByte(ch)
			i++
			continue
		}
		break
	}
	dir := b.String()
	if i < len(rest) && strings.IndexByte("($/", rest[i]) < 0 {
		dir = dir[:strings.LastIndexByte(dir, '/')+1]
	}
	return dir, dir != ""
}

// submitterVars are the variables whose values the run's submitter writes
// and nothing checks: its labels and run id (StartRun), its goal, and the
// crew file's names (the crew is the submitter's file). Roles and the
// principal are authenticated; the arguments are what the verdict binds.
var submitterVars = []string{varRunLabels, varRunID, varGoal, varCrewName, varCrewAgent, varCrewAgentType, varCrewHandedBy, varCrewPath}

// submitterWords lists the submitterVars a condition reads, sorted.
func submitterWords(c *condition) []string {
	if c.ast == nil {
		return nil
	}
	var out []string
	for _, ref := range c.ast.NativeRep().ReferenceMap() {
		if ref != nil && slices.Contains(submitterVars, ref.Name) && !slices.Contains(out, ref.Name) {
			out = append(out, ref.Name)
		}
	}
	slices.Sort(out)
	return out
}

// strength orders effects: deny beats require_approval beats allow.
func strength(a ruleAction) int {
	switch a {
	case actionDeny:
		return 3
	case actionApproval:
		return 2
	case actionAllow:
		return 1
	}
	return 0
}

// covers reports whether d surely matches every proposal r matches: its
// selectors take in every tool r's take in, and it has no condition (or
// one that is always true), or the same condition as r.
func covers(d, r *rule) bool {
	switch {
	case d.when == nil || d.when.constant == 1:
	case r.when != nil && d.when.canonical == r.when.canonical:
	default:
		return false
	}
	if d.effects != 0 && (r.effects == 0 || r.effects&^d.effects != 0) {
		return false
	}
	if d.tools == nil {
		return true
	}
	if r.tools == nil {
		return false
	}
	for _, q := range r.tools {
		if !slices.ContainsFunc(d.tools, func(p string) bool { return patternCovers(p, q) }) {
			return false
		}
	}
	return true
}

// patternCovers reports whether every name q matches also matches p, for
// the cases that can be told surely: equal patterns, q a plain name, or p
// a plain prefix followed by one '*' that q's fixed prefix starts with.
func patternCovers(p, q string) bool {
	if p == q || p == "*" {
		return true
	}
	if !strings.ContainsAny(q, "*?") {
		return globMatch(p, q)
	}
	prefix, ok := strings.CutSuffix(p, "*")
	if !ok || strings.ContainsAny(prefix, "*?") {
		return false
	}
	qFixed := q[:strings.IndexAny(q, "*?")]
	return strings.HasPrefix(qFixed, prefix)
}

// unknownToolFindings lists tool names a policy gives that the catalog
// does not have: tools patterns, rate limit patterns, and tool names
// compared with `tool` in conditions.
func unknownToolFindings(set *PolicySet, cat *catalog.Catalog) []Finding {
	var names []string
	for _, t := range cat.List() {
		names = append(names, t.GetName())
	}
	matchesAny := func(pattern string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return globMatch(pattern, n) })
	}
	hint := func(name string) string {
		if s := suggest(cat, name); len(s) > 0 {
			return "; did you mean " + strings.Join(quoteAll(s), " or ") + "?"
		}
		return ""
	}
	var out []Finding
	for _, f := range set.files {
		for i := range f.rs.rules {
			r := &f.rs.rules[i]
			for _, p := range r.tools {
				if !matchesAny(p) {
					out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityError,
						Msg: fmt.Sprintf("tools pattern %q matches no tool in the catalog%s", p, hint(p))})
				}
			}
			if r.when == nil {
				continue
			}
			for _, name := range comparedToolNames(r.when) {
				if !slices.Contains(names, name) {
					out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityError,
						Msg: fmt.Sprintf("the condition compares tool with %q, which is not in the catalog%s", name, hint(name))})
				}
			}
		}
		for _, l := range f.rs.settings.rateLimits {
			if !matchesAny(l.pattern) {
				out = append(out, Finding{File: l.file, Line: l.line, Severity: SeverityError,
					Msg: fmt.Sprintf("rate limit tool pattern %q matches no tool in the catalog%s", l.pattern, hint(l.pattern))})
			}
		}
	}
	return out
}

// comparedToolNames finds the string constants a condition compares the
// tool's name with: tool == "x", "x" == tool, tool != "x", tool in ["x"].
func comparedToolNames(c *condition) []string {
	if c.ast == nil {
		return nil
	}
	isTool := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == varTool }
	str := func(e celast.Expr) (string, bool) {
		if e.Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().(types.String)
		return string(s), ok
	}
	var out []string
	root := celast.NavigateAST(c.ast.NativeRep())
	for _, fn := range []string{"_==_", "_!=_", "@in"} {
		for _, call := range celast.MatchDescendants(root, celast.FunctionMatcher(fn)) {
			args := call.AsCall().Args()
			if len(args) != 2 {
				continue
			}
			switch {
			case fn == "@in" && isTool(args[0]) && args[1].Kind() == celast.ListKind:
				for _, el := range args[1].AsList().Elements() {
					if s, ok := str(el); ok {
						out = append(out, s)
					}
				}
			case fn != "@in" && isTool(args[0]):
				if s, ok := str(args[1]); ok {
					out = append(out, s)
				}
			case fn != "@in" && isTool(args[1]):
				if s, ok := str(args[0]); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// untypedSizeFindings warns on a rule that takes size() of an argument
// (size(args.x), args.x.size()) which a tool it selects does not type in
// its schema: size() counts a string's characters but a list's elements
// or an object's members, so the proposal chooses what is counted (a
// limit on a text's length passed by the text as a list of one string,
// which a lenient server takes as the string). The argument checks
// cannot tell which the author meant (session 19); size(string(args.x))
// or a type in the schema says it.
func untypedSizeFindings(set *PolicySet, cat *catalog.Catalog) []Finding {
	var out []Finding
	for _, f := range set.files {
		for i := range f.rs.rules {
			r := &f.rs.rules[i]
			if r.when == nil || r.when.ast == nil {
				continue
			}
			for _, p := range sizedArgs(r.when) {
				for _, t := range cat.List() {
					if !r.selects(t.GetName(), classOf(t.GetEffect())) || schemaTypes(t.GetInputSchema(), p) {
						continue
					}
					arg := "args." + strings.Join(p, ".")
					out = append(out, Finding{File: r.file, Line: r.line, RuleID: r.id, Severity: SeverityWarning,
						Msg: fmt.Sprintf("takes size() of %s, which tool %q does not type in its schema: size() counts a string's characters "+
							"but a list's elements, and the proposal chooses which it gives; write size(string(%s)) or type it in the schema",
							arg, t.GetName(), arg)})
					break
				}
			}
		}
	}
	return out
}

// sizedArgs are the argument paths a condition takes size() of directly.
func sizedArgs(c *condition) [][]string {
	root := celast.NavigateAST(c.ast.NativeRep())
	vars := iterVarsOf(root)
	var out [][]string
	for _, call := range celast.MatchDescendants(root, celast.FunctionMatcher("size")) {
		ce := call.AsCall()
		var arg celast.Expr
		switch {
		case ce.IsMemberFunction() && len(ce.Args()) == 0:
			arg = ce.Target()
		case !ce.IsMemberFunction() && len(ce.Args()) == 1:
			arg = ce.Args()[0]
		default:
			continue
		}
		if p, ok := argPath(arg, vars); ok && len(p) > 0 && !slices.ContainsFunc(out, func(q []string) bool { return slices.Equal(p, q) }) {
			out = append(out, p)
		}
	}
	return out
}

// schemaTypes reports whether the JSON schema text gives the value at
// path a type (type, enum or const), following properties, items and
// prefixItems, or refuses it (additionalProperties: false); an
// unreadable schema is taken as typing it (the schema check refuses what
// it can).
func schemaTypes(text string, path []string) bool {
	var s any
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		return true
	}
	for _, step := range path {
		m, _ := s.(map[string]any)
		switch n, isIndex := stepIndex(step); {
		case step == elements || isIndex:
			if pi, ok := m["prefixItems"].([]any); ok && isIndex && n < len(pi) {
				s = pi[n]
				continue
			}
			s = m["items"]
		case step == values:
			s = m["additionalProperties"]
		default:
			props, _ := m["properties"].(map[string]any)
			if _, named := props[step]; !named && m["additionalProperties"] == false {
				return true // the schema refuses the argument
			}
			s = props[step]
		}
	}
	m, _ := s.(map[string]any)
	_, typed := m["type"]
	_, enum := m["enum"]
	_, constant := m["const"]
	return typed || enum || constant
}
