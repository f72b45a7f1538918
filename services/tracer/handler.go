package tracer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

// defaultListLimit is ListChains' limit when the request gives none.
const defaultListLimit = 100

// handler serves lctlv1.TracerServiceServer from the service's store.
type handler struct {
	lctlv1.UnimplementedTracerServiceServer
	svc *Service
}

// ListChains lists materialized chains, newest last event first.
func (h *handler) ListChains(ctx context.Context, req *lctlv1.ListChainsRequest) (*lctlv1.ListChainsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, h.status(ctx, fmt.Errorf("%w: limit %d is negative", ErrInvalidRequest, limit))
	case limit == 0:
		limit = defaultListLimit
	}
	sums, err := h.svc.store.list(limit)
	if err != nil {
		return nil, h.status(ctx, err)
	}
	resp := &lctlv1.ListChainsResponse{Chains: make([]*lctlv1.ChainSummary, 0, len(sums))}
	for _, sum := range sums {
		resp.Chains = append(resp.Chains, listSummary(summaryProto(sum)))
	}
	return resp, nil
}

// Bounds of a chain's summary in a list: a chain may have any number of
// agents (an OTLP exporter names them), so a list names the first
// maxListAgents, each cut at maxListAgentBytes, and 100 summaries fit one
// gRPC message whatever the chains; GetChain's summary names them all.
const (
	maxListAgents     = 64
	maxListAgentBytes = 256
)

// listSummary is s as a list shows it (its agents a new slice: s's may be
// the store's).
func listSummary(s *lctlv1.ChainSummary) *lctlv1.ChainSummary {
	agents := make([]string, 0, min(len(s.Agents), maxListAgents))
	for _, a := range s.Agents[:min(len(s.Agents), maxListAgents)] {
		agents = append(agents, truncateUTF8(a, maxListAgentBytes))
	}
	s.Agents = agents
	return s
}

// truncateUTF8 is s cut to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// GetChain returns a chain's summary and its events: all of them, or the
// page of page_size events from from_seq.
func (h *handler) GetChain(ctx context.Context, req *lctlv1.GetChainRequest) (*lctlv1.GetChainResponse, error) {
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	events := view.events
	if from := req.GetFromSeq(); from > 0 {
		i := sort.Search(len(events), func(i int) bool { return events[i].Seq >= from })
		events = events[i:]
	}
	var next uint64
	paged := req.GetPageSize() > 0
	if n := int(req.GetPageSize()); paged && len(events) > n {
		next = events[n].Seq
		events = events[:n]
	}
	resp := &lctlv1.GetChainResponse{
		Summary: summaryProto(view.summary),
		Events:  make([]*lctlv1.Event, 0, len(events)),
	}
	size := 0
	for i := range events {
		pe, err := lctlpb.ToProto(&events[i])
		if err != nil {
			return nil, h.status(ctx, err)
		}
		size += proto.Size(pe)
		if size > maxAnswerBytes && len(resp.Events) > 0 {
			if !paged {
				return nil, status.Errorf(codes.ResourceExhausted,
					"chain %s is more than %d bytes, past what one answer carries: ask for it by pages (page_size, then next_seq)", req.GetChainId(), maxAnswerBytes)
			}
			// A page ends where the next event would pass the bound; each
			// event is bounded by the stream's message size.
			next = events[i].Seq
			break
		}
		resp.Events = append(resp.Events, pe)
	}
	resp.NextSeq = next
	return resp, nil
}

// maxAnswerBytes bounds the events of one GetChain answer and one
// ExportChain file (a gRPC message is at most 16 MiB): a run's events are
// each bounded, their sum is not.
const maxAnswerBytes = 8 << 20

// maxExportBytes bounds an ExportChain file: 1 MiB under a gRPC message.
const maxExportBytes = 15 << 20

// ReplayChain returns the state of a chain after to_seq (0: all of it),
// rebuilt from the chain's nearest snapshot: at most Config.SnapshotEvery
// events are applied, whatever the chain's length. A to_seq past the
// chain's last event is OUT_OF_RANGE rather than clamped, so a caller never
// mistakes the end of the chain for the point it asked for.
func (h *handler) ReplayChain(ctx context.Context, req *lctlv1.ReplayChainRequest) (*lctlv1.ReplayChainResponse, error) {
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	var last uint64
	if n := len(view.events); n > 0 {
		last = view.events[n-1].Seq
	}
	if req.GetToSeq() > last {
		err := fmt.Errorf("%w: to_seq %d, chain %s ends at %d", ErrSeqOutOfRange, req.GetToSeq(), req.GetChainId(), last)
		return nil, h.status(ctx, err)
	}
	switch req.GetView() {
	case lctlv1.StateView_STATE_VIEW_UNSPECIFIED, lctlv1.StateView_STATE_VIEW_FULL, lctlv1.StateView_STATE_VIEW_SUMMARY:
	default:
		return nil, h.status(ctx, fmt.Errorf("%w: state view %d", ErrInvalidRequest, req.GetView()))
	}
	toSeq := req.GetToSeq()
	if toSeq == 0 {
		toSeq = last // the chain as this view saw it, even if more arrived since
	}
	summaryOnly := req.GetView() == lctlv1.StateView_STATE_VIEW_SUMMARY
	var (
		state *lctl.State
		from  uint64
	)
	if summaryOnly && !req.GetIncludeHash() {
		// Every field but the steps: the cost does not grow with the chain.
		state, from = view.timeline.SummaryAt(toSeq)
	} else {
		state, from = view.timeline.StateAtFrom(toSeq)
	}
	resp := &lctlv1.ReplayChainResponse{Seq: state.Seq, Summary: stateSummary(state, view.events), FromSnapshotSeq: from}
	if !summaryOnly {
		if resp.State, err = stateStruct(state); err != nil {
			return nil, h.status(ctx, err)
		}
	}
	if req.GetIncludeHash() {
		if resp.StateHash, err = state.Hash(); err != nil {
			return nil, h.status(ctx, err)
		}
	}
	return resp, nil
}

// stateSummary describes a state in the numbers `lctl replay --to-seq`
// prints.
func stateSummary(s *lctl.State, events []lctl.Event) *lctlv1.StateSummary {
	sum := &lctlv1.StateSummary{
		Seq: s.Seq, Events: uint64(s.EventCount), Facts: uint32(len(s.Facts)), Agents: uint32(len(s.Agents)),
		Errors: uint32(len(s.Errors)), ToolCalls: uint32(len(s.ToolCalls)), TokensIn: s.Tokens.Input, TokensOut: s.Tokens.Output,
		LastCheckpointSeq: s.LastCheckpointSeq, UnknownTypes: uint32(len(s.UnknownTypes)), LastTimestamp: s.LastTimestamp,
	}
	if s.Run != nil {
		sum.RunStatus = s.Run.Status
	}
	if n := len(s.Errors); n > 0 {
		sum.LastErrorSeq = s.Errors[n-1].Seq
	}
	if cs := s.CurrentStep; cs != nil {
		sum.Agent, sum.CurrentStepSeq, sum.CurrentIntent = cs.Agent, cs.Seq, cs.Intent
	} else {
		for i := min(s.EventCount, len(events)) - 1; i >= 0; i-- {
			if events[i].Type == lctl.TypeStepStart {
				sum.Agent = events[i].Agent
				break
			}
		}
	}
	return sum
}

// ExportChain returns the chain as an LCTL v4.0 file.
func (h *handler) ExportChain(ctx context.Context, req *lctlv1.ExportChainRequest) (*lctlv1.ExportChainResponse, error) {
	var (
		format      lctl.Format
		contentType string
	)
	switch req.GetFormat() {
	case lctlv1.ExportFormat_EXPORT_FORMAT_UNSPECIFIED, lctlv1.ExportFormat_EXPORT_FORMAT_JSON:
		format, contentType = lctl.FormatJSON, "application/json"
	case lctlv1.ExportFormat_EXPORT_FORMAT_YAML:
		format, contentType = lctl.FormatYAML, "application/yaml"
	default:
		return nil, h.status(ctx, fmt.Errorf("%w: export format %d", ErrInvalidRequest, req.GetFormat()))
	}
	view, err := h.svc.store.get(req.GetChainId())
	if err != nil {
		return nil, h.status(ctx, err)
	}
	var buf bytes.Buffer
	if err := lctl.NewFile(req.GetChainId(), view.events).Encode(&buf, format); err != nil {
		return nil, h.status(ctx, fmt.Errorf("export chain %s: %w", req.GetChainId(), err))
	}
	if buf.Len() > maxExportBytes {
		return nil, status.Errorf(codes.ResourceExhausted,
			"the export of chain %s is %d bytes, past what one answer carries: read its events by pages (GetChain with page_size; lctl export does)", req.GetChainId(), buf.Len())
	}
	return &lctlv1.ExportChainResponse{Content: buf.Bytes(), ContentType: contentType}, nil
}

func (h *handler) status(_ context.Context, err error) error { return errorCodes.Status(err) }

func summaryProto(sum chainSummary) *lctlv1.ChainSummary {
	return &lctlv1.ChainSummary{
		ChainId:        sum.id,
		Events:         uint64(sum.events),
		FirstTimestamp: sum.firstTimestamp,
		LastTimestamp:  sum.lastTimestamp,
		Agents:         sum.agents,
		Verified:       sum.verifyErr == "",
		VerifyError:    sum.verifyErr,
	}
}

// stateStruct converts the reducer's state through its JSON form.
func stateStruct(s *lctl.State) (*structpb.Struct, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("state as struct: %w", err)
	}
	return st, nil
}
