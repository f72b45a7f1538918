package xctevent

import (
	"time"

	"github.com/xct-dev/xct/lctl"
)

// Run is the run view of an XCT chain: what its events say about the run
// and each of its steps, as typed values. It is the one fold of XCT's
// events: the orchestrator's run record (GetRun, WatchRun), the point where
// a taken-over run continues, and the validator's recheck of a recorded run
// are each read from a Run, not from the events again.
//
// Apply is incremental and idempotent by seq (an event at or below LastSeq
// is ignored), so a view kept up to date while a run writes its chain and
// a view folded from the whole chain afterwards are the same. Apply never
// fails: it reads what Parse reads; checks a caller needs beyond that (the
// validator's strict reading of a chain) are the caller's.
type Run struct {
	// ChainID is the first event's chain id.
	ChainID string
	// Started is the run_started payload; HasStarted reports whether the
	// chain had one. StartedAt is its time (else the first step's).
	Started    RunStarted
	HasStarted bool
	StartedAt  time.Time
	// Status is the run's status as the chain leaves it: StatusRunning
	// until it ends (StatusDone, StatusFailed, StatusCancelled), or waiting
	// (StatusWaitingApproval, StatusInDoubt) while a step waits.
	Status string
	// Finished is the run_finished payload once the run ended.
	Finished *RunFinished
	// Steps are the steps in the order they started; a step number
	// proposed again (after a takeover) is a second Step.
	Steps []*Step
	// Tokens are the steps' tokens summed, replaced by run_finished's own
	// totals when it has them (authoritative, and all a view folded from
	// a chain's two ends has).
	Tokens Tokens
	// ConsecutiveErrors counts the ended steps since the last success;
	// InvalidInARow the ended steps since the last one that was not an
	// invalid output.
	ConsecutiveErrors, InvalidInARow int
	// After is what happened after the last step ended and before any next
	// step started: an error outside a step (a budget, the model's
	// endpoint), which ends the run.
	After *Error
	// LastSeq and UpdatedAt are the last applied event's.
	LastSeq   uint64
	UpdatedAt time.Time
}

// Run statuses a run has while it is not over (the view's Status; a
// chain's run_finished carries one of StatusDone, StatusFailed,
// StatusCancelled).
const (
	StatusRunning         = "running"
	StatusWaitingApproval = "waiting_approval"
	StatusInDoubt         = "in_doubt"
)

// Step is one proposed step and what became of it.
type Step struct {
	// Seq, At and Agent are the step_start event's.
	Seq   uint64
	At    time.Time
	Agent string
	// Start is the proposal (or the invalid output).
	Start StepStart
	// Verdicts are the validator's verdicts in order (a step that waited
	// for a human has the policy's and the one after the approval);
	// VerdictAgent is the agent that recorded the last.
	Verdicts     []Verdict
	VerdictAgent string
	// Requested is the approval request, Decided its decision.
	Requested *ApprovalRequested
	Decided   *ApprovalDecided
	// InDoubt reports a step_in_doubt on the chain: the step's outcome was
	// not known then (Result or Error, when there, came after it).
	InDoubt bool
	// DoubtSeq is the seq of the step's step_in_doubt while nothing of the
	// step followed it (no verdict for another attempt, no outcome, no
	// step_end): the doubt a human's decision settles now. 0 otherwise.
	DoubtSeq uint64
	// Result is the successful execution; Error the step's error signal.
	Result *ToolCall
	Error  *Error
	// End closes the step.
	End *StepEnd
}

// Number is the step's number.
func (s *Step) Number() int { return s.Start.Step }

// Verdict is the step's last verdict, nil when it has none.
func (s *Step) Verdict() *Verdict {
	if len(s.Verdicts) == 0 {
		return nil
	}
	return &s.Verdicts[len(s.Verdicts)-1]
}

// Allowed reports whether the step's last verdict allows it.
func (s *Step) Allowed() bool { v := s.Verdict(); return v != nil && v.Decision == DecisionAllow }

// LastAllow is the step's last allow verdict that started an attempt, nil
// when none did. An allow followed by a rejudged verdict started none:
// the executor refused it before acting (its policy was replaced).
func (s *Step) LastAllow() *Verdict {
	for i := len(s.Verdicts) - 1; i >= 0; i-- {
		if s.Verdicts[i].Decision == DecisionAllow && (i+1 == len(s.Verdicts) || !s.Verdicts[i+1].Rejudged) {
			return &s.Verdicts[i]
		}
	}
	return nil
}

// Attempted reports whether a verdict ever allowed the step and started
// an attempt: it may have reached the executor and acted, whatever a
// later verdict says. A verdict after an allow is one asked for a new
// attempt (a takeover's or a re-run's); its refusal means only that no
// new attempt started, never that the step was not executed. A rejudged
// verdict is the exception: the allow before it did not act.
func (s *Step) Attempted() bool { return s.LastAllow() != nil }

// Ended reports whether the step has its step_end.
func (s *Step) Ended() bool { return s.End != nil }

// Open is the last step when it has not ended, else nil.
func (r *Run) Open() *Step {
	if n := len(r.Steps); n > 0 && !r.Steps[n-1].Ended() {
		return r.Steps[n-1]
	}
	return nil
}

// Last is the last step, nil before the first.
func (r *Run) Last() *Step {
	if n := len(r.Steps); n > 0 {
		return r.Steps[n-1]
	}
	return nil
}

// Over reports whether the run has ended (run_finished is on the chain).
func (r *Run) Over() bool { return r.Finished != nil }

// step is the latest step with number n, nil when there is none.
func (r *Run) step(n int) *Step {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Start.Step == n {
			return r.Steps[i]
		}
	}
	return nil
}

// Fold folds events into a new Run.
func Fold(events []lctl.Event) *Run {
	r := &Run{}
	for i := range events {
		r.Apply(&events[i])
	}
	return r
}

// settle: a run waiting on a step in doubt runs again once the step's
// outcome is on the chain.
func (r *Run) settle() {
	if r.Status == StatusInDoubt {
		r.setLive(StatusRunning)
	}
}

// setLive sets a status of a run that has not ended (running, waiting for
// a human, in doubt), unless run_finished is on the chain: the steps of a
// rollback come after it, and an undo that waits for a human does not
// make the ended run live again.
func (r *Run) setLive(status string) {
	if r.Finished == nil {
		r.Status = status
	}
}

// Apply folds one event into the view.
func (r *Run) Apply(e *lctl.Event) { r.ApplyParsed(e, nil) }

// ApplyParsed is Apply for an event its caller has parsed already: x is
// Parse(e), or nil to have it parsed here.
func (r *Run) ApplyParsed(e *lctl.Event, x Event) {
	if e.Seq != 0 && e.Seq <= r.LastSeq {
		return // already applied (a replay after a live append)
	}
	if r.ChainID == "" {
		r.ChainID = e.ChainID
	}
	if e.Seq != 0 {
		r.LastSeq = e.Seq
	}
	r.UpdatedAt = e.Time()
	if e.Type == lctl.TypeModelRouting {
		// A crew's fallback after a failed model call: what that call
		// used (run_finished's totals replace it).
		if t, ok := e.Data["failed_tokens"].(map[string]any); ok {
			r.Tokens.Input += Int(t, "input")
			r.Tokens.Output += Int(t, "output")
		}
		return
	}
	if x == nil {
		x = Parse(e)
	}
	switch x := x.(type) {
	case RunStarted:
		r.Started, r.HasStarted = x, true
		r.StartedAt = e.Time()
		r.Status = StatusRunning
	case StepStart:
		if _, ok := e.Data["step"]; !ok {
			return // not an XCT step (another producer's step_start)
		}
		if r.StartedAt.IsZero() {
			r.StartedAt = e.Time()
		}
		r.Steps = append(r.Steps, &Step{Seq: e.Seq, At: e.Time(), Agent: e.Agent, Start: x})
		r.After = nil
	case Verdict:
		if st := r.step(x.Step); st != nil {
			st.Verdicts = append(st.Verdicts, x)
			st.VerdictAgent = e.Agent
			st.DoubtSeq = 0 // another attempt's verdict
		}
	case ApprovalRequested:
		if st := r.step(x.Step); st != nil {
			st.Requested = &x
		}
		r.setLive(StatusWaitingApproval)
	case ApprovalDecided:
		if st := r.step(x.Step); st != nil {
			st.Decided = &x
		}
		r.setLive(StatusRunning)
	case StepInDoubt:
		if st := r.step(x.Step); st != nil {
			st.InDoubt = true
			if x.StepID == st.Start.StepID {
				st.DoubtSeq = e.Seq
			}
		}
		r.setLive(StatusInDoubt)
	case ToolCall:
		st := r.step(x.Step)
		if st != nil {
			st.Result, st.DoubtSeq = &x, 0
		}
		r.settle()
	case Error:
		st := r.Open()
		if st != nil && st.Start.Step != x.Step {
			st = r.step(x.Step)
		}
		if st == nil || st.Ended() {
			r.After = &x // outside a step: a budget or the model's endpoint
			if x.Tokens != nil {
				// a failed model call's (run_finished's totals replace them)
				r.Tokens.Input += x.Tokens.Input
				r.Tokens.Output += x.Tokens.Output
			}
			if u := x.Unrecorded; u != nil {
				r.Tokens.Input += u.Tokens.Input
				r.Tokens.Output += u.Tokens.Output
			}
		} else {
			st.Error, st.DoubtSeq = &x, 0
		}
		r.settle()
	case StepEnd:
		st := r.step(x.Step)
		if st == nil {
			return
		}
		st.End, st.DoubtSeq = &x, 0
		if x.Tokens != nil {
			r.Tokens.Input += x.Tokens.Input
			r.Tokens.Output += x.Tokens.Output
		}
		if x.Outcome == OutcomeSuccess {
			r.ConsecutiveErrors = 0
		} else {
			r.ConsecutiveErrors++
		}
		if x.Outcome == OutcomeInvalid {
			r.InvalidInARow++
		} else {
			r.InvalidInARow = 0
		}
	case RunFinished:
		r.Finished = &x
		if _, ok := e.Data["tokens"].(map[string]any); ok {
			r.Tokens = x.Tokens
		}
		switch x.Status {
		case StatusDone, StatusCancelled:
			r.Status = x.Status
		default:
			r.Status = StatusFailed
		}
	}
}
