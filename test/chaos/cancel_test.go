package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// Cancels at the worst moments (session 21): the suite cancels a run
// through either orchestrator, as a client behind round-robin that asks
// again while told UNAVAILABLE ("ask again"), and notes when CancelRun
// answered OK. The check: no step of the run starts after that answer (no
// step_start timed after it, on any owner), and the chain ends cancelled.
const (
	// faultCancelMidPropose cancels the run whose model call is out (the
	// model's trap), then lets the model answer: the answer arrives after
	// the cancel was answered, and must not become a step.
	faultCancelMidPropose faultKind = "cancel-mid-propose"
	// faultCancelKillOwner is faultCancelMidPropose with the owner
	// SIGKILLed right after the cancel was answered (restarted after the
	// hold): the next owner must record the cancel, not resume the run.
	faultCancelKillOwner faultKind = "cancel-then-kill-owner"
	// faultCancelMidCall cancels the run whose tool call is in the
	// ledger tool (its "before" trap: claimed, not acted yet): the call
	// finishes and is recorded, no other step starts.
	faultCancelMidCall faultKind = "cancel-mid-call"
)

// cancelKinds are the cancel faults (every phase).
var cancelKinds = []faultKind{faultCancelMidPropose, faultCancelKillOwner, faultCancelMidCall}

// canceller cancels runs as alice (who starts them) through either
// orchestrator, and remembers what each cancel was answered.
type canceller struct {
	orch [2]xctv1.OrchestratorServiceClient

	mu   sync.Mutex
	next int
	// answered: the cancels answered OK, by run: when the answer came;
	// refused: those refused (FAILED_PRECONDITION), when, and why.
	answered map[string]time.Time
	refused  map[string]refusal
}

// refusal is a cancel refused: when the answer came, and its message.
type refusal struct {
	at  time.Time
	why string
}

func newCanceller(orch [2]xctv1.OrchestratorServiceClient) *canceller {
	return &canceller{orch: orch, answered: map[string]time.Time{}, refused: map[string]refusal{}}
}

// cancel cancels run, asking the orchestrators in turn while the answer
// is UNAVAILABLE or a deadline; it says what the last answer was.
func (k *canceller) cancel(ctx context.Context, run string) string {
	var answers []string
	for attempt := 0; attempt < 12 && ctx.Err() == nil; attempt++ {
		k.mu.Lock()
		c := k.orch[k.next%2]
		k.next++
		k.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.CancelRun(cctx, &xctv1.CancelRunRequest{RunId: run, Reason: "chaos cancel"})
		cancel()
		if err == nil {
			k.mu.Lock()
			k.answered[run] = time.Now()
			k.mu.Unlock()
			answers = append(answers, "OK")
			break
		}
		st := status.Convert(err)
		answers = append(answers, st.Code().String())
		if st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
			// Refused: the check wants the run's end on its chain before
			// the answer (a cancel of a live run is never refused).
			k.mu.Lock()
			k.refused[run] = refusal{at: time.Now(), why: st.Message()}
			k.mu.Unlock()
			break
		}
		if !backoff(ctx, attempt) {
			break
		}
	}
	return "cancel answered " + strings.Join(answers, ",")
}

// cancelledAt is when the cancel of run was answered OK, if it was.
func (k *canceller) cancelledAt(run string) (time.Time, bool) {
	if k == nil {
		return time.Time{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.answered[run]
	return at, ok
}

// refusedAt is the refusal of run's cancel, if it was refused.
func (k *canceller) refusedAt(run string) (refusal, bool) {
	if k == nil {
		return refusal{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.refused[run]
	return r, ok
}

// cancelFault injects one of cancelKinds.
func (in *injector) cancelFault(ctx context.Context, kind faultKind, hold time.Duration, ev *faultEvent) error {
	c := in.c
	if kind == faultCancelMidCall {
		fired, err := in.trap(ctx, "before", func(op string) error {
			run, _, _ := strings.Cut(op, "/")
			ev.note = "at " + op + ", " + c.canceller.cancel(ctx, run)
			return nil
		})
		if !fired && err == nil {
			ev.note = "no call came to the trap within " + trapSpring.String()
		}
		return err
	}
	var t proposeTrap
	select {
	case t = <-c.model.trap:
	case <-time.After(trapSpring):
		ev.note = "no model call came within " + trapSpring.String()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(t.release)
		}
	}
	defer release()
	owner, oerr := c.owner(ctx, t.run) // (before the cancel: the key goes with the run's end)
	ev.note = "at " + t.run + ", " + c.canceller.cancel(ctx, t.run)
	if kind != faultCancelKillOwner {
		return nil
	}
	if oerr == nil && c.byName(owner) == nil {
		oerr = fmt.Errorf("run %s is owned by %q, no process of ours", t.run, owner)
	}
	if oerr != nil {
		ev.note += ", no owner killed: " + oerr.Error()
		return nil
	}
	victim := c.byName(owner)
	ev.target += " " + victim.name
	p := victim.current()
	if err := victim.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	release()
	pause(ctx, hold)
	return victim.start(120 * time.Second)
}

// checkCancelled checks a run whose cancel was answered OK at at: no
// step_start after at, and a chain that ends cancelled.
func checkCancelled(run string, chain []lctl.Event, ended bool, last lctl.Event, at time.Time, rep *report) {
	rep.cancels++
	for _, e := range chain {
		if e.Type == lctl.TypeStepStart && e.Time().After(at) {
			rep.afterCancel++
			rep.findf("after cancel: run %s: step %v started at %s, its cancel was answered at %s", run, e.Data["step"],
				e.Time().UTC().Format("15:04:05.000"), at.UTC().Format("15:04:05.000"))
		}
	}
	if st, _ := last.Data["status"].(string); ended && st != "cancelled" {
		rep.afterCancel++
		rep.findf("after cancel: run %s: its cancel was answered at %s, it ended %s: %v", run, at.UTC().Format("15:04:05.000"), st, last.Data["message"])
	}
}

// checkRefused checks a run whose cancel was refused: its end must have
// been on its chain before the refusal (on main before session 21 a
// replica that did not own the run refused "owned by another
// orchestrator", half the cancels behind round-robin).
func checkRefused(run string, chain []lctl.Event, ref refusal, rep *report) {
	for _, e := range chain {
		if e.Type == lctl.TypeRunFinished && !e.Time().After(ref.at) {
			return
		}
	}
	rep.cancelRefused++
	rep.findf("cancel refused: run %s: its cancel was refused at %s (%s) while its end was not on its chain", run, ref.at.UTC().Format("15:04:05.000"), ref.why)
}
