package debugger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/debugger"
)

// xss is tool output that would run if any layer rendered it as HTML.
const xss = `<script>alert("pwned")</script><img src=x onerror=alert(1)>`

// runChain is an XCT-shaped run: an allowed step whose tool output carries
// markup, an approval-gated step, a denied step, an in-doubt step, an event
// of a type nobody knows, and the run's end. Agents change between steps.
func runChain(id string) []lctl.Event {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var events []lctl.Event
	add := func(typ, agent string, data map[string]any) {
		events = append(events, lctl.Event{ChainID: id, Seq: uint64(len(events) + 1), Type: typ, Agent: agent,
			Timestamp: lctl.FormatTime(t0.Add(time.Duration(len(events)) * time.Second)), Data: data})
	}
	verdict := func(step float64, decision, rule string) {
		add("verdict", "validator", map[string]any{"step": step, "step_id": fmt.Sprint("s", step), "tool": "fs.write", "decision": decision,
			"reasons": []any{map[string]any{"rule_id": rule, "message": "because"}}, "policy_version": "p1"})
	}
	add("run_started", "orchestrator", map[string]any{"run_id": id, "goal": "fix the bug", "model": "m", "principal": "alice"})
	// 2..5: step 1, allowed, tool output with markup.
	add("step_start", "planner", map[string]any{"step": 1.0, "step_id": "s1", "intent": "read the code", "tool": "fs.read", "arguments": map[string]any{"path": "a.go"}})
	verdict(1, "allow", "allow-read")
	add("tool_call", "executor", map[string]any{"step": 1.0, "step_id": "s1", "tool": "fs.read", "output": xss, "duration_ms": 5.0, "status": "success"})
	add("step_end", "planner", map[string]any{"step": 1.0, "step_id": "s1", "outcome": "success", "duration_ms": 100.0, "tokens": map[string]any{"input": 10.0, "output": 5.0}})
	// 6..12: step 2, gated by an approval, approved, done.
	add("step_start", "coder", map[string]any{"step": 2.0, "step_id": "s2", "intent": "write the fix", "tool": "fs.write", "arguments": map[string]any{"path": "a.go"}})
	verdict(2, "needs_approval", "approve-writes")
	add("approval_requested", "orchestrator", map[string]any{"step": 2.0, "step_id": "s2", "tool": "fs.write", "requested_by": "alice"})
	add("approval_decided", "bob", map[string]any{"step": 2.0, "step_id": "s2", "decision": "approved", "by": "bob", "reason": "ok"})
	verdict(2, "allow", "approved")
	add("tool_call", "executor", map[string]any{"step": 2.0, "step_id": "s2", "tool": "fs.write", "output": "wrote", "duration_ms": 7.0, "status": "success"})
	add("step_end", "coder", map[string]any{"step": 2.0, "step_id": "s2", "outcome": "success", "duration_ms": 300.0})
	// 13..16: step 3, denied.
	add("step_start", "coder", map[string]any{"step": 3.0, "step_id": "s3", "intent": "delete everything", "tool": "fs.write"})
	verdict(3, "deny", "no-deletes")
	add("error", "validator", map[string]any{"step": 3.0, "step_id": "s3", "code": "POLICY_DENIED", "message": "denied"})
	add("step_end", "coder", map[string]any{"step": 3.0, "step_id": "s3", "outcome": "denied"})
	// 17..19: step 4, in doubt (no step_end).
	add("step_start", "reviewer", map[string]any{"step": 4.0, "step_id": "s4", "intent": "run the tests", "tool": "shell"})
	verdict(4, "allow", "allow-tests")
	add("error", "executor", map[string]any{"step": 4.0, "step_id": "s4", "code": "IN_DOUBT", "message": "no result"})
	// 20: unknown type; 21: the end.
	add("custom_probe", "sidecar", map[string]any{"payload": map[string]any{"x": 1.0}, "note": xss})
	add("run_finished", "orchestrator", map[string]any{"status": "failed", "message": "in doubt"})
	prev := ""
	for i := range events {
		if err := events[i].Seal(prev); err != nil {
			panic(err)
		}
		prev = events[i].Hash
	}
	return events
}

func writeChain(t *testing.T, dir, name, id string, events []lctl.Event) string {
	t.Helper()
	var buf bytes.Buffer
	if err := lctl.NewFile(id, events).Encode(&buf, lctl.FormatForPath(name)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts the debugger over files on a real loopback HTTP server.
func serve(t *testing.T, opts debugger.Options, paths ...string) (*httptest.Server, *debugger.Handler) {
	t.Helper()
	src := debugger.NewFileSource(paths...)
	if opts.Source == nil {
		opts.Source = src
		opts.LoadErrors = src.LoadErrors()
	}
	h, err := debugger.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return srv, h
}

func twoRuns(t *testing.T) (*httptest.Server, *debugger.Handler) {
	dir := t.TempDir()
	a := writeChain(t, dir, "run-a.lctl.json", "run-a", runChain("run-a"))
	b := runChain("run-a")
	b = b[:len(b)-3]
	bp := writeChain(t, dir, "run-b.lctl.yaml", "run-a", b)
	return serve(t, debugger.Options{Title: "test"}, a, bp)
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url string, body io.Reader, hdr map[string]string) resp {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Body.Close() }()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{r.StatusCode, r.Header, raw}
}

func get(t *testing.T, url string) resp { return do(t, http.MethodGet, url, nil, nil) }

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want JSON; body %s", ct, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

type apiErr struct {
	Error struct{ Code, Message string } `json:"error"`
}

func wantError(t *testing.T, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var e apiErr
	r.json(t, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error %+v, want code %s with a message", e.Error, code)
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	cases := []struct {
		method, path string
		status       int
	}{
		{"GET", "/", 200},
		{"GET", "/chain/whatever", 200},
		{"GET", "/assets/missing.js", 404},
		{"GET", "/assets/", 404},
		{"GET", "/api/info", 200},
		{"GET", "/api/chains/nope", 404},
		{"GET", "/api/nothing", 404},
		{"DELETE", "/api/chains", 405},
		{"POST", "/", 405},
		{"GET", "/api/approvals/decide", 405},
		{"GET", "/api/chains/run-a/live", 204},
	}
	for _, tc := range cases {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			r := do(t, tc.method, srv.URL+tc.path, nil, nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (%s)", r.status, tc.status, r.body)
			}
			want := map[string]string{
				"Content-Security-Policy": debugger.ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			}
			for k, v := range want {
				if got := r.header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Error("CSP does not restrict scripts")
			}
			if tc.status == 405 && r.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	// The page is the embedded index.html.
	r := get(t, srv.URL+"/")
	if !strings.Contains(r.header.Get("Content-Type"), "text/html") || !bytes.Contains(r.body, []byte("<html")) {
		t.Fatalf("page: %s %s", r.header.Get("Content-Type"), r.body)
	}
}

func TestInfoAndChainList(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var info struct {
		Mode      string
		Title     string
		Chains    int
		Approvals bool
		Auth      bool
		Live      bool
		LoadError *debugger.LoadError `json:"load_error"`
	}
	get(t, srv.URL+"/api/info").json(t, &info)
	if info.Mode != "file" || info.Chains != 2 || info.Approvals || info.Auth || info.Live || info.LoadError != nil || info.Title != "test" {
		t.Fatalf("info %+v", info)
	}

	type chainsResp struct {
		Chains []struct {
			ID, Status       string
			Events, Errors   int
			Agents           []string
			DurationMS       float64 `json:"duration_ms"`
			PendingApprovals int     `json:"pending_approvals"`
			Tokens           lctl.Tokens
		}
		NextCursor string `json:"next_cursor"`
	}
	var all chainsResp
	get(t, srv.URL+"/api/chains").json(t, &all)
	if len(all.Chains) != 2 || all.NextCursor != "" {
		t.Fatalf("chains %+v", all)
	}
	// Newest first: run-a ends later than its copy cut short (run-a-2).
	if all.Chains[0].ID != "run-a" || all.Chains[1].ID != "run-a-2" {
		t.Fatalf("order %s, %s", all.Chains[0].ID, all.Chains[1].ID)
	}
	a := all.Chains[0]
	if a.Events != 21 || a.Status != "failed" || a.Errors != 2 || a.DurationMS != 20000 || a.Tokens.Input != 10 {
		t.Fatalf("run-a summary %+v", a)
	}
	if strings.Join(a.Agents, ",") != "planner,coder,reviewer" {
		t.Fatalf("agents %v", a.Agents)
	}
	if all.Chains[1].Status != "running" {
		t.Fatalf("a run without run_finished is running, got %s", all.Chains[1].Status)
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"q=A-2", []string{"run-a-2"}},
		{"q=zzz", nil},
		{"agent=planner", []string{"run-a", "run-a-2"}},
		{"agent=nobody", nil},
		{"status=failed", []string{"run-a"}},
		{"status=running", []string{"run-a-2"}},
		{"since=2026-11-21T12:00:19Z", []string{"run-a"}},
		{"until=2026-11-21T11:00:00Z", nil},
		{"limit=1", []string{"run-a"}},
		{"limit=1&cursor=1", []string{"run-a-2"}},
	} {
		var r chainsResp
		get(t, srv.URL+"/api/chains?"+tc.query).json(t, &r)
		var ids []string
		for _, c := range r.Chains {
			ids = append(ids, c.ID)
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, want %v", tc.query, ids, tc.want)
		}
		if tc.query == "limit=1" && r.NextCursor != "1" {
			t.Errorf("limit=1: next_cursor %q", r.NextCursor)
		}
	}
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "status=weird", "since=yesterday", "cursor=-1", "cursor=abc"} {
		wantError(t, get(t, srv.URL+"/api/chains?"+q), 400, "INVALID_ARGUMENT")
	}
}

func TestChainDetail(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var d struct {
		ID       string
		Events   int
		FirstSeq uint64 `json:"first_seq"`
		LastSeq  uint64 `json:"last_seq"`
		Status   string
		Live     bool
		Run      *lctl.Run
		Verify   struct {
			OK          bool
			FirstBadSeq uint64 `json:"first_bad_seq"`
		}
		Stats struct {
			Events, Errors, ToolCalls int
			CostByAgent               []struct {
				Agent string
				Input int64
				Cost  *float64
			} `json:"cost_by_agent"`
		}
		Bottlenecks struct {
			Steps   []struct{ Agent string }
			ByAgent []struct{ Agent string } `json:"by_agent"`
		}
		Warnings []string
	}
	get(t, srv.URL+"/api/chains/run-a").json(t, &d)
	if d.ID != "run-a" || d.Events != 21 || d.FirstSeq != 1 || d.LastSeq != 21 || d.Status != "failed" || d.Live || d.Run == nil || d.Run.Goal != "fix the bug" {
		t.Fatalf("detail %+v", d)
	}
	if len(d.Stats.CostByAgent) != 1 || d.Stats.CostByAgent[0].Agent != "planner" || d.Stats.CostByAgent[0].Input != 10 || d.Stats.CostByAgent[0].Cost != nil {
		t.Fatalf("cost by agent without prices %+v", d.Stats.CostByAgent)
	}
	if !d.Verify.OK || d.Stats.Events != 21 || d.Stats.Errors != 2 || len(d.Bottlenecks.Steps) == 0 || len(d.Bottlenecks.ByAgent) == 0 {
		t.Fatalf("verify/stats/bottlenecks %+v", d)
	}
	// The second file names the same chain: it is served under another id,
	// and says so.
	get(t, srv.URL+"/api/chains/run-a-2").json(t, &d)
	if d.Events != 18 || len(d.Warnings) == 0 || !strings.Contains(strings.Join(d.Warnings, " "), "served as run-a-2") {
		t.Fatalf("run-a-2 %+v", d)
	}
	wantError(t, get(t, srv.URL+"/api/chains/nope"), 404, "NOT_FOUND")
	wantError(t, get(t, srv.URL+"/api/chains/bad%20id"), 400, "INVALID_ARGUMENT")
	wantError(t, get(t, srv.URL+"/api/chains/nope/events"), 404, "NOT_FOUND")
	wantError(t, get(t, srv.URL+"/api/chains/nope/flow"), 404, "NOT_FOUND")
	wantError(t, get(t, srv.URL+"/api/chains/nope/state"), 404, "NOT_FOUND")
	wantError(t, get(t, srv.URL+"/api/chains/nope/confidence"), 404, "NOT_FOUND")
	wantError(t, get(t, srv.URL+"/api/chains/nope/live"), 404, "NOT_FOUND")
}

func TestCostsWithAPriceTable(t *testing.T) {
	t.Parallel()
	prices, err := analysis.LoadPrices(strings.NewReader("models:\n  m: {input_per_1k: 1, output_per_1k: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runChain("priced")
	events[1].Data["model"] = "m"
	prev := ""
	for i := range events {
		if err := events[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = events[i].Hash
	}
	srv, _ := serve(t, debugger.Options{Prices: prices}, writeChain(t, t.TempDir(), "p.lctl.json", "priced", events))
	var list struct{ Chains []struct{ Cost *float64 } }
	get(t, srv.URL+"/api/chains").json(t, &list)
	// planner's step: 10 in, 5 out at $1 and $2 per 1,000.
	if len(list.Chains) != 1 || list.Chains[0].Cost == nil || *list.Chains[0].Cost != 0.02 {
		t.Fatalf("cost %+v", list.Chains)
	}
	var d struct {
		Stats struct {
			CostByAgent []struct{ Cost *float64 } `json:"cost_by_agent"`
		}
	}
	get(t, srv.URL+"/api/chains/priced").json(t, &d)
	if len(d.Stats.CostByAgent) != 1 || d.Stats.CostByAgent[0].Cost == nil || *d.Stats.CostByAgent[0].Cost != 0.02 {
		t.Fatalf("cost by agent %+v", d.Stats.CostByAgent)
	}
}

// TestCostSoFarAtSeq prices the tokens up to each seq the way the chain's
// stats price them: per model, a model without a price named, and the
// cost at the last seq equal to the stats' cost.
func TestCostSoFarAtSeq(t *testing.T) {
	t.Parallel()
	prices, err := analysis.LoadPrices(strings.NewReader("models:\n  m: {input_per_1k: 1, output_per_1k: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runChain("priced")
	events[1].Data["model"] = "m-large" // step 1, priced by the prefix m
	events[5].Data["model"] = "other"   // step 2: no price
	events[11].Data["tokens"] = map[string]any{"input": 1000.0, "output": 500.0}
	events[12].Data["model"] = "m" // step 3
	events[15].Data["tokens"] = map[string]any{"input": 200.0, "output": 100.0}
	prev := ""
	for i := range events {
		if err := events[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = events[i].Hash
	}
	path := writeChain(t, t.TempDir(), "p.lctl.json", "priced", events)
	srv, _ := serve(t, debugger.Options{Prices: prices}, path)
	type costResp struct {
		Seq            uint64
		Cost           *float64
		UnpricedModels []string `json:"unpriced_models"`
	}
	// Per model in the order of their names, as the stats add them up
	// (float addition, not exact arithmetic): m, then m-large.
	mCost, largeCost := 0.2+0.2, 0.01+0.01
	both := mCost + largeCost
	for _, tc := range []struct {
		seq      int
		cost     any
		unpriced string
	}{
		{1, nil, ""},
		{4, nil, ""},
		{5, 0.02, ""}, // 10 in, 5 out of m-large at $1 and $2 per 1,000
		{11, 0.02, ""},
		{12, 0.02, "other"},
		{15, 0.02, "other"},
		{16, both, "other"}, // m and m-large are both priced as m, but are two models
		{21, both, "other"},
	} {
		// Both orders of asking: the cost track is built once and serves
		// every seq.
		var r costResp
		get(t, fmt.Sprintf("%s/api/chains/priced/state?seq=%d", srv.URL, tc.seq)).json(t, &r)
		var got any
		if r.Cost != nil {
			got = *r.Cost
		}
		if r.Seq != uint64(tc.seq) || got != tc.cost || strings.Join(r.UnpricedModels, ",") != tc.unpriced || r.UnpricedModels == nil {
			t.Errorf("seq %d: cost %v unpriced %q, want %v %q", tc.seq, got, r.UnpricedModels, tc.cost, tc.unpriced)
		}
	}
	var d struct{ Stats struct{ Cost *float64 } }
	get(t, srv.URL+"/api/chains/priced").json(t, &d)
	var last costResp
	get(t, srv.URL+"/api/chains/priced/state").json(t, &last)
	if d.Stats.Cost == nil || last.Cost == nil || *d.Stats.Cost != *last.Cost {
		t.Fatalf("the last seq costs %v, the chain's stats %v", last.Cost, d.Stats.Cost)
	}
	// Without a price table the cost is unknown, not zero.
	plain, _ := serve(t, debugger.Options{}, path)
	var r map[string]any
	get(t, plain.URL+"/api/chains/priced/state?seq=16").json(t, &r)
	if v, ok := r["cost"]; !ok || v != nil {
		t.Fatalf("no price table: cost %v (present %v)", v, ok)
	}
}

func TestChainVerifyNamesTheEditedEvent(t *testing.T) {
	t.Parallel()
	events := runChain("run-x")
	events[6].Data["intent"] = "something else" // edited after sealing
	srv, _ := serve(t, debugger.Options{}, writeChain(t, t.TempDir(), "x.lctl.json", "run-x", events))
	var d struct {
		Verify struct {
			OK          bool
			FirstBadSeq uint64 `json:"first_bad_seq"`
			Message     string
		}
	}
	get(t, srv.URL+"/api/chains/run-x").json(t, &d)
	if d.Verify.OK || d.Verify.FirstBadSeq != 7 || d.Verify.Message == "" {
		t.Fatalf("verify %+v", d.Verify)
	}
}

type eventsResp struct {
	Events   []map[string]any
	Total    int
	NextFrom uint64 `json:"next_from"`
}

func TestEventsPagingAndRawUnknownTypes(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var r eventsResp
	get(t, srv.URL+"/api/chains/run-a/events?from=5&limit=3").json(t, &r)
	if len(r.Events) != 3 || r.Events[0]["seq"] != 5.0 || r.Events[2]["seq"] != 7.0 || r.NextFrom != 8 || r.Total != 21 {
		t.Fatalf("page %+v", r)
	}
	get(t, srv.URL+"/api/chains/run-a/events").json(t, &r)
	if len(r.Events) != 21 || r.NextFrom != 0 {
		t.Fatalf("default page: %d events, next %d", len(r.Events), r.NextFrom)
	}
	// The unknown type comes through as stored, hash and all.
	u := r.Events[19]
	if u["type"] != "custom_probe" || u["agent"] != "sidecar" || u["hash"] == "" || u["data"].(map[string]any)["payload"].(map[string]any)["x"] != 1.0 {
		t.Fatalf("unknown event %v", u)
	}
	get(t, srv.URL+"/api/chains/run-a/events?from=99").json(t, &r)
	if len(r.Events) != 0 || r.NextFrom != 0 {
		t.Fatalf("past the end: %+v", r)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=ten", "from=-1", "from=x"} {
		wantError(t, get(t, srv.URL+"/api/chains/run-a/events?"+q), 400, "INVALID_ARGUMENT")
	}
}

func TestToolOutputWithMarkupIsEscapedJSON(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	for _, path := range []string{"/api/chains/run-a/events", "/api/chains/run-a/state?seq=4", "/api/chains/run-a/state", "/api/chains/run-a/flow"} {
		r := get(t, srv.URL+path)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		if bytes.Contains(r.body, []byte("<script")) || bytes.Contains(r.body, []byte("<img")) {
			t.Fatalf("%s: markup unescaped in %s", path, r.body)
		}
		if r.header.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("%s: Content-Type %q", path, r.header.Get("Content-Type"))
		}
	}
	// ...and still there, as data.
	var r eventsResp
	get(t, srv.URL+"/api/chains/run-a/events?from=4&limit=1").json(t, &r)
	if r.Events[0]["data"].(map[string]any)["output"] != xss {
		t.Fatalf("output %v", r.Events[0]["data"])
	}
	raw := get(t, srv.URL+"/api/chains/run-a/events?from=4&limit=1").body
	if !bytes.Contains(raw, []byte(`\u003cscript\u003e`)) {
		t.Fatalf("expected \\u003cscript\\u003e in %s", raw)
	}
}

func TestFlowModel(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var f debugger.FlowPage
	raw := get(t, srv.URL+"/api/chains/run-a/flow")
	raw.json(t, &f)
	if bytes.Contains(raw.body, []byte("null")) {
		t.Fatalf("a list is null in %s", raw.body)
	}
	if f.TotalEvents != 21 || f.TotalNodes != len(f.Nodes) || f.NextFrom != 0 {
		t.Fatalf("flow totals %+v", f)
	}
	type want struct {
		id, kind, agent, status string
		gated                   bool
		lastSeq                 uint64
	}
	wants := []want{
		{"n1", "event", "orchestrator", "ok", false, 1},
		{"n2", "agent_step", "planner", "ok", false, 5},
		{"n6", "agent_step", "coder", "approved", true, 12},
		{"n13", "agent_step", "coder", "denied", false, 16},
		{"n17", "agent_step", "reviewer", "in_doubt", false, 19},
		{"n20", "event", "sidecar", "ok", false, 20},
		{"n21", "event", "orchestrator", "error", false, 21},
	}
	if len(f.Nodes) != len(wants) {
		t.Fatalf("%d nodes, want %d: %+v", len(f.Nodes), len(wants), f.Nodes)
	}
	for i, w := range wants {
		n := f.Nodes[i]
		if n.ID != w.id || n.Kind != w.kind || n.Agent != w.agent || n.Status != w.status || n.Gated != w.gated || n.LastSeq != w.lastSeq {
			t.Errorf("node %d: %+v, want %+v", i, n, w)
		}
	}
	step2 := f.Nodes[2]
	if step2.Step == nil || *step2.Step != 2 || step2.Tool != "fs.write" || step2.Label != "write the fix" || step2.Events != 7 {
		t.Fatalf("step 2 node %+v", step2)
	}
	var types []string
	for _, a := range step2.Attached {
		types = append(types, a.Type)
	}
	if strings.Join(types, ",") != "verdict,approval_requested,approval_decided,verdict,tool_call,step_end" {
		t.Fatalf("attached %v", types)
	}
	if step2.Attached[2].Label != "approved by bob" || step2.Attached[0].Status != "needs_approval" {
		t.Fatalf("attachments %+v", step2.Attached)
	}
	if f.Nodes[5].Type != "custom_probe" {
		t.Fatalf("unknown type node %+v", f.Nodes[5])
	}
	// Edges: a handoff where the agent of consecutive steps changes.
	kinds := map[string]string{}
	for _, e := range f.Edges {
		kinds[e.From+">"+e.To] = e.Kind
	}
	wantEdges := map[string]string{"n1>n2": "next", "n2>n6": "handoff", "n6>n13": "next", "n13>n17": "handoff", "n17>n20": "next", "n20>n21": "next"}
	if fmt.Sprint(kinds) != fmt.Sprint(wantEdges) {
		t.Fatalf("edges %v, want %v", kinds, wantEdges)
	}

	// Paging: two nodes at a time, by seq.
	var p debugger.FlowPage
	get(t, srv.URL+"/api/chains/run-a/flow?limit=2").json(t, &p)
	if len(p.Nodes) != 2 || p.NextFrom != 6 || len(p.Edges) != 1 {
		t.Fatalf("page 1 %+v", p)
	}
	get(t, srv.URL+"/api/chains/run-a/flow?limit=2&from=6").json(t, &p)
	if len(p.Nodes) != 2 || p.Nodes[0].ID != "n6" || p.NextFrom != 17 || len(p.Edges) != 2 || p.Edges[0].From != "n2" || p.Edges[0].Kind != "handoff" {
		t.Fatalf("page 2 %+v", p)
	}
	get(t, srv.URL+"/api/chains/run-a/flow?from=1000").json(t, &p)
	if len(p.Nodes) != 0 || p.NextFrom != 0 || p.TotalNodes != 7 {
		t.Fatalf("past the end %+v", p)
	}
	for _, q := range []string{"limit=0", "limit=1001", "from=x"} {
		wantError(t, get(t, srv.URL+"/api/chains/run-a/flow?"+q), 400, "INVALID_ARGUMENT")
	}
}

type stateResp struct {
	Seq    uint64
	Event  map[string]any
	State  lctl.State
	Counts struct {
		ToolCalls int `json:"tool_calls"`
		Errors    int
		Steps     int
		Facts     int
	}
	Step *struct {
		Step              *int64
		Agent             string
		StartSeq          uint64 `json:"start_seq"`
		Decision          string
		Rules             []string
		Proposal          map[string]any
		Verdict           map[string]any
		ApprovalRequested map[string]any `json:"approval_requested"`
		ApprovalDecided   map[string]any `json:"approval_decided"`
		Result            map[string]any
		Error             map[string]any
		End               map[string]any
	}
}

func TestStateAtSeq(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var s stateResp
	// At the approval decision of step 2: approved, not yet run.
	get(t, srv.URL+"/api/chains/run-a/state?seq=9").json(t, &s)
	if s.Seq != 9 || s.Event["type"] != "approval_decided" || s.State.Seq != 9 || s.State.EventCount != 9 {
		t.Fatalf("state at 9: seq %d event %v state seq %d", s.Seq, s.Event["type"], s.State.Seq)
	}
	if s.Counts.ToolCalls != 1 || len(s.State.ToolCalls) != 1 || s.State.Tokens.Input != 10 {
		t.Fatalf("state at 9: %+v / %+v", s.Counts, s.State.Tokens)
	}
	st := s.Step
	if st == nil || st.Step == nil || *st.Step != 2 || st.Agent != "coder" || st.StartSeq != 6 || st.Decision != "needs_approval" ||
		strings.Join(st.Rules, ",") != "approve-writes" || st.ApprovalRequested == nil || st.ApprovalDecided == nil || st.Result != nil || st.End != nil {
		t.Fatalf("step at 9: %+v", st)
	}
	if st.Proposal["data"].(map[string]any)["intent"] != "write the fix" {
		t.Fatalf("proposal %v", st.Proposal)
	}
	// The end of step 3: denied with its error.
	get(t, srv.URL+"/api/chains/run-a/state?seq=16").json(t, &s)
	if s.Step == nil || s.Step.Decision != "deny" || s.Step.Error == nil || s.Step.End == nil {
		t.Fatalf("step 3 at 16: %+v", s.Step)
	}
	// Outside a step.
	get(t, srv.URL+"/api/chains/run-a/state?seq=1").json(t, &s)
	if s.Step != nil || s.State.Run == nil || s.State.Run.Status != "running" {
		t.Fatalf("state at 1: step %+v run %+v", s.Step, s.State.Run)
	}
	// Default: the last event; tail cuts the lists, counts keep their length.
	get(t, srv.URL+"/api/chains/run-a/state?tail=1").json(t, &s)
	if s.Seq != 21 || s.Counts.ToolCalls != 2 || len(s.State.ToolCalls) != 1 || s.State.ToolCalls[0].Seq != 11 || s.Counts.Errors != 2 || len(s.State.Errors) != 1 {
		t.Fatalf("tail=1: counts %+v tool calls %+v", s.Counts, s.State.ToolCalls)
	}
	if s.Counts.Steps != 4 || len(s.State.Steps) != 1 || s.State.Run.Status != "failed" {
		t.Fatalf("tail=1 steps %d/%d", s.Counts.Steps, len(s.State.Steps))
	}
	for _, q := range []string{"seq=0", "seq=-3", "seq=abc", "seq=1.5", "tail=-1", "tail=1001"} {
		wantError(t, get(t, srv.URL+"/api/chains/run-a/state?"+q), 400, "INVALID_ARGUMENT")
	}
	wantError(t, get(t, srv.URL+"/api/chains/run-a/state?seq=22"), 404, "NOT_FOUND")
}

func TestStateAtSeqOfAChainWithGaps(t *testing.T) {
	t.Parallel()
	events := runChain("gappy")
	events = append(events[:3], events[4:]...) // seq 4 is missing
	srv, _ := serve(t, debugger.Options{}, writeChain(t, t.TempDir(), "gappy.lctl.json", "gappy", events))
	wantError(t, get(t, srv.URL+"/api/chains/gappy/state?seq=4"), 404, "NOT_FOUND")
	var s stateResp
	get(t, srv.URL+"/api/chains/gappy/state?seq=5").json(t, &s)
	if s.Seq != 5 || s.State.EventCount != 4 {
		t.Fatalf("state at 5: seq %d, %d events applied", s.Seq, s.State.EventCount)
	}
	var d struct{ Warnings []string }
	get(t, srv.URL+"/api/chains/gappy").json(t, &d)
	if len(d.Warnings) == 0 {
		t.Fatal("a missing seq gives no warning")
	}
}

// TestEventsByPosition pages a chain with gaps in its seqs by position,
// and finds the position of a seq.
func TestEventsByPosition(t *testing.T) {
	t.Parallel()
	events := runChain("gappy")
	events = append(append(events[:3:3], events[4:9]...), events[12:]...) // seqs 4 and 10..12 are missing
	srv, _ := serve(t, debugger.Options{}, writeChain(t, t.TempDir(), "gappy.lctl.json", "gappy", events))
	type posResp struct {
		Events   []struct{ Seq uint64 }
		Total    int
		Position int
		NextFrom uint64 `json:"next_from"`
	}
	seqs := func(r posResp) string {
		var out []string
		for _, e := range r.Events {
			out = append(out, fmt.Sprint(e.Seq))
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		query, seqs string
		position    int
		next        uint64
	}{
		{"pos=0&limit=4", "1,2,3,5", 0, 6},
		{"pos=5&limit=3", "7,8,9", 5, 13},
		{"pos=8&limit=3", "13,14,15", 8, 16},
		{"pos=16", "21", 16, 0},
		{"pos=17", "", 17, 0},
		{"pos=1000", "", 17, 0},
		// The position of a seq, or of the next one after a gap.
		{"from=13&limit=1", "13", 8, 14},
		{"from=10&limit=1", "13", 8, 14},
		{"from=4&limit=1", "5", 3, 6},
	} {
		var r posResp
		get(t, srv.URL+"/api/chains/gappy/events?"+tc.query).json(t, &r)
		if seqs(r) != tc.seqs || r.Position != tc.position || r.NextFrom != tc.next || r.Total != 17 {
			t.Errorf("%s: seqs %s position %d next %d total %d, want %s %d %d 17", tc.query, seqs(r), r.Position, r.NextFrom, r.Total, tc.seqs, tc.position, tc.next)
		}
	}
	for _, q := range []string{"pos=-1", "pos=x", "pos=1.5", "pos=1&from=1"} {
		wantError(t, get(t, srv.URL+"/api/chains/gappy/events?"+q), 400, "INVALID_ARGUMENT")
	}
}

func TestConfidenceAndDiff(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	var c struct {
		ChainID string `json:"chain_id"`
		Facts   []any
	}
	get(t, srv.URL+"/api/chains/run-a/confidence").json(t, &c)
	if c.ChainID != "run-a" || c.Facts == nil {
		t.Fatalf("confidence %+v", c)
	}
	var d struct {
		V1, V2 struct {
			ID string `json:"chain_id"`
		}
		Identical bool
		Removed   int
	}
	get(t, srv.URL+"/api/diff?a=run-a&b=run-a-2").json(t, &d)
	if d.V1.ID != "run-a" || d.V2.ID != "run-a-2" || d.Identical || d.Removed != 3 {
		t.Fatalf("diff %+v", d)
	}
	get(t, srv.URL+"/api/diff?a=run-a&b=run-a").json(t, &d)
	if !d.Identical {
		t.Fatal("a chain differs from itself")
	}
	wantError(t, get(t, srv.URL+"/api/diff?a=run-a"), 400, "INVALID_ARGUMENT")
	wantError(t, get(t, srv.URL+"/api/diff?a=run-a&b=../etc"), 400, "INVALID_ARGUMENT")
	wantError(t, get(t, srv.URL+"/api/diff?a=run-a&b=nope"), 404, "NOT_FOUND")
}

func TestFileThatDoesNotParse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.lctl.json")
	if err := os.WriteFile(bad, []byte(`{"lctl": "4.0", "chain": {"id": "x"}, "events": [{"seq": 1, "type": "step_start", "data": 7}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, debugger.Options{}, bad, filepath.Join(dir, "missing.lctl.json"))
	var info struct {
		Chains    int
		LoadError *debugger.LoadError `json:"load_error"`
	}
	get(t, srv.URL+"/api/info").json(t, &info)
	if info.Chains != 0 || info.LoadError == nil || info.LoadError.File != bad || !strings.Contains(info.LoadError.Message, "data") {
		t.Fatalf("info %+v", info)
	}
	if r := get(t, srv.URL+"/"); r.status != 200 {
		t.Fatalf("the page is not served: %d", r.status)
	}
	var list struct{ Chains []any }
	get(t, srv.URL+"/api/chains").json(t, &list)
	if len(list.Chains) != 0 {
		t.Fatalf("chains %v", list.Chains)
	}
}

func TestFileSourceHasNothingLive(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	r := get(t, srv.URL+"/api/chains/run-a/live")
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("live on a file: %d %s", r.status, r.body)
	}
	wantError(t, get(t, srv.URL+"/api/chains/run-a/live?from=x"), 400, "INVALID_ARGUMENT")
}

// recordingApprovals is a stand-in validator that records what it was
// asked, with the caller's metadata (the real validator is exercised in
// test/e2e).
type recordingApprovals struct {
	auth []string
	req  *debugger.Decision
	err  error
}

// approvalJSON is an approval as the validator renders it (protojson).
func approvalJSON(t map[string]any) debugger.Approval {
	raw, err := json.Marshal(t)
	if err != nil {
		panic(err)
	}
	return debugger.Approval{RunID: t["runId"].(string), JSON: raw}
}

func (r *recordingApprovals) List(ctx context.Context, runID string, all bool) ([]debugger.Approval, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	r.auth = append(r.auth, md.Get("authorization")...)
	return []debugger.Approval{approvalJSON(map[string]any{"runId": "run-a", "step": 2, "stepId": "s2",
		"preview": map[string]any{"kind": "diff", "content": "+" + xss},
		"state":   "APPROVAL_STATE_PENDING", "requestedAt": "1970-01-01T00:00:00Z"})}, nil
}

func (r *recordingApprovals) Decide(ctx context.Context, d debugger.Decision) (debugger.Approval, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	r.auth = append(r.auth, md.Get("authorization")...)
	r.req = &d
	if r.err != nil {
		return debugger.Approval{}, r.err
	}
	return approvalJSON(map[string]any{"runId": d.RunID, "step": 2, "state": "APPROVAL_STATE_APPROVED", "decidedBy": d.Approver}), nil
}

func TestApprovalsProxy(t *testing.T) {
	t.Parallel()
	rec := &recordingApprovals{}
	dir := t.TempDir()
	srv, _ := serve(t, debugger.Options{Approvals: rec}, writeChain(t, dir, "run-a.lctl.json", "run-a", runChain("run-a")))

	r := do(t, "GET", srv.URL+"/api/approvals?run=run-a", nil, map[string]string{"Authorization": "Bearer tok-1"})
	var list struct{ Approvals []map[string]any }
	r.json(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0]["runId"] != "run-a" || list.Approvals[0]["state"] != "APPROVAL_STATE_PENDING" {
		t.Fatalf("approvals %s", r.body)
	}
	if bytes.Contains(r.body, []byte("<script")) {
		t.Fatalf("preview markup unescaped: %s", r.body)
	}
	if len(rec.auth) != 1 || rec.auth[0] != "Bearer tok-1" {
		t.Fatalf("authorization forwarded: %v", rec.auth)
	}
	var chains struct {
		Chains []struct {
			PendingApprovals int `json:"pending_approvals"`
		}
	}
	get(t, srv.URL+"/api/chains").json(t, &chains)
	if chains.Chains[0].PendingApprovals != 1 {
		t.Fatalf("pending approvals %+v", chains)
	}

	post := func(body string, hdr map[string]string) resp {
		return do(t, "POST", srv.URL+"/api/approvals/decide", strings.NewReader(body), hdr)
	}
	csrf := map[string]string{"X-XCT-CSRF": "1", "Content-Type": "application/json", "Authorization": "Bearer tok-2"}
	wantError(t, post(`{"run_id":"run-a","step":2,"approve":true}`, map[string]string{"Content-Type": "application/json"}), 403, "PERMISSION_DENIED")
	if rec.req != nil {
		t.Fatal("decided without the CSRF header")
	}
	r = post(`{"run_id":"run-a","step":2,"approve":true,"approver":"bob"}`, csrf)
	var dec struct{ Approval map[string]any }
	r.json(t, &dec)
	if r.status != 200 || dec.Approval["state"] != "APPROVAL_STATE_APPROVED" || dec.Approval["decidedBy"] != "bob" {
		t.Fatalf("decide: %d %s", r.status, r.body)
	}
	if rec.req.RunID != "run-a" || rec.req.Step != "2" || !rec.req.Approve || rec.auth[len(rec.auth)-1] != "Bearer tok-2" {
		t.Fatalf("validator asked %+v with %v", rec.req, rec.auth)
	}
	r = post(`{"run_id":"run-a","step":"s2","approve":false,"reason":"no"}`, csrf)
	if r.status != 200 || rec.req.Step != "s2" || rec.req.Approve {
		t.Fatalf("deny by step id: %d %s %+v", r.status, r.body, rec.req)
	}
	for _, body := range []string{
		`{"run_id":"run-a","step":2,"approve":false}`,          // deny without a reason
		`{"run_id":"run-a","step":2}`,                          // no decision
		`{"run_id":"../x","step":2,"approve":true}`,            // bad run id
		`{"run_id":"run-a","approve":true}`,                    // no step
		`{"run_id":"run-a","step":-1,"approve":true}`,          // bad step
		`{"run_id":"run-a","step":2,"approve":true,"extra":1}`, // unknown field
		`not json`,
	} {
		wantError(t, post(body, csrf), 400, "INVALID_ARGUMENT")
	}
	wantError(t, post(`{"run_id":"run-a","step":2,"approve":true}`, map[string]string{"X-XCT-CSRF": "1", "Content-Type": "text/plain"}), 400, "INVALID_ARGUMENT")
	big := `{"run_id":"run-a","step":2,"approve":false,"reason":"` + strings.Repeat("x", 70<<10) + `"}`
	wantError(t, post(big, csrf), 413, "PAYLOAD_TOO_LARGE")

	// The validator's refusals come through with their meaning.
	rec.err = status.Error(codes.FailedPrecondition, "the principal who started the run cannot approve it")
	wantError(t, post(`{"run_id":"run-a","step":2,"approve":true}`, csrf), 409, "FAILED_PRECONDITION")
	rec.err = status.Error(codes.PermissionDenied, "not an approver")
	wantError(t, post(`{"run_id":"run-a","step":2,"approve":true}`, csrf), 403, "PERMISSION_DENIED")
	rec.err = status.Error(codes.Unavailable, "down")
	wantError(t, post(`{"run_id":"run-a","step":2,"approve":true}`, csrf), 503, "UNAVAILABLE")
	wantError(t, get(t, srv.URL+"/api/approvals?all=maybe"), 400, "INVALID_ARGUMENT")
}

func TestNoApprovalsWithoutAValidator(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	wantError(t, get(t, srv.URL+"/api/approvals"), 404, "NOT_FOUND")
	r := do(t, "POST", srv.URL+"/api/approvals/decide", strings.NewReader(`{}`), map[string]string{"X-XCT-CSRF": "1"})
	wantError(t, r, 404, "NOT_FOUND")
}

func TestAuthorizeHook(t *testing.T) {
	t.Parallel()
	var actions []string
	authz := func(r *http.Request, action string) error {
		actions = append(actions, action)
		switch r.Header.Get("Authorization") {
		case "Bearer reader":
			if action == debugger.ActionApprove {
				return fmt.Errorf("%w: reader cannot approve", debugger.ErrPermissionDenied)
			}
			return nil
		case "":
			return fmt.Errorf("%w: no token", debugger.ErrUnauthenticated)
		}
		return fmt.Errorf("%w: unknown token", debugger.ErrUnauthenticated)
	}
	dir := t.TempDir()
	srv, _ := serve(t, debugger.Options{Authorize: authz, Approvals: &recordingApprovals{}}, writeChain(t, dir, "run-a.lctl.json", "run-a", runChain("run-a")))
	r := get(t, srv.URL+"/api/chains")
	wantError(t, r, 401, "UNAUTHENTICATED")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	if r := do(t, "GET", srv.URL+"/api/chains", nil, map[string]string{"Authorization": "Bearer reader"}); r.status != 200 {
		t.Fatalf("reader: %d", r.status)
	}
	var info struct{ Auth bool }
	do(t, "GET", srv.URL+"/api/info", nil, map[string]string{"Authorization": "Bearer reader"}).json(t, &info)
	if !info.Auth {
		t.Fatal("info.auth is false with a hook")
	}
	wantError(t, do(t, "POST", srv.URL+"/api/approvals/decide", strings.NewReader(`{"run_id":"run-a","step":2,"approve":true}`),
		map[string]string{"Authorization": "Bearer reader", "X-XCT-CSRF": "1"}), 403, "PERMISSION_DENIED")
	// The live stream takes the token as a query parameter too.
	if r := get(t, srv.URL+"/api/chains/run-a/live?access_token=reader"); r.status != http.StatusNoContent {
		t.Fatalf("live with access_token: %d %s", r.status, r.body)
	}
	wantError(t, get(t, srv.URL+"/api/chains/run-a/events?access_token=reader"), 401, "UNAUTHENTICATED")
	// The page itself is static and open.
	if r := get(t, srv.URL+"/"); r.status != 200 {
		t.Fatalf("page: %d", r.status)
	}
	if !strings.Contains(strings.Join(actions, ","), "approve") {
		t.Fatalf("actions %v", actions)
	}
}
