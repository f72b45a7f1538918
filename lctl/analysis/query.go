package analysis

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/xct-dev/xct/lctl/text"
)

// The fact store's query language is the subset of SQL the spec sketches:
//
//	SELECT * | field, ... [FROM facts]
//	  [WHERE cond]  cond: field op value | field [NOT] LIKE 'pattern'
//	                      | field [NOT] IN (value, ...) | field IS [NOT] NULL
//	                      | relevance('words') op number
//	                      | cond AND cond | cond OR cond | NOT cond | (cond)
//	  [ORDER BY field [ASC|DESC], ...] [LIMIT n] [;]
//
// op is =, !=, <>, <, <=, >, >=. Values are numbers, 'strings' ('' is a
// quote), TRUE, FALSE. Keywords are case-insensitive. Fields are the fact's
// id, text, confidence, source, tags (tag = 'x' tests membership), agent
// (who changed it last), added_by, seq (of its last change), added_seq,
// changes, and any other field its events gave it (severity, ...). LIKE
// uses % and _ and ignores case. relevance('words') is the share of the
// words found in the fact's text, 0..1. A missing field is NULL: it
// matches no comparison, as in SQL.

// MaxQueryBytes bounds a query's text, and MaxQueryDepth how deeply its
// conditions nest (each parenthesis and each NOT is a level): a query
// comes from whoever may read a chain (the tracer's QueryFacts), a crew
// file and a model's facts.query, and the parser and the evaluator
// recurse once per level, so a query of a few million parentheses took
// Go's stack past its limit, a fatal error that no recover catches (the
// whole process, the services sharing it included). Written queries nest
// a few levels and fit in a line.
const (
	MaxQueryBytes = 16 << 10
	MaxQueryDepth = 64
)

// QueryError is a query that does not parse or cannot run, with the
// position (1-based character) where the problem is.
type QueryError struct {
	Query string
	Pos   int
	Msg   string
}

// Error says where the problem is: "position 23: expected a value ...".
func (e *QueryError) Error() string { return fmt.Sprintf("position %d: %s", e.Pos, e.Msg) }

// Pointer renders the query with a caret under the problem:
//
//	SELECT * WHERE confidence >= AND source = 'x'
//	                             ^
func (e *QueryError) Pointer() string {
	line := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r == '\r' {
			return ' '
		}
		return r
	}, e.Query)
	return line + "\n" + strings.Repeat(" ", max(e.Pos-1, 0)) + "^"
}

// Query is a parsed fact-store query.
type Query struct {
	text   string
	fields []string // nil for *
	fpos   []int    // byte offsets of fields
	where  expr
	order  []orderKey
	limit  int // -1: none
}

type orderKey struct {
	operand operand
	desc    bool
}

// Columns returns the selected fields; nil for *.
func (q *Query) Columns() []string { return q.fields }

// String returns the query as it was given.
func (q *Query) String() string { return q.text }

// Token kinds.
type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tString
	tOp
	tLParen
	tRParen
	tComma
	tStar
	tSemicolon
)

type token struct {
	kind tokKind
	text string // as written (strings unquoted)
	num  float64
	pos  int // byte offset
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "the end of the query"
	case tString:
		return "'" + t.text + "'"
	}
	return strconv.Quote(t.text)
}

// Keywords.
var keywords = map[string]bool{
	"SELECT": true, "FROM": true, "WHERE": true, "AND": true, "OR": true, "NOT": true, "LIKE": true, "IN": true,
	"IS": true, "NULL": true, "ORDER": true, "BY": true, "ASC": true, "DESC": true, "LIMIT": true, "TRUE": true, "FALSE": true,
}

func lex(q string) ([]token, error) {
	var out []token
	i := 0
	for i < len(q) {
		r, size := utf8.DecodeRuneInString(q[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case r == '(':
			out = append(out, token{tLParen, "(", 0, i})
			i++
		case r == ')':
			out = append(out, token{tRParen, ")", 0, i})
			i++
		case r == ',':
			out = append(out, token{tComma, ",", 0, i})
			i++
		case r == '*':
			out = append(out, token{tStar, "*", 0, i})
			i++
		case r == ';':
			out = append(out, token{tSemicolon, ";", 0, i})
			i++
		case r == '=':
			out = append(out, token{tOp, "=", 0, i})
			i++
		case r == '!' || r == '<' || r == '>':
			op := string(r)
			if i+1 < len(q) && (q[i+1] == '=' || (r == '<' && q[i+1] == '>')) {
				op = q[i : i+2]
			}
			if op == "!" {
				return nil, errAt(q, i, "unexpected '!' (write != for not equal)")
			}
			out = append(out, token{tOp, op, 0, i})
			i += len(op)
		case r == '\'' || r == '"':
			s, n, ok := lexString(q[i:], byte(r))
			if !ok {
				return nil, errAt(q, i, "string is not closed: add a closing %c", r)
			}
			out = append(out, token{tString, s, 0, i})
			i += n
		case r >= '0' && r <= '9' || r == '.' || r == '-':
			j := i + 1
			for j < len(q) && (q[j] >= '0' && q[j] <= '9' || q[j] == '.' || q[j] == 'e' || q[j] == 'E' ||
				(q[j] == '-' || q[j] == '+') && (q[j-1] == 'e' || q[j-1] == 'E')) {
				j++
			}
			f, err := strconv.ParseFloat(q[i:j], 64)
			if err != nil || math.IsInf(f, 0) {
				return nil, errAt(q, i, "%q is not a number", q[i:j])
			}
			out = append(out, token{tNumber, q[i:j], f, i})
			i = j
		case r == '_' || unicode.IsLetter(r):
			j := i + size
			for j < len(q) {
				r2, s2 := utf8.DecodeRuneInString(q[j:])
				if r2 != '_' && r2 != '.' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				j += s2
			}
			out = append(out, token{tIdent, q[i:j], 0, i})
			i = j
		default:
			return nil, errAt(q, i, "unexpected character %q", r)
		}
	}
	return append(out, token{tEOF, "", 0, len(q)}), nil
}

// lexString reads a quoted string; a doubled quote stands for one.
func lexString(s string, quote byte) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] == quote {
			if i+1 < len(s) && s[i+1] == quote {
				b.WriteByte(quote)
				i++
				continue
			}
			return b.String(), i + 1, true
		}
		b.WriteByte(s[i])
	}
	return "", 0, false
}

func errAt(q string, byteOff int, format string, args ...any) *QueryError {
	return &QueryError{Query: q, Pos: utf8.RuneCountInString(q[:min(byteOff, len(q))]) + 1, Msg: fmt.Sprintf(format, args...)}
}

type parser struct {
	q    string
	toks []token
	i    int
	// depth is how many parentheses and NOTs enclose the condition being
	// read (MaxQueryDepth).
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) isKeyword(t token, kw string) bool {
	return t.kind == tIdent && strings.EqualFold(t.text, kw)
}

func (p *parser) acceptKeyword(kw string) bool {
	if p.isKeyword(p.peek(), kw) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expectKeyword(kw, what string) error {
	if p.acceptKeyword(kw) {
		return nil
	}
	return p.errorf(p.peek(), "expected %s, found %s", what, p.peek().describe())
}

func (p *parser) errorf(t token, format string, args ...any) *QueryError {
	return errAt(p.q, t.pos, format, args...)
}

// ParseQuery parses a fact-store query. Errors are *QueryError, naming the
// position of the problem.
func ParseQuery(q string) (*Query, error) {
	if len(q) > MaxQueryBytes {
		return nil, &QueryError{Query: q[:64] + "...", Pos: 1, Msg: fmt.Sprintf("the query is %d bytes long, more than the %d a query may be", len(q), MaxQueryBytes)}
	}
	toks, err := lex(q)
	if err != nil {
		return nil, err
	}
	p := &parser{q: q, toks: toks}
	query := &Query{text: q, limit: -1}
	if p.peek().kind == tEOF {
		return nil, p.errorf(p.peek(), "the query is empty: start with SELECT")
	}
	if err := p.expectKeyword("SELECT", "SELECT"); err != nil {
		return nil, err
	}
	if p.peek().kind == tStar {
		p.next()
	} else {
		for {
			t := p.next()
			if t.kind != tIdent || keywords[strings.ToUpper(t.text)] {
				return nil, p.errorf(t, "expected * or a field name after SELECT, found %s", t.describe())
			}
			query.fields = append(query.fields, strings.ToLower(t.text))
			query.fpos = append(query.fpos, t.pos)
			if p.peek().kind != tComma {
				break
			}
			p.next()
		}
	}
	if p.acceptKeyword("FROM") {
		t := p.next()
		if t.kind != tIdent || !strings.EqualFold(t.text, "facts") {
			return nil, p.errorf(t, "expected facts after FROM (the store has one table), found %s", t.describe())
		}
	}
	if p.acceptKeyword("WHERE") {
		e, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		query.where = e
	}
	if p.isKeyword(p.peek(), "ORDER") {
		p.next()
		if err := p.expectKeyword("BY", "BY after ORDER"); err != nil {
			return nil, err
		}
		for {
			o, err := p.operand()
			if err != nil {
				return nil, err
			}
			k := orderKey{operand: o}
			if p.acceptKeyword("DESC") {
				k.desc = true
			} else {
				p.acceptKeyword("ASC")
			}
			query.order = append(query.order, k)
			if p.peek().kind != tComma {
				break
			}
			p.next()
		}
	}
	if p.acceptKeyword("LIMIT") {
		t := p.next()
		if t.kind != tNumber || t.num < 0 || t.num != math.Trunc(t.num) || t.num > math.MaxInt32 {
			return nil, p.errorf(t, "LIMIT needs a whole number of rows, found %s", t.describe())
		}
		query.limit = int(t.num)
	}
	if p.peek().kind == tSemicolon {
		p.next()
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errorf(t, "unexpected %s: the query should end here (clauses go in the order WHERE, ORDER BY, LIMIT)", t.describe())
	}
	return query, nil
}

// Expressions.

type expr interface {
	eval(f *FactRecord) tri
}

// tri is SQL's three-valued logic: a comparison with NULL is unknown.
type tri int8

const (
	triFalse tri = iota
	triTrue
	triUnknown
)

func triOf(b bool) tri {
	if b {
		return triTrue
	}
	return triFalse
}

type andExpr struct{ l, r expr }
type orExpr struct{ l, r expr }
type notExpr struct{ e expr }

func (e andExpr) eval(f *FactRecord) tri {
	l := e.l.eval(f)
	if l == triFalse {
		return triFalse
	}
	r := e.r.eval(f)
	switch {
	case r == triFalse:
		return triFalse
	case l == triTrue && r == triTrue:
		return triTrue
	}
	return triUnknown
}

func (e orExpr) eval(f *FactRecord) tri {
	l := e.l.eval(f)
	if l == triTrue {
		return triTrue
	}
	r := e.r.eval(f)
	switch {
	case r == triTrue:
		return triTrue
	case l == triFalse && r == triFalse:
		return triFalse
	}
	return triUnknown
}

func (e notExpr) eval(f *FactRecord) tri {
	switch e.e.eval(f) {
	case triTrue:
		return triFalse
	case triFalse:
		return triTrue
	}
	return triUnknown
}

func (p *parser) orExpr() (expr, error) {
	l, err := p.andExpr()
	if err != nil {
		return nil, err
	}
	for p.acceptKeyword("OR") {
		r, err := p.andExpr()
		if err != nil {
			return nil, err
		}
		l = orExpr{l, r}
	}
	return l, nil
}

func (p *parser) andExpr() (expr, error) {
	l, err := p.notExpr()
	if err != nil {
		return nil, err
	}
	for p.acceptKeyword("AND") {
		r, err := p.notExpr()
		if err != nil {
			return nil, err
		}
		l = andExpr{l, r}
	}
	return l, nil
}

func (p *parser) notExpr() (expr, error) {
	if t := p.peek(); t.kind == tLParen || p.isKeyword(t, "NOT") {
		if p.depth >= MaxQueryDepth {
			return nil, p.errorf(t, "conditions nest more than %d deep (parentheses and NOT)", MaxQueryDepth)
		}
		p.depth++
		defer func() { p.depth-- }()
	}
	if p.acceptKeyword("NOT") {
		e, err := p.notExpr()
		if err != nil {
			return nil, err
		}
		return notExpr{e}, nil
	}
	if p.peek().kind == tLParen {
		open := p.next()
		e, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		if p.peek().kind != tRParen {
			return nil, p.errorf(p.peek(), "expected ) to close the ( at position %d, found %s", errAt(p.q, open.pos, "").Pos, p.peek().describe())
		}
		p.next()
		return e, nil
	}
	return p.predicate()
}

// operand is a field or relevance('words').
type operand struct {
	field string // lower-cased
	words *wordSet
	isRel bool
	pos   int
}

// fieldTypes are the core fields whose type is known, so comparing them
// with a value of another type is an error at parse time.
var fieldTypes = map[string]string{
	"id": "string", "text": "string", "source": "string", "agent": "string", "updated_by": "string", "added_by": "string",
	"confidence": "number", "seq": "number", "updated_seq": "number", "added_seq": "number", "changes": "number",
}

func (p *parser) operand() (operand, error) {
	t := p.next()
	if t.kind != tIdent || keywords[strings.ToUpper(t.text)] {
		if t.kind == tString || t.kind == tNumber {
			return operand{}, p.errorf(t, "expected a field name, found the value %s (write field = value)", t.describe())
		}
		return operand{}, p.errorf(t, "expected a field name, found %s", t.describe())
	}
	name := strings.ToLower(t.text)
	if p.peek().kind != tLParen {
		return operand{field: name, pos: t.pos}, nil
	}
	if name != "relevance" {
		return operand{}, p.errorf(t, "unknown function %s (the one function is relevance('words'))", t.text)
	}
	p.next()
	arg := p.next()
	if arg.kind != tString {
		return operand{}, p.errorf(arg, "relevance needs a quoted string of words, found %s", arg.describe())
	}
	if cl := p.next(); cl.kind != tRParen {
		return operand{}, p.errorf(cl, "expected ) after relevance's argument, found %s", cl.describe())
	}
	words := splitWords(arg.text)
	if len(words) == 0 {
		return operand{}, p.errorf(arg, "relevance needs at least one word")
	}
	return operand{words: newWordSet(words), isRel: true, pos: t.pos}, nil
}

func (o operand) name() string {
	if o.isRel {
		return "relevance(...)"
	}
	return o.field
}

func (o operand) typ() string {
	if o.isRel {
		return "number"
	}
	return fieldTypes[o.field]
}

// literal is a value in a query.
type literal struct {
	v   any // float64, string, bool, nil
	tok token
}

func (p *parser) literal(after string) (literal, error) {
	t := p.next()
	switch {
	case t.kind == tNumber:
		return literal{t.num, t}, nil
	case t.kind == tString:
		return literal{t.text, t}, nil
	case p.isKeyword(t, "TRUE"):
		return literal{true, t}, nil
	case p.isKeyword(t, "FALSE"):
		return literal{false, t}, nil
	case p.isKeyword(t, "NULL"):
		return literal{nil, t}, nil
	case t.kind == tIdent && !keywords[strings.ToUpper(t.text)]:
		return literal{}, p.errorf(t, "expected a value after %s, found %s (quote text: '%s')", after, t.describe(), t.text)
	}
	return literal{}, p.errorf(t, "expected a value after %s, found %s", after, t.describe())
}

func (p *parser) predicate() (expr, error) {
	o, err := p.operand()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	switch {
	case t.kind == tOp:
		p.next()
		lit, err := p.literal(t.text)
		if err != nil {
			return nil, err
		}
		if lit.v == nil {
			return nil, p.errorf(lit.tok, "a comparison with NULL is never true: write %s IS NULL or IS NOT NULL", o.name())
		}
		if err := p.checkType(o, lit); err != nil {
			return nil, err
		}
		op := t.text
		if op == "<>" {
			op = "!="
		}
		if _, isBool := lit.v.(bool); isBool && op != "=" && op != "!=" {
			return nil, p.errorf(t, "%s cannot order TRUE and FALSE: use = or !=", op)
		}
		return cmpExpr{o, op, lit.v}, nil
	case p.isKeyword(t, "IS"):
		p.next()
		neg := p.acceptKeyword("NOT")
		if err := p.expectKeyword("NULL", "NULL after IS"); err != nil {
			return nil, err
		}
		return nullExpr{o, neg}, nil
	}
	neg := false
	if p.isKeyword(t, "NOT") {
		p.next()
		neg = true
		t = p.peek()
	}
	switch {
	case p.isKeyword(t, "LIKE"):
		p.next()
		pat := p.next()
		if pat.kind != tString {
			return nil, p.errorf(pat, "LIKE needs a quoted pattern such as '%%SQL%%', found %s", pat.describe())
		}
		if o.typ() == "number" {
			return nil, p.errorf(t, "%s is a number: LIKE matches text", o.name())
		}
		var e expr = likeExpr{o, compileLike(pat.text)}
		if neg {
			e = notExpr{e}
		}
		return e, nil
	case p.isKeyword(t, "IN"):
		p.next()
		if open := p.next(); open.kind != tLParen {
			return nil, p.errorf(open, "expected ( after IN, found %s", open.describe())
		}
		var vals []any
		for {
			lit, err := p.literal("IN (")
			if err != nil {
				return nil, err
			}
			if err := p.checkType(o, lit); err != nil {
				return nil, err
			}
			vals = append(vals, lit.v)
			sep := p.next()
			if sep.kind == tRParen {
				break
			}
			if sep.kind != tComma {
				return nil, p.errorf(sep, "expected , or ) in the IN list, found %s", sep.describe())
			}
		}
		var e expr = inExpr{o, vals}
		if neg {
			e = notExpr{e}
		}
		return e, nil
	}
	if neg {
		return nil, p.errorf(t, "expected LIKE or IN after NOT, found %s", t.describe())
	}
	return nil, p.errorf(t, "expected a comparison (=, !=, <, <=, >, >=, LIKE, IN, IS NULL) after %s, found %s", o.name(), t.describe())
}

func (p *parser) checkType(o operand, lit literal) error {
	want := o.typ()
	if want == "" || lit.v == nil {
		return nil
	}
	got := "string"
	switch lit.v.(type) {
	case float64:
		got = "number"
	case bool:
		got = "boolean"
	}
	if got != want {
		return p.errorf(lit.tok, "%s is a %s; compare it with a %s, not %s", o.name(), want, want, lit.tok.describe())
	}
	return nil
}

type cmpExpr struct {
	o  operand
	op string
	v  any
}

type nullExpr struct {
	o   operand
	neg bool
}

type likeExpr struct {
	o   operand
	pat *likePattern
}

type inExpr struct {
	o    operand
	vals []any
}

func (e cmpExpr) eval(f *FactRecord) tri {
	v := e.o.value(f)
	if list, ok := v.([]any); ok {
		// A list field matches = when it holds the value, != when it does not.
		found := false
		for _, x := range list {
			if compare(x, e.v) == 0 {
				found = true
				break
			}
		}
		switch e.op {
		case "=":
			return triOf(found)
		case "!=":
			return triOf(!found)
		}
		return triUnknown
	}
	c := compare(v, e.v)
	if c == incomparable {
		return triUnknown
	}
	switch e.op {
	case "=":
		return triOf(c == 0)
	case "!=":
		return triOf(c != 0)
	case "<":
		return triOf(c < 0)
	case "<=":
		return triOf(c <= 0)
	case ">":
		return triOf(c > 0)
	case ">=":
		return triOf(c >= 0)
	}
	return triUnknown
}

func (e nullExpr) eval(f *FactRecord) tri {
	v := e.o.value(f)
	isNull := v == nil
	if l, ok := v.([]any); ok && len(l) == 0 {
		isNull = true
	}
	return triOf(isNull != e.neg)
}

func (e likeExpr) eval(f *FactRecord) tri {
	v := e.o.value(f)
	if list, ok := v.([]any); ok {
		for _, x := range list {
			if s, ok := x.(string); ok && e.pat.match(s) {
				return triTrue
			}
		}
		return triFalse
	}
	s, ok := v.(string)
	if !ok {
		return triUnknown
	}
	return triOf(e.pat.match(s))
}

func (e inExpr) eval(f *FactRecord) tri {
	v := e.o.value(f)
	items := []any{v}
	if list, ok := v.([]any); ok {
		items = list
	} else if v == nil {
		return triUnknown
	}
	for _, x := range items {
		for _, want := range e.vals {
			if compare(x, want) == 0 {
				return triTrue
			}
		}
	}
	return triFalse
}

// incomparable is compare's answer for values of different types.
const incomparable = math.MinInt

func compare(a, b any) int {
	switch x := a.(type) {
	case float64:
		if y, ok := b.(float64); ok {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y)
		}
	case bool:
		if y, ok := b.(bool); ok {
			if x == y {
				return 0
			}
			if !x {
				return -1
			}
			return 1
		}
	}
	return incomparable
}

// like matches SQL LIKE patterns (% any run, _ one character), ignoring
// case.
func like(s, pat string) bool { return compileLike(pat).match(s) }

// likePattern is a LIKE pattern compiled for matching in time
// proportional to the text times the pattern's length over 64: the
// positions of the pattern a prefix of the text can reach are a bit set
// (bit j: the pattern's first j runes match), advanced a word at a time
// for each rune of the text. A pattern is matched against every fact's
// text (8 KiB each) and comes from any reader of a chain or a crew's
// model (facts.query): the set of booleans made afresh for each rune of
// the text before session 16 cost a 2000-rune pattern 140 ms a fact.
type likePattern struct {
	n     int               // the pattern's runes, runs of % counted once
	words int               // words of a bit set of n+1 bits
	pct   []uint64          // bits j where rune j is %
	any   []uint64          // bits j where rune j is _
	runes map[rune][]uint64 // bits j where rune j is that (lower-case) rune
}

func compileLike(pat string) *likePattern {
	var pr []rune
	for _, r := range strings.ToLower(pat) {
		if r == '%' && len(pr) > 0 && pr[len(pr)-1] == '%' {
			continue // %% matches what % matches
		}
		pr = append(pr, r)
	}
	w := (len(pr) + 1 + 63) / 64
	lp := &likePattern{n: len(pr), words: w, pct: make([]uint64, w), any: make([]uint64, w), runes: map[rune][]uint64{}}
	for j, r := range pr {
		bit, word := uint64(1)<<(j%64), j/64
		switch r {
		case '%':
			lp.pct[word] |= bit
		case '_':
			lp.any[word] |= bit
		default:
			m := lp.runes[r]
			if m == nil {
				m = make([]uint64, w)
				lp.runes[r] = m
			}
			m[word] |= bit
		}
	}
	return lp
}

// match reports whether the whole of s matches the pattern. It changes
// nothing of lp: a query may be run by several goroutines.
func (lp *likePattern) match(s string) bool {
	var small [8]uint64 // most patterns are shorter than 255 runes
	var cur, next []uint64
	if lp.words <= 4 {
		cur, next = small[:lp.words], small[4:4+lp.words]
	} else {
		cur, next = make([]uint64, lp.words), make([]uint64, lp.words)
	}
	cur[0] = 1
	lp.closePercent(cur)
	for _, c := range strings.ToLower(s) {
		lit := lp.runes[c] // nil: no rune of the pattern is c
		var carry, live uint64
		for i := range cur {
			// A rune of the pattern that is c or _ moves a reached
			// position one on; a % stays where it is, taking c.
			moved := cur[i] & (lp.any[i] | wordOf(lit, i))
			next[i] = moved<<1 | carry | cur[i]&lp.pct[i]
			carry = moved >> 63
			live |= next[i]
		}
		if live == 0 {
			return false
		}
		lp.closePercent(next)
		cur, next = next, cur
	}
	return cur[lp.n/64]&(1<<(lp.n%64)) != 0
}

// closePercent adds to set the position after each reached %: a % may
// match nothing (runs of % are one, so one step is enough).
func (lp *likePattern) closePercent(set []uint64) {
	var carry uint64
	for i := range set {
		p := set[i] & lp.pct[i]
		set[i] |= p<<1 | carry
		carry = p >> 63
	}
}

func wordOf(m []uint64, i int) uint64 {
	if m == nil {
		return 0
	}
	return m[i]
}

// value resolves an operand on a fact: float64, string, bool, []any or nil.
func (o operand) value(f *FactRecord) any {
	if o.isRel {
		return relevance(f.Text, o.words)
	}
	return FactField(f, o.field)
}

// FactField returns a fact's field as a query sees it: float64, string,
// bool, []any, or nil when the fact has no such field.
func FactField(f *FactRecord, field string) any {
	switch field {
	case "id":
		return f.ID
	case "text":
		return f.Text
	case "confidence":
		if f.Confidence == nil {
			return nil
		}
		return *f.Confidence
	case "source":
		return f.Source
	case "tags", "tag":
		out := make([]any, len(f.Tags))
		for i, t := range f.Tags {
			out[i] = t
		}
		return out
	case "agent", "updated_by":
		return f.UpdatedBy
	case "added_by":
		return f.AddedBy
	case "seq", "updated_seq":
		return float64(f.UpdatedSeq)
	case "added_seq":
		return float64(f.AddedSeq)
	case "changes":
		return float64(f.Changes)
	}
	v, ok := f.Fields[field]
	if !ok {
		return nil
	}
	switch x := v.(type) {
	case float64, string, bool, []any, nil:
		return x
	}
	if n, ok := numberOf(v); ok {
		return n
	}
	return nil // objects do not compare
}

func splitWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// wordSet is relevance's words: each word once, with how often the query
// names it.
type wordSet struct {
	index map[string]int // word -> its place in count
	count []int
	total int // the words, repeats included
}

func newWordSet(words []string) *wordSet {
	ws := &wordSet{index: map[string]int{}, total: len(words)}
	for _, w := range words {
		i, ok := ws.index[w]
		if !ok {
			i = len(ws.count)
			ws.index[w] = i
			ws.count = append(ws.count, 0)
		}
		ws.count[i]++
	}
	return ws
}

// relevance is the share of the words that occur in text, 0..1. The
// text's words are each looked up once in the query's: before session 16
// every word of the query was compared with every word of the text.
func relevance(text string, ws *wordSet) float64 {
	seen := make([]bool, len(ws.count))
	found := 0
	text = strings.ToLower(text)
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j := i + size
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if !isWordRune(r) {
				break
			}
			j += size
		}
		if k, ok := ws.index[text[i:j]]; ok && !seen[k] {
			seen[k] = true
			found += ws.count[k]
		}
		i = j
	}
	return float64(found) / float64(ws.total)
}

// isWordRune says r is part of a word (splitWords).
func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// builtinFields are the fields every fact has.
var builtinFields = []string{"id", "text", "confidence", "source", "tags", "tag", "agent", "updated_by", "added_by", "seq", "updated_seq", "added_seq", "changes"}

// Run returns the facts that match, ordered and limited. A field that no
// fact has is an error naming the fields there are, since a misspelt field
// would otherwise match nothing silently.
func (q *Query) Run(facts []*FactRecord) ([]*FactRecord, error) {
	return q.RunContext(context.Background(), facts)
}

// queryCheckEvery is how many facts a query evaluates (or computes the
// sort keys of) between two looks at its context.
const queryCheckEvery = 256

// RunContext is Run, stopped when ctx ends (a reader that went away): it
// looks at ctx every queryCheckEvery facts filtered and every
// queryCheckEvery rows whose sort keys it computes (the costly parts: a
// condition or key may walk a fact's text), and returns ctx's error.
func (q *Query) RunContext(ctx context.Context, facts []*FactRecord) ([]*FactRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(facts) > 0 {
		known := map[string]bool{}
		for _, f := range builtinFields {
			known[f] = true
		}
		for _, f := range facts {
			for k := range f.Fields {
				known[k] = true
			}
		}
		for _, u := range q.usedFields() {
			if !known[u.field] {
				var names []string
				for k := range known {
					if k != "tag" && k != "updated_by" && k != "updated_seq" {
						names = append(names, k)
					}
				}
				sort.Strings(names)
				hint := ""
				if s := closest(u.field, names); s != "" {
					hint = fmt.Sprintf("; did you mean %s?", s)
				}
				return nil, errAt(q.text, u.pos, "no fact has a field %s%s (fields: %s)", u.field, hint, strings.Join(names, ", "))
			}
		}
	}
	out := make([]*FactRecord, 0, len(facts))
	for i, f := range facts {
		if i%queryCheckEvery == queryCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if q.where == nil || q.where.eval(f) == triTrue {
			out = append(out, f)
		}
	}
	if len(q.order) > 0 {
		// Each row's keys once: a key may cost a walk of the fact's text
		// (relevance), and a sort compares a row about log n times.
		rows := orderedRows{rows: out, keys: make([][]any, len(out)), order: q.order}
		for i, f := range out {
			if i%queryCheckEvery == queryCheckEvery-1 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			rows.keys[i] = make([]any, len(q.order))
			for k, o := range q.order {
				rows.keys[i][k] = o.operand.value(f)
			}
		}
		sort.Stable(rows)
	}
	if q.limit >= 0 && len(out) > q.limit {
		out = out[:q.limit]
	}
	return out, nil
}

type usedField struct {
	field string
	pos   int
}

// orderedRows sorts rows by their keys (one per ORDER BY term, made
// once): NULLs last whatever the direction, values of different kinds by
// their text.
type orderedRows struct {
	rows  []*FactRecord
	keys  [][]any
	order []orderKey
}

func (r orderedRows) Len() int { return len(r.rows) }

func (r orderedRows) Swap(i, j int) {
	r.rows[i], r.rows[j] = r.rows[j], r.rows[i]
	r.keys[i], r.keys[j] = r.keys[j], r.keys[i]
}

func (r orderedRows) Less(i, j int) bool {
	for n, k := range r.order {
		a, b := r.keys[i][n], r.keys[j][n]
		// NULLs last, whatever the direction.
		if a == nil || b == nil {
			if (a == nil) != (b == nil) {
				return b == nil
			}
			continue
		}
		c := compare(a, b)
		if c == incomparable {
			c = strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
		}
		if c != 0 {
			if k.desc {
				return c > 0
			}
			return c < 0
		}
	}
	return false
}

// usedFields lists the fields the query names, with their positions.
func (q *Query) usedFields() []usedField {
	var out []usedField
	var walk func(e expr)
	addOp := func(o operand) {
		if !o.isRel {
			out = append(out, usedField{o.field, o.pos})
		}
	}
	walk = func(e expr) {
		switch x := e.(type) {
		case andExpr:
			walk(x.l)
			walk(x.r)
		case orExpr:
			walk(x.l)
			walk(x.r)
		case notExpr:
			walk(x.e)
		case cmpExpr:
			addOp(x.o)
		case nullExpr:
			addOp(x.o)
		case likeExpr:
			addOp(x.o)
		case inExpr:
			addOp(x.o)
		}
	}
	for i, f := range q.fields {
		out = append(out, usedField{f, q.fpos[i]})
	}
	if q.where != nil {
		walk(q.where)
	}
	for _, k := range q.order {
		addOp(k.operand)
	}
	return out
}

// closest returns the name within two edits of s, if there is one.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int { return text.EditDistance(a, b) }
