package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/provision"
)

// Traps: faults timed to the worst instants of one step instead of drawn
// at random times. The ledger tool takes a trap armed in its trap
// directory (ledgertool's doc) on its next invocation and, at the trap's
// point, tells the suite which operation it is in and waits while the
// suite kills or pauses a process. The points:
//
//   - "before": the executor claimed the step (its pending record is
//     written: the tool is called only after the claim) and the tool has
//     not acted yet;
//   - "after": the tool's effect is in the ledger (fsynced) and it has
//     not answered, so the executor has not recorded the outcome nor has
//     the orchestrator heard it.
//
// What is done there is the fault kind:
const (
	// faultExecKillBefore SIGKILLs the executor between its pending record
	// and the tool's start.
	faultExecKillBefore faultKind = "exec-kill-before-effect"
	// faultExecKillAfter SIGKILLs the executor after the tool's effect,
	// before its outcome is recorded.
	faultExecKillAfter faultKind = "exec-kill-after-effect"
	// faultOwnerStop SIGSTOPs the orchestrator owning the run after the
	// tool's effect, for longer than the run lease: the other one takes
	// the run over while the step's call is still out, then the paused
	// owner wakes up believing it owns the run and holding the answer.
	faultOwnerStop faultKind = "owner-stop-mid-call"
	// faultStepsLeaderKill SIGKILLs the NATS node leading the step
	// records' stream (KV_XCT_STEPS) after the tool's effect: the
	// executor's outcome record is published into a leader loss (one
	// node: the server restarts).
	faultStepsLeaderKill faultKind = "steps-leader-kill-after-effect"
	// faultStepsStepdown makes the step records' stream elect another
	// leader after the tool's effect (R3): the bucket is briefly
	// unavailable while the outcome is written.
	faultStepsStepdown faultKind = "steps-stepdown-after-effect"
)

// Faults at the worst instant of a model call: the suite's model (the
// test process) takes its trap on the next call, the run's owner is
// harmed while the call is out, and then the model answers (billed, as
// an endpoint bills it, model.answered). The next owner must charge the
// call the chain holds no proposal of (docs/events.md, "Model calls the
// chain does not hold"); the check's uncharged says whether it did.
const (
	// faultOwnerStopPropose SIGSTOPs the owner for longer than the run
	// lease: the other orchestrator takes the run over, then the paused
	// owner wakes holding an answer it cannot record.
	faultOwnerStopPropose faultKind = "owner-stop-mid-propose"
	// faultOwnerKillPropose SIGKILLs the owner (restarted after the hold).
	faultOwnerKillPropose faultKind = "owner-kill-mid-propose"
)

// proposeKinds are the model call's trap faults (every phase).
var proposeKinds = []faultKind{faultOwnerStopPropose, faultOwnerKillPropose}

// The approver's traps (session 19): a human's decision of a step the
// policy sent to one (review-ledger) lands while the run's owner is
// harmed, and the approver, a client retrying as told, sends it again.
// The owner waits on the approval's KV entry; the next owner (or the same
// one woken up) must take the decision once, and the step act once.
const (
	// faultOwnerStopDecide SIGSTOPs the owner past the run lease, then
	// the decision is sent: the other orchestrator takes the run over
	// and finds it; the paused owner wakes after.
	faultOwnerStopDecide faultKind = "owner-stop-at-decision"
	// faultOwnerKillDecide SIGKILLs the owner, then the decision is sent
	// while it is down (restarted after the hold).
	faultOwnerKillDecide faultKind = "owner-kill-at-decision"
)

// approvalKinds are the approver's trap faults (every phase).
var approvalKinds = []faultKind{faultOwnerStopDecide, faultOwnerKillDecide}

// decideSpring is how long an approval trap waits for a decision (one
// operation in reviewEvery asks for one: rarer than model calls).
const decideSpring = 20 * time.Second

// proposeFault injects one of proposeKinds or approvalKinds.
func (in *injector) proposeFault(ctx context.Context, kind faultKind, hold time.Duration, ev *faultEvent) error {
	c := in.c
	var t proposeTrap
	trapCh, spring, what := c.model.trap, trapSpring, "model call"
	if kind == faultOwnerStopDecide || kind == faultOwnerKillDecide {
		trapCh, spring, what = c.model.decideTrap, decideSpring, "decision"
	}
	select {
	case t = <-trapCh:
	case <-time.After(spring):
		ev.note = "no " + what + " came within " + spring.String()
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
	ev.note = "at " + t.run
	owner, err := c.owner(ctx, t.run)
	if err == nil && c.byName(owner) == nil {
		err = fmt.Errorf("run %s is owned by %q, no process of ours", t.run, owner)
	}
	if err != nil {
		ev.note += ", nothing done: " + err.Error() // between two owners (a takeover)
		return nil
	}
	victim := c.byName(owner)
	ev.target += " " + victim.name
	if kind == faultOwnerStopPropose || kind == faultOwnerStopDecide {
		if err := victim.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		victim.mu.Lock()
		victim.stopped = true
		victim.mu.Unlock()
		release() // the answer waits in the paused owner's socket
		// Past the run lease (2 s) and the takeover's resume.
		pause(ctx, in.dur(2500*time.Millisecond, 2500*time.Millisecond))
		victim.mu.Lock()
		victim.stopped = false
		victim.mu.Unlock()
		return victim.signal(syscall.SIGCONT)
	}
	p := victim.current()
	if err := victim.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	release()
	pause(ctx, hold)
	return victim.start(120 * time.Second)
}

// trapKinds are the trap faults; every phase can take the first four
// (one node: the leader is the node), the stepdown needs R3.
var trapKinds = []faultKind{faultExecKillBefore, faultExecKillAfter, faultOwnerStop, faultStepsLeaderKill}

// trapSpring is how long a trap waits for an invocation to take it.
const trapSpring = 8 * time.Second

// trap arms point in the ledger tool and waits for an invocation to
// reach it; then act runs with the operation ("<run>/<n>") while the
// invocation waits, and the invocation goes on. It returns false when no
// invocation came within trapSpring (the trap is disarmed).
func (in *injector) trap(ctx context.Context, point string, act func(op string) error) (bool, error) {
	dir := in.c.trapDir
	fired, release := filepath.Join(dir, "fired"), filepath.Join(dir, "release")
	_ = os.Remove(fired)
	_ = os.Remove(release)
	tmp := filepath.Join(dir, "arm.suite")
	if err := os.WriteFile(tmp, []byte(point), 0o600); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "arm")); err != nil {
		return false, err
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(trapSpring)
	for {
		if b, err := os.ReadFile(fired); err == nil { //nolint:gosec // G304: the suite's own directory
			_ = os.Remove(fired)
			err := act(string(b))
			// Let the invocation go on whatever act did.
			if werr := os.WriteFile(release, nil, 0o600); werr != nil {
				err = errors.Join(err, werr)
			}
			return true, err
		}
		if time.Now().After(deadline) {
			// Disarmed unless an invocation took it meanwhile (then it
			// fires at once, or put it back: see below).
			if os.Rename(filepath.Join(dir, "arm"), filepath.Join(dir, "disarmed")) == nil {
				return false, nil
			}
			if time.Now().After(deadline.Add(trapSpring)) {
				return false, nil
			}
		}
		select {
		case <-ctx.Done():
			_ = os.Rename(filepath.Join(dir, "arm"), filepath.Join(dir, "disarmed"))
			return false, ctx.Err()
		case <-tick.C:
		}
	}
}

// trapFault injects one trap fault: arms the trap, does the kind's harm at
// its point, holds, and undoes it.
func (in *injector) trapFault(ctx context.Context, kind faultKind, hold time.Duration, ev *faultEvent) error {
	c := in.c
	point := "after"
	if kind == faultExecKillBefore {
		point = "before"
	}
	var undo func() error
	fired, err := in.trap(ctx, point, func(op string) error {
		run, _, _ := strings.Cut(op, "/")
		ev.note = "at " + op
		var victim *member
		switch kind {
		case faultExecKillBefore, faultExecKillAfter:
			victim = c.byName("executor")
		case faultOwnerStop:
			owner, err := c.owner(ctx, run)
			if err == nil && c.byName(owner) == nil {
				err = fmt.Errorf("run %s is owned by %q, no process of ours", run, owner)
			}
			if err != nil {
				ev.note += ", nothing done: " + err.Error() // between two owners (a takeover)
				return nil
			}
			victim = c.byName(owner)
			if err := victim.signal(syscall.SIGSTOP); err != nil {
				return err
			}
			victim.mu.Lock()
			victim.stopped = true
			victim.mu.Unlock()
			ev.target += " " + victim.name
			undo = func() error {
				victim.mu.Lock()
				victim.stopped = false
				victim.mu.Unlock()
				return victim.signal(syscall.SIGCONT)
			}
			return nil
		case faultStepsLeaderKill:
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			leader, err := c.leaderOf(lctx, "KV_"+provision.StepsBucket)
			cancel()
			if err != nil {
				ev.note += ", nothing done: " + err.Error() // an election under way
				return nil
			}
			victim = leader
		case faultStepsStepdown:
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := c.stepdown(sctx, "KV_"+provision.StepsBucket); err != nil {
				ev.note += ", nothing done: " + err.Error()
			}
			return nil
		}
		p := victim.current()
		if err := victim.signal(syscall.SIGKILL); err != nil {
			return err
		}
		<-p.Done()
		ev.target += " " + victim.name
		undo = func() error { return victim.start(120 * time.Second) }
		return nil
	})
	if !fired && err == nil {
		ev.note = "no call came to the trap within " + trapSpring.String()
	}
	if undo != nil {
		if kind == faultOwnerStop {
			// Past the run lease (2 s) and the takeover's resume.
			hold = in.dur(2500*time.Millisecond, 2500*time.Millisecond)
		}
		pause(ctx, hold)
		err = errors.Join(err, undo())
	}
	return err
}

// owner names the orchestrator owning run now (its owner key).
func (c *cluster) owner(ctx context.Context, run string) (string, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return "", err
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(kctx, provision.OwnersBucket)
	if err != nil {
		return "", err
	}
	e, err := kv.Get(kctx, run)
	if err != nil {
		return "", fmt.Errorf("owner of %s: %w", run, err)
	}
	var rec struct {
		Owner string `json:"owner"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Owner == "" {
		return "", fmt.Errorf("owner of %s: %q", run, e.Value())
	}
	return rec.Owner, nil
}

// leaderOf names the node leading stream (the only node on one).
func (c *cluster) leaderOf(ctx context.Context, stream string) (*member, error) {
	if len(c.nodes) == 1 {
		return c.nodes[0], nil
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader now", stream)
	}
	m := c.byName(info.Cluster.Leader)
	if m == nil {
		return nil, fmt.Errorf("leader %q of %s is no node of ours", info.Cluster.Leader, stream)
	}
	return m, nil
}

// stepdown asks stream's leader to step down (a new election: the stream
// takes no writes until it is done).
func (c *cluster) stepdown(ctx context.Context, stream string) error {
	msg, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return err
	}
	if !resp.Success {
		if resp.Error != nil {
			return fmt.Errorf("stepdown of %s: %s", stream, resp.Error.Description)
		}
		return fmt.Errorf("stepdown of %s refused: %s", stream, msg.Data)
	}
	return nil
}
