package debugger_test

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/lctl/debugger"
)

// crewChain is the chain of the crew demo (examples/crews/demo) as a real
// cluster wrote it (test/e2e TestCrewRun's run, exported with lctl's JSON
// encoder): a routing fallback before the first step, a handoff refused by
// the analyzer's output contract, its repair, two handoffs, consensus on F1,
// checkpoints, the fixer's write held by the crew's gate and approved by
// bob.
const crewChainID = "run-20261125-200909-62d1bbbf"

func crewServer(t *testing.T) string {
	t.Helper()
	srv, _ := serve(t, debugger.Options{}, filepath.Join("testdata", "crew-demo.lctl.json"))
	return srv.URL + "/api/chains/" + crewChainID
}

func TestFlowCrewLanes(t *testing.T) {
	t.Parallel()
	base := crewServer(t)
	raw := get(t, base+"/flow")
	// Only a refused handoff's depth may be null (it was never given one).
	if bytes.Contains(bytes.ReplaceAll(raw.body, []byte(`"depth":null`), nil), []byte("null")) {
		t.Fatalf("a list or value is null in %s", raw.body)
	}
	var f debugger.FlowPage
	raw.json(t, &f)

	// A lane per agent, in order of appearance, with its profile type.
	var lanes []string
	for _, l := range f.Lanes {
		lanes = append(lanes, l.Agent+"/"+l.Type+"/"+string(rune('0'+l.Steps)))
	}
	if got := strings.Join(lanes, " "); got != "orchestrator//0 code-analyzer/analyzer/4 system//0 security-reviewer/reviewer/2 fix-implementer/executor/1" {
		t.Fatalf("lanes %s", got)
	}
	byID := map[string]debugger.FlowNode{}
	var order []string
	for _, n := range f.Nodes {
		byID[n.ID] = n
		order = append(order, n.ID+":"+n.Lane)
	}
	// The routing decision (seq 2) is on the step it led to, not a node.
	if got := strings.Join(order, " "); got != "n1:orchestrator n3:code-analyzer n8:code-analyzer n14:code-analyzer n19:code-analyzer n26:system n27:security-reviewer n32:security-reviewer n39:system n40:fix-implementer n47:orchestrator" {
		t.Fatalf("nodes %s", got)
	}
	first := byID["n3"]
	if len(first.Routing) != 1 {
		t.Fatalf("routing on the first step %+v", first.Routing)
	}
	r := first.Routing[0]
	if r.Seq != 2 || r.Model != "scripted:crew-demo.yaml#analyzer-small" || r.FailedModel != "scripted:crew-demo.yaml#analyzer-large" ||
		r.FailureCode != "RATE_LIMITED" || r.Reason != "fallback_after_rate_limited" || r.Confidence == nil || *r.Confidence != 0.75 {
		t.Fatalf("routing %+v", r)
	}
	if first.Events != 6 { // the routing decision and the step's five events
		t.Fatalf("first step has %d events", first.Events)
	}
	// The fact the step added is listed on it.
	if first.Attached[1].Type != "fact_added" || !strings.HasPrefix(first.Attached[1].Label, "F1: ") {
		t.Fatalf("first step's attachments %+v", first.Attached)
	}

	// The handoff refused by the analyzer's output contract, on its step.
	refused := byID["n8"]
	h := refused.Handoff
	if refused.Status != "error" || h == nil || h.Status != "refused" || h.To != "security-reviewer" || h.Seq != 0 || len(h.Contracts) != 2 {
		t.Fatalf("refused handoff %+v %+v", refused, h)
	}
	if c := h.Contracts[0]; c.Contract != "code-analyzer" || c.Direction != "output" || c.Status != "failed" ||
		len(c.Violations) != 1 || c.Violations[0].Subject != "fact F1" || c.Violations[0].Message != "missing required field source" || c.Violations[0].Rule != "crew.yaml:56" {
		t.Fatalf("the failed contract %+v", c)
	}
	if c := h.Contracts[1]; c.Contract != "security-reviewer" || c.Direction != "input" || c.Status != "passed" || len(c.Violations) != 0 {
		t.Fatalf("the receiver's contract %+v", c)
	}
	if fix := byID["n40"]; fix.Status != "approved" || !fix.Gated || fix.Lane != "fix-implementer" {
		t.Fatalf("the fixer's gated step %+v", fix)
	}
	if byID["n14"].Handoff != nil {
		t.Fatalf("a step without a handoff has one: %+v", byID["n14"].Handoff)
	}

	// Handoff edges from the step that handed over to the receiver's
	// first step, with both contracts; the chain's order stays.
	type edge struct{ kind, handoff string }
	edges := map[string]edge{}
	for _, e := range f.Edges {
		s := ""
		if e.Handoff != nil {
			s = e.Handoff.Status + " " + e.Handoff.From + ">" + e.Handoff.To
			for _, c := range e.Handoff.Contracts {
				s += " " + c.Contract + "/" + c.Direction + "/" + c.Status
			}
		}
		edges[e.From+">"+e.To] = edge{e.Kind, s}
	}
	want := map[string]edge{
		"n1>n3": {"next", ""}, "n3>n8": {"next", ""}, "n8>n14": {"next", ""}, "n14>n19": {"next", ""},
		"n19>n26": {"next", ""}, "n26>n27": {"next", ""},
		"n19>n27": {"handoff", "passed code-analyzer>security-reviewer code-analyzer/output/passed security-reviewer/input/passed"},
		"n27>n32": {"next", ""}, "n32>n39": {"next", ""}, "n39>n40": {"next", ""},
		"n32>n40": {"handoff", "passed security-reviewer>fix-implementer security-reviewer/output/passed fix-implementer/input/passed"},
		"n40>n47": {"next", ""},
	}
	if len(edges) != len(want) {
		t.Fatalf("%d edges, want %d: %v", len(edges), len(want), edges)
	}
	for k, w := range want {
		if edges[k] != w {
			t.Errorf("edge %s: %+v, want %+v", k, edges[k], w)
		}
	}
	for _, e := range f.Edges {
		if e.Kind == "handoff" && e.From == "n19" && (e.Handoff.Seq != 23 || e.Handoff.Summary != "Review F1 for exploitability" || e.Handoff.Depth == nil || *e.Handoff.Depth != 1) {
			t.Fatalf("handoff edge %+v", e.Handoff)
		}
	}

	// A page that starts at the receiver still has the handoff edge into it.
	var p debugger.FlowPage
	get(t, base+"/flow?from=27&limit=1").json(t, &p)
	if len(p.Nodes) != 1 || len(p.Edges) != 2 || p.Edges[1].Kind != "handoff" || p.Edges[1].From != "n19" || p.Edges[1].Handoff == nil || len(p.Lanes) != 5 {
		t.Fatalf("page at the receiver %+v", p)
	}
}

func TestStateFactStoreAtSeq(t *testing.T) {
	t.Parallel()
	base := crewServer(t)
	type fact struct {
		ID          string
		Text        string
		Confidence  *float64
		Band        string
		Seq         uint64
		Kind        string
		Assessments []struct {
			Agent      string
			Confidence float64
			Seq        uint64
		}
		Consensus *struct {
			Seq            uint64
			Assessors      []string
			Agreement      *float64
			ConsensusScore *float64 `json:"consensus_score"`
			ConflictLevel  *float64 `json:"conflict_level"`
		}
	}
	at := func(seq string) []fact {
		var r struct {
			FactStore []fact `json:"fact_store"`
		}
		get(t, base+"/state?seq="+seq).json(t, &r)
		return r.FactStore
	}
	if got := at("4"); len(got) != 0 {
		t.Fatalf("facts before the first: %+v", got)
	}
	near := func(p *float64, v float64) bool { return p != nil && math.Abs(*p-v) < 1e-9 }
	// Added by the analyzer.
	f := at("5")
	if len(f) != 1 || f[0].ID != "F1" || !near(f[0].Confidence, 0.85) || f[0].Kind != "added" || f[0].Band != "proceed" ||
		len(f[0].Assessments) != 1 || f[0].Assessments[0].Agent != "code-analyzer" || f[0].Consensus != nil {
		t.Fatalf("at 5: %+v", f)
	}
	// The reviewer's first step: one hop, decayed by 0.95.
	f = at("27")
	if !near(f[0].Confidence, 0.8075) || f[0].Kind != "hop" || f[0].Seq != 27 || len(f[0].Assessments) != 1 {
		t.Fatalf("at 27: %+v", f)
	}
	// Confirmed by consensus: two assessors, the chain's consensus block.
	f = at("29")
	c := f[0].Consensus
	if !near(f[0].Confidence, 0.95) || f[0].Kind != "modified" || !strings.HasPrefix(f[0].Text, "CONFIRMED") || len(f[0].Assessments) != 2 ||
		f[0].Assessments[1].Agent != "security-reviewer" || c == nil || c.Seq != 29 || strings.Join(c.Assessors, ",") != "code-analyzer,security-reviewer" ||
		!near(c.Agreement, 0.9) || !near(c.ConsensusScore, 0.902) || !near(c.ConflictLevel, 0.1) {
		t.Fatalf("at 29: %+v %+v", f, c)
	}
	// The fact_modified has no step number; its step is step 5, whose
	// verdict (by the validator) is shown with it.
	var st stateResp
	get(t, base+"/state?seq=29").json(t, &st)
	if st.Step == nil || st.Step.Step == nil || *st.Step.Step != 5 || st.Step.Decision != "allow" || st.Step.StartSeq != 27 || st.Step.Verdict == nil {
		t.Fatalf("step at 29: %+v", st.Step)
	}
	// After the second hop.
	f = at("47")
	if !near(f[0].Confidence, 0.9025) || f[0].Seq != 40 || f[0].Consensus == nil {
		t.Fatalf("at 47: %+v", f)
	}
}

// A chain without facts has an empty fact store, not null.
func TestStateFactStoreEmpty(t *testing.T) {
	t.Parallel()
	srv, _ := twoRuns(t)
	raw := get(t, srv.URL+"/api/chains/run-a/state?seq=3")
	if !bytes.Contains(raw.body, []byte(`"fact_store":[]`)) {
		t.Fatalf("fact_store in %s", raw.body)
	}
}
