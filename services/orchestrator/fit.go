package orchestrator

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// maxRunAnswer bounds a run as GetRun and CancelRun answer it (a gRPC
// message is at most 16 MiB): each step is bounded (a proposal, a tool's
// output), their sum is not.
const maxRunAnswer = 8 << 20

// fitRun is r, or when r is larger than maxRunAnswer a copy with the
// bulk of its largest steps (arguments, results, long texts) replaced by
// a note naming the step's size and where the step is whole (WatchRun,
// the tracer's chain), until it fits. A step is never cut to look whole:
// what is left out says so. r is not changed (it may be the cache's).
func fitRun(r *xctv1.Run) *xctv1.Run {
	total := proto.Size(r)
	if total <= maxRunAnswer {
		return r
	}
	out := proto.CloneOf(r)
	steps := out.GetSteps()
	sizes := make([]int, len(steps))
	order := make([]int, len(steps))
	for i, s := range steps {
		sizes[i], order[i] = proto.Size(s), i
	}
	slices.SortStableFunc(order, func(i, j int) int { return sizes[j] - sizes[i] })
	for _, i := range order {
		if total <= maxRunAnswer {
			break
		}
		slimStep(steps[i], sizes[i], out.GetRunId())
		total += proto.Size(steps[i]) - sizes[i]
	}
	return out
}

// slimmable is the size past which a step's text is left out.
const slimmable = 1024

// slimStep replaces s's bulk by a note, in place.
func slimStep(s *xctv1.Step, size int, runID string) {
	note := fmt.Sprintf("[left out of this answer: step %d is %d bytes and the run past what one answer carries; WatchRun %s, or its chain from the tracer (lctl export --chain %s), has it whole]",
		s.GetNumber(), size, runID, runID)
	text := func(p *string) {
		if len(*p) > slimmable {
			*p = note
		}
	}
	value := func(v **structpb.Value) {
		if *v != nil && proto.Size(*v) > slimmable {
			*v = structpb.NewStringValue(note)
		}
	}
	fields := func(st *structpb.Struct) {
		for k, v := range st.GetFields() {
			value(&v)
			st.Fields[k] = v
		}
	}
	errorOf := func(e *xctv1.Error) {
		if e == nil {
			return
		}
		text(&e.Message)
		fields(e.Details)
	}
	if p := s.GetProposal(); p != nil {
		fields(p.Arguments)
		text(&p.Goal)
	}
	if v := s.GetVerdict(); v != nil {
		for _, r := range v.GetReasons() {
			text(&r.Message)
		}
		errorOf(v.Error)
	}
	if resp := s.GetResponse(); resp != nil {
		if ok := resp.GetSuccess(); ok != nil {
			value(&ok.Result)
		}
		errorOf(resp.GetError())
	}
}
