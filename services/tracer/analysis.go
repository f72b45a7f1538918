package tracer

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl/analysis"
)

// The analysis RPCs run the lctl analyses (package lctl/analysis) on a
// materialized chain, so clients in any language get what `lctl` prints.

// VerifyChain checks a chain's seqs, timestamps, hash chain and checkpoints.
func (h *handler) VerifyChain(ctx context.Context, req *lctlv1.VerifyChainRequest) (*lctlv1.VerifyChainResponse, error) {
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	r := analysis.Verify(req.GetChainId(), view.events)
	resp := &lctlv1.VerifyChainResponse{Ok: r.OK, Events: uint64(r.Events), Notes: r.Notes}
	for _, c := range r.Checks {
		resp.Checks = append(resp.Checks, &lctlv1.VerifyCheck{Name: c.Name, Ok: c.OK, Summary: c.Summary, Problems: uint32(c.Problems)})
	}
	for _, p := range r.Problems {
		resp.Problems = append(resp.Problems, &lctlv1.Problem{Seq: p.Seq, Position: uint32(p.Position), Kind: p.Kind, Message: p.Message})
	}
	return resp, nil
}

// DiffChains aligns two chains and lists their differences.
func (h *handler) DiffChains(ctx context.Context, req *lctlv1.DiffChainsRequest) (*lctlv1.DiffChainsResponse, error) {
	a, err := h.svc.store.get(req.GetChainIdA())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	b, err := h.svc.store.get(req.GetChainIdB())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	ignore := append([]string{}, analysis.DefaultDiffIgnore()...)
	if req.GetCompareAllFields() {
		ignore = []string{}
	}
	ignore = append(ignore, req.GetIgnoreFields()...)
	// Two similar chains of a million events take seconds to align: a
	// caller gone (or past its deadline) stops the work.
	r, err := analysis.DiffContext(ctx, analysis.Chain{Label: "v1", ID: req.GetChainIdA(), Events: a.events},
		analysis.Chain{Label: "v2", ID: req.GetChainIdB(), Events: b.events}, analysis.DiffOptions{Ignore: ignore})
	if err != nil {
		return nil, h.status(ctx, err)
	}
	resp := &lctlv1.DiffChainsResponse{Identical: r.Identical, Changed: uint32(r.Changed), Added: uint32(r.Added),
		Removed: uint32(r.Removed), Aligned: r.Aligned, IgnoredFields: r.Ignored}
	for _, d := range r.Differences {
		pd := &lctlv1.Difference{Kind: d.Kind, A: refProto(d.V1), B: refProto(d.V2)}
		for _, f := range d.Fields {
			va, err := structpb.NewValue(f.V1)
			if err != nil {
				return nil, h.status(ctx, fmt.Errorf("diff field %s: %w", f.Path, err))
			}
			vb, err := structpb.NewValue(f.V2)
			if err != nil {
				return nil, h.status(ctx, fmt.Errorf("diff field %s: %w", f.Path, err))
			}
			pd.Fields = append(pd.Fields, &lctlv1.FieldChange{Path: f.Path, A: va, B: vb})
		}
		resp.Differences = append(resp.Differences, pd)
	}
	return resp, nil
}

func refProto(r *analysis.EventRef) *lctlv1.EventRef {
	if r == nil {
		return nil
	}
	return &lctlv1.EventRef{Seq: r.Seq, Position: uint32(r.Position), Agent: r.Agent, Type: r.Type, Subject: r.Subject, Detail: r.Detail}
}

// ChainStats summarizes a chain, pricing its tokens with the request's
// table.
func (h *handler) ChainStats(ctx context.Context, req *lctlv1.ChainStatsRequest) (*lctlv1.ChainStatsResponse, error) {
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	var prices *analysis.Prices
	if len(req.GetPrices()) > 0 {
		prices = &analysis.Prices{Models: map[string]analysis.ModelPrice{}}
		for name, p := range req.GetPrices() {
			if p.GetInputPer_1K() < 0 || p.GetOutputPer_1K() < 0 {
				return nil, h.status(ctx, fmt.Errorf("%w: model %q has a negative price", ErrInvalidRequest, name))
			}
			prices.Models[name] = analysis.ModelPrice{InputPer1K: p.GetInputPer_1K(), OutputPer1K: p.GetOutputPer_1K()}
		}
	}
	st := analysis.ComputeStats(req.GetChainId(), view.events, prices)
	resp := &lctlv1.ChainStatsResponse{
		Events: uint64(st.Events), DurationMs: st.DurationMS, DurationSource: st.DurationSource, WallClockMs: st.WallClockMS,
		TokensIn: st.Tokens.Input, TokensOut: st.Tokens.Output, Cost: st.Cost, Unpriced: st.Unpriced, Agents: st.Agents,
		Errors: uint32(st.Errors), Facts: uint32(st.Facts), AvgConfidence: st.AvgConfidence, Steps: uint32(st.Steps),
		ToolCalls: uint32(st.ToolCalls), EventTypes: map[string]uint32{}, RunStatus: st.RunStatus,
	}
	for k, v := range st.EventTypes {
		resp.EventTypes[k] = uint32(v)
	}
	for _, mc := range st.CostByModel {
		resp.CostByModel = append(resp.CostByModel, &lctlv1.ModelCost{Model: mc.Model, InputTokens: mc.Input, OutputTokens: mc.Output, Cost: mc.Cost})
	}
	return resp, nil
}

// FindBottlenecks lists the slowest steps.
func (h *handler) FindBottlenecks(ctx context.Context, req *lctlv1.FindBottlenecksRequest) (*lctlv1.FindBottlenecksResponse, error) {
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	r := analysis.Bottlenecks(req.GetChainId(), view.events, int(req.GetTop()))
	resp := &lctlv1.FindBottlenecksResponse{TotalMs: r.TotalMS, Recommendation: r.Recommendation}
	for _, s := range r.Steps {
		resp.Steps = append(resp.Steps, timingProto(s))
	}
	for _, s := range r.Unfinished {
		resp.Unfinished = append(resp.Unfinished, timingProto(s))
	}
	for _, a := range r.ByAgent {
		resp.ByAgent = append(resp.ByAgent, &lctlv1.AgentTime{Agent: a.Agent, DurationMs: a.DurationMS, Share: a.Share, Steps: uint32(a.Steps)})
	}
	return resp, nil
}

func timingProto(s analysis.StepTiming) *lctlv1.StepTiming {
	return &lctlv1.StepTiming{Agent: s.Agent, Step: s.Step, StartSeq: s.StartSeq, DurationMs: s.DurationMS, Share: s.Share,
		ToolMs: s.ToolMS, Unfinished: s.Unfinished, Intent: s.Intent}
}

// FactConfidence follows every fact's confidence.
func (h *handler) FactConfidence(ctx context.Context, req *lctlv1.FactConfidenceRequest) (*lctlv1.FactConfidenceResponse, error) {
	if r := req.GetDecayRate(); r < 0 || r > 1 {
		return nil, h.status(ctx, fmt.Errorf("%w: decay_rate %v is not in (0, 1]", ErrInvalidRequest, r))
	}
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	r := analysis.Confidence(req.GetChainId(), view.events, analysis.ConfidenceOptions{DecayRate: req.GetDecayRate()})
	resp := &lctlv1.FactConfidenceResponse{Warnings: r.Warnings, Hops: uint32(r.Hops), DecayRate: r.DecayRate}
	for _, f := range r.Facts {
		pf := &lctlv1.FactTimeline{Id: f.ID, Text: f.Text, Final: f.Final, Band: f.Band, Labels: f.Labels, BlockedSeq: f.BlockedSeq}
		for _, p := range f.Points {
			pf.Points = append(pf.Points, &lctlv1.ConfidencePoint{Seq: p.Seq, Agent: p.Agent, Kind: p.Kind, Value: p.Value, Blocked: p.Blocked, Reason: p.Reason})
		}
		if c := f.Consensus; c != nil {
			score := c.Score
			pf.ConsensusScore, pf.Conflict = &score, c.Conflict
		}
		resp.Facts = append(resp.Facts, pf)
	}
	return resp, nil
}

// QueryFacts runs a fact-store query. A query that does not parse, or names
// a field no fact has, is INVALID_ARGUMENT with the position.
func (h *handler) QueryFacts(ctx context.Context, req *lctlv1.QueryFactsRequest) (*lctlv1.QueryFactsResponse, error) {
	q, err := analysis.ParseQuery(req.GetQuery())
	if err != nil {
		return nil, h.status(ctx, fmt.Errorf("%w: query: %w", ErrInvalidRequest, err))
	}
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	rows, err := q.RunContext(ctx, view.facts.at(view.events, req.GetToSeq()))
	if err != nil {
		var qe *analysis.QueryError
		if errors.As(err, &qe) {
			return nil, h.status(ctx, fmt.Errorf("%w: query: %w", ErrInvalidRequest, err))
		}
		return nil, h.status(ctx, err)
	}
	resp := &lctlv1.QueryFactsResponse{Columns: q.Columns()}
	for _, f := range rows {
		fields, err := structpb.NewStruct(f.Fields)
		if err != nil {
			return nil, h.status(ctx, fmt.Errorf("fact %s: %w", f.ID, err))
		}
		resp.Facts = append(resp.Facts, &lctlv1.Fact{Id: f.ID, Text: f.Text, Confidence: f.Confidence, Source: f.Source, Tags: f.Tags,
			Fields: fields, AddedBy: f.AddedBy, UpdatedBy: f.UpdatedBy, UpdatedSeq: f.UpdatedSeq})
	}
	return resp, nil
}

// ValidateContracts checks a chain against the contracts in the request.
func (h *handler) ValidateContracts(ctx context.Context, req *lctlv1.ValidateContractsRequest) (*lctlv1.ValidateContractsResponse, error) {
	if len(req.GetFiles()) == 0 {
		return nil, h.status(ctx, fmt.Errorf("%w: no contract files", ErrInvalidRequest))
	}
	cs := analysis.NewContractSet()
	for _, f := range req.GetFiles() {
		if err := cs.Add(f.GetName(), f.GetContent()); err != nil {
			return nil, h.status(ctx, fmt.Errorf("%w: %w", ErrInvalidRequest, err))
		}
	}
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	r := analysis.ValidateContracts(req.GetChainId(), view.events, cs)
	resp := &lctlv1.ValidateContractsResponse{Ok: r.OK, Violations: uint32(r.Violations)}
	for _, res := range r.Results {
		pr := &lctlv1.ContractResult{Agent: res.Agent, Direction: res.Direction, Checked: uint32(res.Checked), Ok: res.OK}
		for _, v := range res.Violations {
			pr.Violations = append(pr.Violations, &lctlv1.Violation{Seq: v.Seq, Subject: v.Subject, Message: v.Message, Rule: v.Rule})
		}
		resp.Results = append(resp.Results, pr)
	}
	return resp, nil
}
