package analysis_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// store is a small fact store: the spec's security review.
func store(t *testing.T) []*analysis.FactRecord {
	t.Helper()
	ev := func(seq uint64, typ, agent string, data map[string]any) lctl.Event {
		return lctl.Event{Seq: seq, Type: typ, Agent: agent, Data: data}
	}
	return analysis.FactStore([]lctl.Event{
		ev(1, "fact_added", "code-analyzer", map[string]any{"id": "F1", "text": "SQL query constructed from user input", "confidence": 0.85, "source": "static-analysis", "tags": []any{"sql", "critical"}}),
		ev(2, "fact_added", "code-analyzer", map[string]any{"id": "F2", "text": "User input not sanitized", "confidence": 0.9, "source": "static-analysis"}),
		ev(3, "fact_added", "reviewer", map[string]any{"id": "F10", "text": "Login form reachable", "confidence": 0.7, "source": "reviewer", "severity": "high"}),
		ev(4, "fact_modified", "reviewer", map[string]any{"id": "F1", "text": "CONFIRMED: SQL injection", "confidence": 0.95, "reason": "verified"}),
		ev(5, "fact_added", "reviewer", map[string]any{"id": "F4", "text": "it's weak", "source": "reviewer", "severity": "critical", "tag": "crypto"}),
	}, 0)
}

func ids(facts []*analysis.FactRecord) string {
	var out []string
	for _, f := range facts {
		out = append(out, f.ID)
	}
	return strings.Join(out, ",")
}

func TestQueries(t *testing.T) {
	facts := store(t)
	tests := []struct{ q, want string }{
		{"SELECT *", "F1,F2,F10,F4"},
		{"select * from facts;", "F1,F2,F10,F4"},
		{"SELECT * WHERE confidence >= 0.8", "F1,F2"},
		{"SELECT * WHERE confidence >= 0.8 ORDER BY confidence DESC", "F1,F2"},
		{"SELECT * WHERE confidence >= 0.8 ORDER BY confidence ASC", "F2,F1"},
		{"SELECT * ORDER BY confidence DESC", "F1,F2,F10,F4"}, // NULL last
		{"SELECT * ORDER BY confidence", "F10,F2,F1,F4"},
		{"SELECT * WHERE source = 'static-analysis' AND tag = 'critical'", "F1"},
		{"SELECT * WHERE tag = 'crypto'", "F4"},
		{"SELECT * WHERE tag != 'critical'", "F2,F10,F4"},
		{"SELECT * WHERE text LIKE '%sql%'", "F1"},
		{"SELECT * WHERE text NOT LIKE '%SQL%'", "F2,F10,F4"},
		{"SELECT * WHERE text LIKE 'it''s%'", "F4"},
		{"SELECT * WHERE id LIKE 'F_'", "F1,F2,F4"},
		{"SELECT * WHERE severity IN ('high', 'critical') ORDER BY id", "F10,F4"},
		{"SELECT * WHERE severity NOT IN ('high')", "F4"},
		{"SELECT * WHERE severity IS NULL", "F1,F2"},
		{"SELECT * WHERE confidence IS NOT NULL AND NOT (source = 'reviewer')", "F1,F2"},
		{"SELECT * WHERE confidence < 0.8 OR severity = 'critical'", "F10,F4"},
		{"SELECT * WHERE confidence > 0.5 LIMIT 2", "F1,F2"},
		{"SELECT * LIMIT 0", ""},
		{"SELECT * WHERE relevance('SQL injection') > 0.5", "F1"},
		{"SELECT * WHERE agent = 'reviewer' AND changes = 2", "F1"},
		{"SELECT * WHERE added_by = 'code-analyzer' AND seq > 3", "F1"},
		{"SELECT * WHERE confidence <> 0.9", "F1,F10"},
		{"SELECT id, text WHERE reason = 'verified'", "F1"},
		{"SELECT * ORDER BY source DESC, id", "F1,F2,F10,F4"},
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			q, err := analysis.ParseQuery(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := q.Run(facts)
			if err != nil {
				t.Fatal(err)
			}
			if ids(got) != tc.want {
				t.Errorf("got %s, want %s", ids(got), tc.want)
			}
		})
	}
}

// TestQueryErrors pins the message and position of each kind of mistake.
func TestQueryErrors(t *testing.T) {
	tests := []struct {
		q   string
		pos int
		msg string
	}{
		{"", 1, "the query is empty"},
		{"FIND *", 1, `expected SELECT, found "FIND"`},
		{"SELECT", 7, "expected * or a field name after SELECT, found the end of the query"},
		{"SELECT * WHERE confidence >= AND source = 'x'", 30, `expected a value after >=, found "AND"`},
		{"SELECT * WHERE confidence >= 0.8 AND", 37, "expected a field name, found the end of the query"},
		{"SELECT * WHERE source = x", 25, "quote text: 'x'"},
		{"SELECT * WHERE source = 'x", 25, "string is not closed"},
		{"SELECT * WHERE confidence >= 'high'", 30, "confidence is a number; compare it with a number, not 'high'"},
		{"SELECT * WHERE text > 3", 23, "text is a string"},
		{"SELECT * WHERE confidence LIKE '%1'", 27, "confidence is a number: LIKE matches text"},
		{"SELECT * WHERE source = NULL", 25, "write source IS NULL or IS NOT NULL"},
		{"SELECT * WHERE (confidence > 0.5", 33, "expected ) to close the ( at position 16"},
		{"SELECT * WHERE confidence ! 0.5", 27, "write != for not equal"},
		{"SELECT * WHERE confidence", 26, "expected a comparison"},
		{"SELECT * WHERE source NOT = 'x'", 27, "expected LIKE or IN after NOT"},
		{"SELECT * WHERE 'x' = source", 16, "expected a field name, found the value 'x'"},
		{"SELECT * WHERE magic('x') > 1", 16, "unknown function magic"},
		{"SELECT * WHERE relevance(3) > 1", 26, "relevance needs a quoted string"},
		{"SELECT * WHERE severity IN ('a' 'b')", 33, "expected , or ) in the IN list"},
		{"SELECT * FROM agents", 15, "expected facts after FROM"},
		{"SELECT * LIMIT 2.5", 16, "LIMIT needs a whole number"},
		{"SELECT * LIMIT 5 WHERE x = 1", 18, "the query should end here"},
		{"SELECT * WHERE flag = TRUE AND flag > FALSE", 37, "> cannot order TRUE and FALSE"},
		{"SELECT * ORDER confidence", 16, "expected BY after ORDER"},
		{"SELECT * WHERE x = 1 # comment", 22, "unexpected character '#'"},
		{"SELECT * WHERE é = 1 AND confidence >= 0.8 AND #", 48, "unexpected character"}, // positions count characters, not bytes
	}
	for _, tc := range tests {
		t.Run(tc.q, func(t *testing.T) {
			_, err := analysis.ParseQuery(tc.q)
			var qe *analysis.QueryError
			if !errors.As(err, &qe) {
				t.Fatalf("err = %v, want a *QueryError", err)
			}
			if qe.Pos != tc.pos || !strings.Contains(qe.Msg, tc.msg) {
				t.Fatalf("got position %d %q, want %d %q\n%s", qe.Pos, qe.Msg, tc.pos, tc.msg, qe.Pointer())
			}
			if !strings.HasPrefix(qe.Error(), "position ") {
				t.Errorf("Error() = %q", qe.Error())
			}
		})
	}
}

// A query is bounded in length and in nesting: the parser and the
// evaluator recurse once per parenthesis or NOT, and a query comes from
// any reader of a chain (the tracer's QueryFacts). The deepest allowed
// query parses and runs; one level more is refused where it goes too
// deep; a query past the length is refused before it is read.
func TestQueryBounds(t *testing.T) {
	n := analysis.MaxQueryDepth
	for _, q := range []string{
		"SELECT * WHERE " + strings.Repeat("(", n) + "id = 'a'" + strings.Repeat(")", n),
		"SELECT * WHERE " + strings.Repeat("NOT ", n-1) + "(id != 'a')",
	} {
		parsed, err := analysis.ParseQuery(q)
		if err != nil {
			t.Fatalf("%d levels: %v", n, err)
		}
		rows, err := parsed.Run([]*analysis.FactRecord{{ID: "a", Text: "x"}, {ID: "b", Text: "y"}})
		if err != nil || len(rows) != 1 || rows[0].ID != "a" {
			t.Fatalf("%d levels: rows %v, %v", n, rows, err)
		}
	}
	for _, tc := range []struct {
		q   string
		pos int
		msg string
	}{
		{"SELECT * WHERE " + strings.Repeat("(", n+1) + "id = 'a'" + strings.Repeat(")", n+1), 16 + n, "nest more than 64 deep"},
		{"SELECT * WHERE " + strings.Repeat("NOT ", n) + "(id = 'a')", 16 + 4*n, "nest more than 64 deep"},
		{"SELECT * WHERE " + strings.Repeat("(", analysis.MaxQueryBytes-20), 16 + n, "nest more than 64 deep"},
		{"SELECT * WHERE id IN (" + strings.Repeat("'a',", analysis.MaxQueryBytes/4) + "'b')", 1, "more than the 16384 a query may be"},
	} {
		_, err := analysis.ParseQuery(tc.q)
		var qe *analysis.QueryError
		if !errors.As(err, &qe) || qe.Pos != tc.pos || !strings.Contains(qe.Msg, tc.msg) || len(qe.Query) > analysis.MaxQueryBytes {
			t.Fatalf("a %d-byte query: %v, want position %d %q", len(tc.q), err, tc.pos, tc.msg)
		}
	}
}

func TestQueryUnknownField(t *testing.T) {
	q, err := analysis.ParseQuery("SELECT * WHERE confidnce >= 0.8")
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Run(store(t))
	var qe *analysis.QueryError
	if !errors.As(err, &qe) || qe.Pos != 16 || !strings.Contains(qe.Msg, "did you mean confidence?") || !strings.Contains(qe.Msg, "severity") {
		t.Fatalf("err = %v", err)
	}
	// An empty store has no fields to check against: no error, no rows.
	rows, err := q.Run(nil)
	if err != nil || len(rows) != 0 {
		t.Fatalf("empty store: %v %v", rows, err)
	}
	if p := qe.Pointer(); p != "SELECT * WHERE confidnce >= 0.8\n               ^" {
		t.Errorf("pointer:\n%s", p)
	}
}

// FuzzParseQuery: the parser never panics, and every error has a position
// inside the query (or just after it).
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"SELECT * WHERE confidence >= 0.8 AND source = 'x' AND tag = 'critical' AND text LIKE '%SQL%' ORDER BY confidence DESC LIMIT 10",
		"SELECT id WHERE NOT (a IN (1, 'b', TRUE) OR b IS NOT NULL)", "SELECT * WHERE relevance('a b') > 0.5", "'", "SELECT * WHERE x = -1e9"} {
		f.Add(s)
	}
	facts := []*analysis.FactRecord{{ID: "F1", Text: "a b", Fields: map[string]any{"a": 1.0, "b": "x", "x": []any{"y"}}, Tags: []string{"t"}}}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := analysis.ParseQuery(s)
		if err != nil {
			var qe *analysis.QueryError
			if !errors.As(err, &qe) || qe.Pos < 1 || qe.Pos > len([]rune(s))+1 {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		_, _ = q.Run(facts)
	})
}

// LIKE's work does not grow with allocations per rune of the text: a
// pattern is compared with every fact's text (up to 8 KiB each), and the
// query comes from any reader of a chain or from a crew's model
// (facts.query, 2000 characters). Before session 16 a 2000-rune pattern
// made a fresh set of 2001 booleans for each rune of each text (8193
// allocations and 140 ms for one 8 KiB fact); now a match allocates
// nothing for a pattern under 255 runes and two word sets above.
func TestQueryLikeAllocatesNothingPerRune(t *testing.T) {
	facts := []*analysis.FactRecord{{ID: "a", Text: strings.Repeat("a", 8<<10)}, {ID: "b", Text: strings.Repeat("ab", 4<<10)}}
	for _, pat := range []string{"%a%b", strings.Repeat("%a", 1000) + "b"} {
		q, err := analysis.ParseQuery("SELECT id WHERE text LIKE '" + pat + "'")
		if err != nil {
			t.Fatal(err)
		}
		var rows []*analysis.FactRecord
		allocs := testing.AllocsPerRun(3, func() {
			rows, err = q.Run(facts)
		})
		if err != nil || len(rows) != 1 || rows[0].ID != "b" {
			t.Fatalf("pattern of %d: rows %v, %v", len(pat), rows, err)
		}
		if allocs > 20 {
			t.Fatalf("pattern of %d: %v allocations for two facts of 8 KiB", len(pat), allocs)
		}
	}
}

// BenchmarkQueryLike2000: a crew model's longest facts.query LIKE (2000
// characters) over a fact of 8 KiB that it nearly matches.
func BenchmarkQueryLike2000(b *testing.B) {
	facts := []*analysis.FactRecord{{ID: "a", Text: strings.Repeat("a", 8<<10)}}
	q, err := analysis.ParseQuery("SELECT id WHERE text LIKE '" + strings.Repeat("%a", 990) + "b'")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rows, err := q.Run(facts); err != nil || len(rows) != 0 {
			b.Fatal(rows, err)
		}
	}
}

// ORDER BY computes each row's keys once, and relevance looks each word
// up in the set of the text's words: a crew model's facts.query (2000
// characters, ORDER BY relevance of 300 words) over 100 facts of 8 KiB
// took 1.1 s before session 16, the text split again and every query word
// compared with every text word at each of the sort's comparisons (the
// allocations of the splits show it: 3,535 for 100 rows, 2.4 s under
// this test); now each row's text is read once.
func TestQueryOrderComputesKeysOnce(t *testing.T) {
	var text, words []string
	for i := range 1200 {
		text = append(text, fmt.Sprintf("w%d", i))
	}
	for i := range 300 {
		words = append(words, fmt.Sprintf("x%d", i))
	}
	words[0] = "w7"
	facts := make([]*analysis.FactRecord, 100)
	for i := range facts {
		facts[i] = &analysis.FactRecord{ID: fmt.Sprint(i), Text: strings.Join(text[:(i%7+1)*100], " ")}
	}
	q, err := analysis.ParseQuery("SELECT id ORDER BY relevance('" + strings.Join(words, " ") + "') DESC, id LIMIT 5")
	if err != nil {
		t.Fatal(err)
	}
	var rows []*analysis.FactRecord
	allocs := testing.AllocsPerRun(2, func() {
		rows, err = q.Run(facts)
	})
	if err != nil || len(rows) != 5 || rows[0].ID != "0" || rows[1].ID != "1" {
		t.Fatalf("rows %v, %v", rows, err)
	}
	if allocs > 10*float64(len(facts)) {
		t.Fatalf("%v allocations to order %d facts", allocs, len(facts))
	}
}
