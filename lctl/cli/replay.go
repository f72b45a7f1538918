package cli

import (
	"context"
	"fmt"
	"strings"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/lctlpb"
	"github.com/xct-dev/xct/lctl/text"
)

// replayResult is replay's JSON output.
type replayResult struct {
	ChainID string `json:"chain_id"`
	// ToSeq is the seq asked for (0: the whole chain).
	ToSeq  uint64 `json:"to_seq"`
	Events int    `json:"events"`
	// Summary is what the text output's last line says.
	Summary   stateSummary `json:"summary"`
	StateHash string       `json:"state_hash,omitempty"`
	// Facts as they stand at the seq.
	Facts    []*analysis.FactRecord `json:"facts"`
	State    *lctl.State            `json:"state,omitempty"`
	Warnings []string               `json:"warnings"`
}

// stateSummary is the state in a few numbers.
type stateSummary struct {
	Seq               uint64            `json:"seq"`
	Events            int               `json:"events"`
	Facts             int               `json:"facts"`
	Agent             string            `json:"agent"`
	CurrentStep       *lctl.CurrentStep `json:"current_step"`
	Agents            []string          `json:"agents"`
	Errors            int               `json:"errors"`
	LastError         *lctl.ErrorRecord `json:"last_error,omitempty"`
	ToolCalls         int               `json:"tool_calls"`
	Tokens            lctl.Tokens       `json:"tokens"`
	RunStatus         string            `json:"run_status,omitempty"`
	RunMessage        string            `json:"run_message,omitempty"`
	RunSteps          int64             `json:"run_steps,omitempty"`
	LastCheckpointSeq uint64            `json:"last_checkpoint_seq"`
	UnknownTypes      map[string]int    `json:"unknown_types"`
}

func summarize(s *lctl.State, events []lctl.Event) stateSummary {
	sum := stateSummary{
		Seq: s.Seq, Events: s.EventCount, Facts: len(s.Facts), CurrentStep: s.CurrentStep,
		Agents: s.Agents, Errors: len(s.Errors), ToolCalls: s.ToolCallCount(), Tokens: s.Tokens,
		LastCheckpointSeq: s.LastCheckpointSeq, UnknownTypes: map[string]int{},
	}
	if sum.Agents == nil {
		sum.Agents = []string{}
	}
	if n := len(s.Errors); n > 0 {
		e := s.Errors[n-1]
		sum.LastError = &e
	}
	if s.Run != nil {
		sum.RunStatus, sum.RunMessage, sum.RunSteps = s.Run.Status, s.Run.Message, s.Run.Steps
	}
	sum.Agent = lastAgent(s, events)
	for t, n := range s.EventTypes {
		if !lctl.IsRecognizedType(t) {
			sum.UnknownTypes[t] = n
		}
	}
	return sum
}

// lastAgent is the agent of the step in progress, or else of the latest
// step_start applied.
func lastAgent(s *lctl.State, events []lctl.Event) string {
	if s.CurrentStep != nil {
		return s.CurrentStep.Agent
	}
	for i := s.EventCount - 1; i >= 0 && i < len(events); i-- {
		if events[i].Type == lctl.TypeStepStart {
			return events[i].Agent
		}
	}
	return ""
}

func runReplay(ctx context.Context, c *cmdContext) error {
	c.common()
	toSeq := c.fs.Uint64("to-seq", 0, "replay up to and including this seq and show the state there")
	showEvents := c.fs.Bool("events", false, "with --to-seq, also list the events up to it")
	withHash := c.fs.Bool("hash", false, "with --to-seq, also print the state's hash (what a checkpoint after that seq records); costs a pass over the whole state")
	hashVersion := c.fs.Int("hash-version", 2, "with --hash: the state hash's version, 2 or 1 (what checkpoints written before session 5 carry; chain files only)")
	if err := c.parse(); err != nil {
		return err
	}
	if *hashVersion != 1 && *hashVersion != 2 {
		return &usageError{fmt.Sprintf("--hash-version %d: the state hash's version is 1 or 2", *hashVersion)}
	}
	c.hashVersion = *hashVersion
	o, err := c.one()
	if err != nil {
		return err
	}
	if o.chain != "" && *toSeq != 0 && !*showEvents {
		if *withHash && *hashVersion != 2 {
			return &usageError{"--hash-version 1: a live chain's hash is version 2 (the tracer's); export the chain to a file for version 1"}
		}
		return c.replayLive(ctx, o.chain, *toSeq, *withHash)
	}
	if done, err := c.replayStream(o, *toSeq, *showEvents, *withHash); done || err != nil {
		return err
	}
	d, err := c.load(ctx, o)
	if err != nil {
		return err
	}
	c.reportInput(d)
	var last uint64
	for i := range d.events {
		last = max(last, d.events[i].Seq)
	}
	if *toSeq != 0 && *toSeq > last {
		return &inputError{fmt.Errorf("--to-seq %d: %s ends at seq %d", *toSeq, d.label, last)}
	}
	s := lctl.Replay(d.id, d.events, *toSeq)
	res := replayResult{ChainID: d.id, ToSeq: *toSeq, Events: s.EventCount, Summary: summarize(s, d.events),
		Facts: analysis.FactStore(d.events, *toSeq), Warnings: append([]string{}, d.warnings...)}
	for _, p := range d.problems {
		res.Warnings = append(res.Warnings, p.Message)
	}
	if w := notAppliedText(*toSeq, s.EventCount, d.events); w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	if *toSeq != 0 && *withHash {
		if res.StateHash, err = s.HashVersion(c.hashVersion); err != nil {
			return err
		}
	}
	if c.jsonOut {
		res.State = s
		return c.printJSON(res)
	}
	if *toSeq == 0 {
		c.out("Replaying %d events...\n", len(d.events))
		for i := range d.events {
			c.out("%s\n", analysis.Line(&d.events[i]))
		}
		c.out("Replay complete. Final state has %d %s.\n", len(s.Facts), plural(len(s.Facts), "fact", "facts"))
		c.printRecap(res.Summary)
		return nil
	}
	c.out("Replaying to event %d...\n", *toSeq)
	if *showEvents {
		for i := range d.events[:s.EventCount] {
			c.out("%s\n", analysis.Line(&d.events[i]))
		}
	}
	c.printStateAt(*toSeq, res.Summary, res.Facts, res.StateHash, d.events)
	return nil
}

// replayLive asks the tracer for the state at toSeq: it rebuilds it from
// its nearest snapshot, so (without the hash) this costs the same for any
// chain length.
func (c *cmdContext) replayLive(ctx context.Context, id string, toSeq uint64, withHash bool) error {
	t, err := c.tracerAPI()
	if err != nil {
		return err
	}
	view := lctlv1.StateView_STATE_VIEW_SUMMARY
	if c.jsonOut {
		view = lctlv1.StateView_STATE_VIEW_FULL
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := t.api.ReplayChain(cctx, &lctlv1.ReplayChainRequest{ChainId: id, ToSeq: toSeq, View: view, IncludeHash: withHash})
	if err != nil {
		return c.rpcError(id, err)
	}
	facts, err := t.api.QueryFacts(cctx, &lctlv1.QueryFactsRequest{ChainId: id, Query: "SELECT *", ToSeq: toSeq})
	if err != nil {
		return c.rpcError(id, err)
	}
	sum := summaryFromProto(resp.GetSummary())
	// The step in progress and the last error are shown from their events,
	// as for a file.
	var shown []lctl.Event
	for _, seq := range []uint64{sum.currentSeq(), resp.GetSummary().GetLastErrorSeq()} {
		if seq == 0 {
			continue
		}
		page, err := t.api.GetChain(cctx, &lctlv1.GetChainRequest{ChainId: id, FromSeq: seq, PageSize: 1})
		if err != nil {
			return c.rpcError(id, err)
		}
		for _, pe := range page.GetEvents() {
			shown = append(shown, lctlpb.FromProto(pe))
		}
	}
	for i := range shown {
		if shown[i].Type == lctl.TypeError {
			if errs := lctl.Replay(id, shown[i:i+1], 0).Errors; len(errs) == 1 {
				sum.LastError = &errs[0]
			}
		}
	}
	res := replayResult{ChainID: id, ToSeq: toSeq, Events: sum.Events, Summary: sum, StateHash: resp.GetStateHash(),
		Facts: factsFromProto(facts.GetFacts()), Warnings: []string{}}
	if c.jsonOut {
		if resp.GetState() != nil {
			raw, err := resp.GetState().MarshalJSON()
			if err != nil {
				return err
			}
			var st lctl.State
			if err := jsonUnmarshal(raw, &st); err != nil {
				return err
			}
			res.State = &st
		}
		return c.printJSON(res)
	}
	c.out("Replaying to event %d...\n", toSeq)
	c.printStateAt(toSeq, sum, res.Facts, res.StateHash, shown)
	return nil
}

func (s stateSummary) currentSeq() uint64 {
	if s.CurrentStep == nil {
		return 0
	}
	return s.CurrentStep.Seq
}

func summaryFromProto(p *lctlv1.StateSummary) stateSummary {
	s := stateSummary{
		Seq: p.GetSeq(), Events: int(p.GetEvents()), Facts: int(p.GetFacts()), Agent: p.GetAgent(),
		Errors: int(p.GetErrors()), ToolCalls: int(p.GetToolCalls()), Tokens: lctl.Tokens{Input: p.GetTokensIn(), Output: p.GetTokensOut()},
		RunStatus: p.GetRunStatus(), LastCheckpointSeq: p.GetLastCheckpointSeq(), Agents: []string{}, UnknownTypes: map[string]int{},
	}
	if p.GetCurrentStepSeq() != 0 {
		s.CurrentStep = &lctl.CurrentStep{Seq: p.GetCurrentStepSeq(), Agent: p.GetAgent(), Intent: p.GetCurrentIntent()}
	}
	if n := p.GetUnknownTypes(); n > 0 {
		s.UnknownTypes["(unknown)"] = int(n)
	}
	return s
}

func factsFromProto(fs []*lctlv1.Fact) []*analysis.FactRecord {
	out := make([]*analysis.FactRecord, 0, len(fs))
	for _, f := range fs {
		r := &analysis.FactRecord{ID: f.GetId(), Text: f.GetText(), Source: f.GetSource(), Tags: f.GetTags(),
			AddedBy: f.GetAddedBy(), UpdatedBy: f.GetUpdatedBy(), UpdatedSeq: f.GetUpdatedSeq(), Fields: map[string]any{}}
		if f.Confidence != nil {
			v := f.GetConfidence()
			r.Confidence = &v
		}
		if f.GetFields() != nil {
			r.Fields = f.GetFields().AsMap()
		}
		if r.Tags == nil {
			r.Tags = []string{}
		}
		out = append(out, r)
	}
	return out
}

// printStateAt prints the spec's "State at seq N: 2 facts, agent=X" and what
// someone debugging wants next: the facts, the step in progress, errors.
func (c *cmdContext) printStateAt(toSeq uint64, sum stateSummary, facts []*analysis.FactRecord, hash string, events []lctl.Event) {
	agent := sum.Agent
	if agent == "" {
		agent = "none"
	}
	c.out("State at seq %d: %d %s, agent=%s\n", toSeq, sum.Facts, plural(sum.Facts, "fact", "facts"), agent)
	if w := notAppliedText(toSeq, sum.Events, events); w != "" {
		c.out("  (%s)\n", w)
	} else if sum.Seq != toSeq && sum.Events > 0 {
		c.out("  (the chain has no event %d; the last event applied is seq %d)\n", toSeq, sum.Seq)
	}
	for _, f := range facts {
		c.out("  %s  %s  %s\n", f.ID, confText(f.Confidence), clipText(f.Text, 70))
	}
	if cs := sum.CurrentStep; cs != nil {
		line := fmt.Sprintf("[%d] %s: step_start", cs.Seq, agentOrDash(cs.Agent))
		for i := range events {
			if events[i].Seq == cs.Seq && events[i].Type == lctl.TypeStepStart {
				line = analysis.Line(&events[i])
				break
			}
		}
		if line == fmt.Sprintf("[%d] %s: step_start", cs.Seq, agentOrDash(cs.Agent)) && cs.Intent != "" {
			line += " (" + clipText(cs.Intent, 60) + ")"
		}
		c.out("  step in progress: %s\n", line)
	}
	switch {
	case sum.Errors == 0:
		c.out("  errors so far: none\n")
	case sum.LastError != nil:
		c.out("  errors so far: %d, the last at seq %d: %s\n", sum.Errors, sum.LastError.Seq, errorText(sum.LastError))
	default:
		c.out("  errors so far: %d\n", sum.Errors)
	}
	if sum.RunStatus != "" {
		c.out("  run: %s\n", sum.RunStatus)
	}
	if hash != "" {
		c.out("  state_hash: %s\n", hash)
	}
}

// printRecap follows "Replay complete" with what the final state says
// beyond its facts.
func (c *cmdContext) printRecap(sum stateSummary) {
	var parts []string
	if len(sum.Agents) > 0 {
		parts = append(parts, "agents: "+strings.Join(sum.Agents, ", "))
	}
	parts = append(parts, fmt.Sprintf("tool calls: %d", sum.ToolCalls), fmt.Sprintf("errors: %d", sum.Errors))
	if t := sum.Tokens.Input + sum.Tokens.Output; t > 0 {
		parts = append(parts, "tokens: "+analysis.FormatCount(t))
	}
	c.out("  %s\n", strings.Join(parts, "; "))
	if sum.RunStatus != "" {
		line := fmt.Sprintf("  run: %s after %d %s", sum.RunStatus, sum.RunSteps, plural(int(sum.RunSteps), "step", "steps"))
		if sum.RunMessage != "" {
			line += ": " + clipText(sum.RunMessage, 80)
		}
		c.out("%s\n", line)
	}
	if sum.CurrentStep != nil {
		c.out("  a step is still in progress: seq %d by %s\n", sum.CurrentStep.Seq, agentOrDash(sum.CurrentStep.Agent))
	}
	if len(sum.UnknownTypes) > 0 {
		c.out("  unknown event types, kept: %s\n", sortedCounts(sum.UnknownTypes))
	}
}

func errorText(e *lctl.ErrorRecord) string {
	kind := strings.Trim(e.Category+"/"+e.Type, "/")
	if e.Code != "" {
		kind = e.Code + " " + kind
	}
	if e.Message != "" {
		return strings.TrimSpace(kind + ": " + clipText(e.Message, 70))
	}
	return kind
}

func confText(c *float64) string {
	if c == nil {
		return "  -  "
	}
	return fmt.Sprintf("%.2f", *c)
}

func agentOrDash(a string) string {
	if a == "" {
		return "-"
	}
	return a
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func clipText(s string, n int) string {
	return text.TruncateRunes(strings.Join(strings.Fields(s), " "), n)
}

// notAppliedText says which events of seq at most toSeq a replay to toSeq
// did not apply because they come later in the file than an event beyond
// toSeq (replay applies events in file order and stops there); "" when
// there are none.
func notAppliedText(toSeq uint64, applied int, events []lctl.Event) string {
	if toSeq == 0 || applied >= len(events) {
		return ""
	}
	var left []string
	for i := applied; i < len(events); i++ {
		if events[i].Seq <= toSeq {
			left = append(left, fmt.Sprintf("%d (at position %d)", events[i].Seq, i+1))
		}
	}
	if len(left) == 0 {
		return ""
	}
	stop := &events[applied]
	if len(left) > 5 {
		left = append(left[:5], fmt.Sprintf("%d more", len(left)-5))
	}
	return fmt.Sprintf("events are out of order: replay applies them in file order and stopped at position %d, seq %d, the first beyond %d; %s %s not applied, so this is the state after the first %d events of the file, not after every event up to seq %d",
		applied+1, stop.Seq, toSeq, plural(len(left), "event", "events")+" "+strings.Join(left, ", "), plural(len(left), "is", "are"), applied, toSeq)
}
