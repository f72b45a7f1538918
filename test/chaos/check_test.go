package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// report is one phase's (or the whole suite's) figures.
type report struct {
	phase      string
	seed       int64
	runs       int // runs the client asked for
	notStarted int // never acknowledged and no chain
	ended      int // chain ends with run_finished
	inDoubt    int // ended or waiting on a step in doubt
	steps      int // step ids proposed on the chains
	effects    int // ledger lines
	faults     map[faultKind]int
	crashes    int // processes that exited on their own
	duplicates int // effects beyond the first per step id, and per operation
	lost       int // acknowledged events missing; effects no chain knows
	disagree   int // chain and executor record (or ledger) disagree
	unverified int // chains failing verification
	stuck      int // runs neither ended nor visibly waiting in doubt
	uncharged  int // model calls answered that no ended run's token totals charge
	cancels    int // runs whose cancel was answered OK (cancel_test.go)
	// afterCancel counts steps started after their run's cancel was
	// answered OK, and such runs that ended other than cancelled.
	afterCancel int
	// cancelRefused counts cancels refused while their run was live.
	cancelRefused int
	findings      []string
	doubts        []string       // why runs ended or wait in doubt (not failures)
	outcomes      map[string]int // steps by their last outcome on the chain
	failures      map[string]int // failed steps by their error's message (digits dropped)
}

func (r *report) add(o *report) {
	r.runs += o.runs
	r.notStarted += o.notStarted
	r.ended += o.ended
	r.inDoubt += o.inDoubt
	r.steps += o.steps
	r.effects += o.effects
	r.crashes += o.crashes
	r.duplicates += o.duplicates
	r.lost += o.lost
	r.disagree += o.disagree
	r.unverified += o.unverified
	r.stuck += o.stuck
	r.uncharged += o.uncharged
	r.cancels += o.cancels
	r.afterCancel += o.afterCancel
	r.cancelRefused += o.cancelRefused
	if r.faults == nil {
		r.faults = map[faultKind]int{}
	}
	for k, v := range o.faults {
		r.faults[k] += v
	}
	r.findings = append(r.findings, o.findings...)
	r.doubts = append(r.doubts, o.doubts...)
	if r.outcomes == nil {
		r.outcomes = map[string]int{}
	}
	for k, v := range o.outcomes {
		r.outcomes[k] += v
	}
	if r.failures == nil {
		r.failures = map[string]int{}
	}
	for k, v := range o.failures {
		r.failures[k] += v
	}
}

// line is the one summary line.
func (r *report) line() string {
	return fmt.Sprintf("chaos %s: runs=%d (ended %d, in_doubt %d, not_started %d) faults=%s steps=%d effects=%d duplicates=%d lost=%d disagree=%d unverified=%d stuck=%d crashes=%d uncharged=%d cancels=%d after_cancel=%d cancel_refused=%d seed=%d",
		r.phase, r.runs, r.ended, r.inDoubt, r.notStarted, formatCounts(r.faults), r.steps, r.effects, r.duplicates, r.lost, r.disagree, r.unverified, r.stuck, r.crashes, r.uncharged, r.cancels, r.afterCancel, r.cancelRefused, r.seed)
}

func (r *report) failed() bool {
	return r.duplicates+r.lost+r.disagree+r.unverified+r.stuck+r.uncharged+r.afterCancel+r.cancelRefused > 0
}

func (r *report) findf(format string, args ...any) {
	r.findings = append(r.findings, fmt.Sprintf(format, args...))
}

// entry is one ledger line (test/chaos/ledgertool).
type entry struct {
	Key  string `json:"key"`
	Op   string `json:"op"`
	Tool string `json:"tool"`
	PID  int    `json:"pid"`
	At   int64  `json:"at"`
}

func readLedger(path string) ([]entry, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the test's own ledger
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("ledger line %q: %w", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// stepFacts is what the chain says about one step id.
type stepFacts struct {
	run      string
	step     int
	op       string
	tool     string
	carried  int             // a crew tool's events on the chain (its effect: fact_added, handoff)
	outcomes []string        // success, replayed, failed:CODE, not_executed, in_doubt, repeatable:CODE, refused:CODE
	why      string          // the message of its last error event
	ended    bool            // the run's chain ends with run_finished
	policies map[string]bool // the policy versions its verdicts name (two: judged again after a reload)
	approved bool            // an approval_decided of it is on the chain (the approver's)
}

func (s *stepFacts) outcome() string {
	if len(s.outcomes) == 0 {
		return "none"
	}
	return s.outcomes[len(s.outcomes)-1]
}

// sameOutcomes: no two different outcomes (an empty list has none).
func sameOutcomes(o []string) bool {
	for _, x := range o {
		if x != o[0] {
			return false
		}
	}
	return true
}

// classify reads an error event of a step.
func classify(e lctl.Event) string {
	code, _ := e.Data["code"].(string)
	details, _ := e.Data["details"].(map[string]any)
	unknown, _ := details["outcome_unknown"].(bool)
	repeatable, _ := details["repeatable"].(bool)
	switch {
	case code == string(wire.CodeInDoubt) || unknown:
		return "in_doubt"
	case repeatable:
		// Unknown, but the tool is read-only or idempotent: the chain
		// says the step may be repeated. It may or may not have acted.
		return "repeatable:" + code
	case e.Agent != "executor":
		return "refused:" + code
	case code == string(wire.CodeExecutorUnavailable):
		return "not_executed"
	}
	return "failed:" + code
}

// failureKey names a failed step's reason without its ids and numbers,
// so that steps failed for one reason count together.
func failureKey(outcome, msg string) string {
	msg = regexp.MustCompile(`[0-9a-f]{8,}|[0-9]+(\.[0-9]+)?`).ReplaceAllString(msg, "N")
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return outcome + " " + msg
}

// check reads every chain, the executor's records and the ledger, and
// checks every step.
// checkCharged compares what an ended run's chain charges (run_finished's
// tokens) with the model calls of the run the model answered: every call
// answered is billed, whether or not its caller lived to read the answer
// (an owner killed or paused past its lease while the call was out), and
// the run's token budgets are judged on the chain. Charging more (an
// owner lost before its call was sent) is the takeover's estimate erring
// towards the budget, not a finding.
func (c *cluster) checkCharged(run string, last lctl.Event, rep *report) {
	if c.model == nil {
		return
	}
	tokens, _ := last.Data["tokens"].(map[string]any)
	in, _ := tokens["input"].(float64)
	charged := int(in) / int(callUsage.GetInputTokens())
	if billed := c.model.calls(run); charged < billed {
		rep.uncharged += billed - charged
		rep.findf("uncharged: run %s: the model answered %d calls, its chain charges %d (%v input tokens of %d a call)", run, billed, charged, in, callUsage.GetInputTokens())
	}
}

func (c *cluster) check(ctx context.Context, d *driver, in *injector, rep *report) error {
	exec := d.executor
	ledger, err := readLedger(c.ledger)
	if err != nil {
		return err
	}
	rep.effects = len(ledger)
	steps := map[string]*stepFacts{}
	// copies: each run's last event read, which the tracer's copy of the
	// chain must hold too (checkTracer).
	copies := map[string]lctl.Event{}
	settleBy := time.Now().Add(60 * time.Second)
	// Every chain in one pass over the stream (one consumer: creating one
	// per run costs a JetStream cluster round of its own).
	chains := map[string][]lctl.Event{}
	for attempt := 0; ; attempt++ {
		clear(chains)
		err := c.log.Follow(ctx, "", eventlog.FollowOptions{StopAtEnd: true}, func(e lctl.Event) error {
			chains[e.ChainID] = append(chains[e.ChainID], e)
			return nil
		})
		if err == nil {
			break
		}
		if !backoff(ctx, attempt) {
			return fmt.Errorf("read the stream: %w", err)
		}
	}
	for _, r := range d.runs {
		rep.runs++
		// A run not over may be about to go on (a step in doubt settled
		// from its record): it is read again until it ends or visibly
		// waits, until settleBy.
		var chain []lctl.Event
		var run *xctv1.Run
		var last lctl.Event
		ended, waiting := false, false
		chain = chains[r.id]
		for attempt := 0; ; attempt++ {
			if attempt > 0 {
				if chain, err = readChain(ctx, c, r.id); err != nil {
					return err
				}
			}
			if len(chain) == 0 {
				break
			}
			last = lastEvent(chain)
			if ended = last.Type == lctl.TypeRunFinished; ended {
				break
			}
			if run = d.getRun(ctx, r.id); run != nil && waitingInDoubt(run) {
				waiting = true
				break
			}
			if time.Now().After(settleBy) || !backoff(ctx, attempt) {
				break
			}
		}
		if len(chain) == 0 {
			if r.started {
				rep.lost++
				rep.findf("lost: run %s: the API acknowledged its start (AlreadyExists: %v) but it has no chain", r.id, r.exists)
			} else {
				rep.notStarted++
			}
			continue
		}
		copies[r.id] = chain[len(chain)-1]
		if err := lctl.Verify(chain); err != nil {
			rep.unverified++
			rep.findf("unverified: run %s: %v", r.id, err)
		}
		bySeq := map[uint64]lctl.Event{}
		for _, e := range chain {
			bySeq[e.Seq] = e
		}
		if r.startSeq > uint64(len(chain)) {
			rep.lost++
			rep.findf("lost: run %s: StartRun answered last_seq %d, the chain has %d events", r.id, r.startSeq, len(chain))
		}
		for seq, hash := range r.acked {
			if e, ok := bySeq[seq]; !ok || e.Hash != hash {
				rep.lost++
				rep.findf("lost: run %s: event %d sent to the client (hash %.12s) is not on the chain as sent", r.id, seq, hash)
			}
		}
		// The run's last event (signed checkpoints may follow its end).
		doubt := ""
		for _, e := range chain {
			if e.Type == stepInDoubt {
				reason, _ := e.Data["reason"].(string)
				doubt = fmt.Sprintf("step %v in doubt (%s)", e.Data["step"], reason)
			}
		}
		if msg, _ := last.Data["message"].(string); ended && strings.Contains(msg, "in doubt") {
			doubt = msg
		}
		if at, ok := c.canceller.cancelledAt(r.id); ok {
			checkCancelled(r.id, chain, ended, last, at, rep)
		}
		if ref, ok := c.canceller.refusedAt(r.id); ok {
			checkRefused(r.id, chain, ref, rep)
		}
		switch {
		case ended:
			rep.ended++
			c.checkCharged(r.id, last, rep)
		case waiting:
			doubt = "waits: " + run.GetStatus().String() + " " + run.GetMessage() + " " + doubt
		default:
			rep.stuck++
			st := "unreadable"
			if run != nil {
				st = run.GetStatus().String() + " " + run.GetMessage()
			}
			rep.findf("stuck: run %s: not ended, not waiting in doubt; status %s; last event %d %s", r.id, st, last.Seq, last.Type)
		}
		if doubt != "" {
			rep.inDoubt++
			rep.doubts = append(rep.doubts, r.id+": "+doubt)
		}
		open := "" // the step the chain is in: a crew tool's event is its
		acts := map[string]int{}
		for _, e := range chain {
			if e.Type == lctl.TypeFactAdded || e.Type == lctl.TypeHandoff {
				// Per operation: the crew run adds one fact and hands
				// over once, whatever its steps.
				if acts[e.Type]++; acts[e.Type] == 2 {
					rep.duplicates++
					rep.findf("duplicate: run %s: a second %s (seq %d)", r.id, e.Type, e.Seq)
				}
			}
			id, _ := e.Data["step_id"].(string)
			switch e.Type {
			case lctl.TypeFactAdded, lctl.TypeFactModified, lctl.TypeHandoff:
				if s := steps[open]; s != nil {
					s.carried++
				} else {
					rep.disagree++
					rep.findf("disagree: run %s: %s (seq %d) outside any step", r.id, e.Type, e.Seq)
				}
			case lctl.TypeStepEnd:
				open = ""
			}
			if id == "" {
				continue
			}
			s := steps[id]
			if s == nil {
				s = &stepFacts{run: r.id}
				steps[id] = s
			}
			s.ended = ended
			switch e.Type {
			case lctl.TypeStepStart:
				open = id
				n, _ := e.Data["step"].(float64)
				s.step = int(n)
				s.tool, _ = e.Data["tool"].(string)
				args, _ := e.Data["arguments"].(map[string]any)
				s.op, _ = args["op"].(string)
			case lctl.TypeToolCall:
				out, _ := e.Data["output"].(map[string]any)
				if e.Data["status"] == "success" && out["acted"] == false {
					s.outcomes = append(s.outcomes, "replayed") // put: the op was written before
				} else if e.Data["status"] == "success" {
					s.outcomes = append(s.outcomes, "success")
				} else {
					s.outcomes = append(s.outcomes, fmt.Sprintf("tool_call:%v", e.Data["status"]))
				}
			case lctl.TypeVerdict:
				if v, _ := e.Data["policy_version"].(string); v != "" {
					if s.policies == nil {
						s.policies = map[string]bool{}
					}
					s.policies[v] = true
				}
			case lctl.TypeError:
				s.outcomes = append(s.outcomes, classify(e))
				s.why, _ = e.Data["message"].(string)
			case stepInDoubt:
				s.outcomes = append(s.outcomes, "in_doubt")
			case "approval_decided":
				s.approved = true
			}
		}
	}
	rep.steps = len(steps)

	// The executor's record of every step id on a chain or in the ledger.
	byKey := map[string][]entry{}
	byOp := map[string]map[string]bool{}
	for _, e := range ledger {
		byKey[e.Key] = append(byKey[e.Key], e)
		if byOp[e.Op] == nil {
			byOp[e.Op] = map[string]bool{}
		}
		byOp[e.Op][e.Key] = true
	}
	ids := map[string]bool{}
	for id := range steps {
		ids[id] = true
	}
	for id := range byKey {
		ids[id] = true
	}
	records := map[string]string{}
	for id := range ids {
		rec, err := readRecord(ctx, exec, id)
		if err != nil {
			return err
		}
		records[id] = rec
	}
	describe := func(id string) string {
		s := steps[id]
		if s == nil {
			return fmt.Sprintf("step %s (on no chain; record %s; %d effects)", id, records[id], len(byKey[id]))
		}
		return fmt.Sprintf("run %s step %d (%s): chain %v, record %s, %d effects", s.run, s.step, id, s.outcomes, records[id], len(byKey[id]))
	}

	// Per step: agreement of the chain, the record and the ledger.
	rep.outcomes = map[string]int{}
	rep.failures = map[string]int{}
	for id := range ids {
		s, rec, n := steps[id], records[id], len(byKey[id])
		if s != nil && (s.tool == crewOps[2] || s.tool == crewOps[3]) {
			rep.outcomes["crew:"+s.outcome()]++ // a crew tool's step
		} else if s != nil {
			rep.outcomes[s.outcome()]++
		}
		if s != nil && len(s.policies) > 1 {
			// (counted again) judged under two policies: a reload
			// while the step was in flight (faultReload)
			rep.outcomes["reload-rejudged:"+s.outcome()]++
		}
		if s != nil && s.approved {
			// (counted again) sent to the approver, who decided it
			rep.outcomes["approved:"+s.outcome()]++
		}
		if s != nil && strings.HasPrefix(s.outcome(), "failed:") {
			// why steps failed, for the summary (a tool down, a
			// deadline, a store refusing): ids and numbers dropped
			rep.failures[failureKey(s.outcome(), s.why)]++
		}
		if s == nil {
			rep.lost++
			rep.findf("lost: an effect no chain knows: %s", describe(id))
			continue
		}
		o := s.outcome()
		if crewOps[2] == s.tool || crewOps[3] == s.tool {
			// A crew tool: carried out by the orchestrator, its effect
			// is its event on the chain; the executor never sees it.
			switch {
			case s.carried > 1: // counted per run above
				rep.findf("duplicate: the crew's %s acted %d times: %s", s.tool, s.carried, describe(id))
			case s.carried == 1 && !sameOutcomes(settled(s.outcomes)):
				rep.disagree++
				rep.findf("disagree: the chain records more than one outcome: %s", describe(id))
			case s.carried == 1 && o != "success" && (o != "none" || s.ended):
				rep.disagree++
				rep.findf("disagree: the crew's %s acted (its event is on the chain), the chain says %s: %s", s.tool, o, describe(id))
			case s.carried == 0 && o == "success":
				rep.disagree++
				rep.findf("disagree: the chain says the crew's %s succeeded, its event is not there: %s", s.tool, describe(id))
			case n > 0 || rec != "absent":
				rep.disagree++
				rep.findf("disagree: the executor knows a crew tool's step: %s", describe(id))
			}
			continue
		}
		var bad string
		switch {
		case !sameOutcomes(settled(s.outcomes)):
			bad = "the chain records more than one outcome"
		case (o == "success" || o == "replayed") && rec != "SUCCEEDED":
			bad = "the chain says success, the record does not"
		case o == "success" && n == 0:
			bad = "the chain says success, the tool never acted"
		case o == "replayed" && len(byOp[s.op]) == 0:
			// (an effect under this very step id is fine: the executor
			// re-ran an idempotent step whose first call had acted)
			bad = "the tool said it had written the op before, the ledger disagrees"
		case strings.HasPrefix(o, "failed:") && rec != "FAILED":
			bad = "the chain says failed, the record does not"
		case strings.HasPrefix(o, "failed:") && n > 0:
			// The ledger tool fails only before it acts (its refusals)
			// or says the outcome is unknown (a write it could not
			// finish): a definite failure after an effect is a lie.
			bad = "the chain says failed, the tool acted"
		case (o == "not_executed" || strings.HasPrefix(o, "refused:")) && (n > 0 || rec == "SUCCEEDED" || rec == "PENDING"):
			bad = "the chain says the step was not executed, but it was (or may have been)"
		case n > 0 && rec == "absent":
			bad = "the tool acted, the executor has no record"
		case rec == "SUCCEEDED" && o != "success" && o != "replayed" && o != "in_doubt" && !strings.HasPrefix(o, "repeatable:"):
			bad = "the record says succeeded, the chain does not"
		case o == "none" && s.ended && (n > 0 || rec == "SUCCEEDED" || rec == "FAILED"):
			bad = "the run ended without the step's outcome on the chain"
		}
		if bad != "" {
			rep.disagree++
			rep.findf("disagree: %s: %s", bad, describe(id))
		}
		if n > 1 {
			rep.duplicates += n - 1
			rep.findf("duplicate: step id acted %d times: %s; faults near: %s", n, describe(id), in.near(time.UnixMilli(byKey[id][0].At), 3*time.Second))
		}
	}
	var ops []string
	for op := range byOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		keys := byOp[op]
		if len(keys) < 2 {
			continue
		}
		rep.duplicates += len(keys) - 1
		var parts []string
		var first time.Time
		for k := range keys {
			parts = append(parts, describe(k))
			if at := time.UnixMilli(byKey[k][0].At); first.IsZero() || at.Before(first) {
				first = at
			}
		}
		sort.Strings(parts)
		rep.findf("duplicate: operation %s acted under %d step ids: %s; faults within 3s of the first effect (%s): %s", op, len(keys), strings.Join(parts, "; "),
			first.UTC().Format("15:04:05.000"), in.near(first, 3*time.Second))
	}
	return c.checkTracer(ctx, d.tracer, copies, in, rep)
}

// tracerCatchUp bounds how long the tracer may take, after the runs were
// read, to hold every event read.
const tracerCatchUp = 60 * time.Second

// checkTracer checks the tracer's copy of every run's chain (its files,
// through killed processes and full disks): it must come to hold the
// chain as read from the stream, up to its last event read (more may
// follow: a signed checkpoint, a run that went on), with the same hash.
// A copy that does not within tracerCatchUp has lost events: counted as
// lost.
func (c *cluster) checkTracer(ctx context.Context, tracer lctlv1.TracerServiceClient, copies map[string]lctl.Event, in *injector, rep *report) error {
	ids := make([]string, 0, len(copies))
	for id := range copies {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	by := time.Now().Add(tracerCatchUp)
	for _, id := range ids {
		want := copies[id]
		why := ""
		for attempt := 0; ; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			got, err := tracer.GetChain(cctx, &lctlv1.GetChainRequest{ChainId: id, FromSeq: want.Seq, PageSize: 1})
			cancel()
			switch {
			case err != nil:
				why = "GetChain: " + status.Convert(err).Message()
			case len(got.GetEvents()) == 0 || got.GetEvents()[0].GetSeq() != want.Seq:
				why = fmt.Sprintf("it has %d events, the stream %d", got.GetSummary().GetEvents(), want.Seq)
			case got.GetEvents()[0].GetHash() != want.Hash:
				why = fmt.Sprintf("its event %d has hash %.12s, the stream's %.12s", want.Seq, got.GetEvents()[0].GetHash(), want.Hash)
			case !got.GetSummary().GetVerified():
				why = "its copy does not verify: " + got.GetSummary().GetVerifyError()
			default:
				why = ""
			}
			if why == "" || time.Now().After(by) || !backoff(ctx, attempt) {
				break
			}
			// A tracer that exited during the check is a crash, and is
			// started again: what it lost is then counted, not its
			// absence.
			if err := in.revive("during the check of the tracer's copies"); err != nil {
				return err
			}
		}
		if why != "" {
			rep.lost++
			rep.findf("lost: the tracer's copy of run %s: %s", id, why)
		}
	}
	return nil
}

// stepInDoubt is the event of a step whose outcome the orchestrator could
// not learn: the run waits (issue 12's in-doubt state).
const stepInDoubt = "step_in_doubt"

// readChain reads a run's chain, asking again while JetStream cannot
// answer.
func readChain(ctx context.Context, c *cluster, id string) ([]lctl.Event, error) {
	for attempt := 0; ; attempt++ {
		chain, err := c.log.ReadChain(ctx, id)
		if err == nil || errors.Is(err, eventlog.ErrChainNotFound) {
			return chain, nil // no chain: checked against what the client was told
		}
		if !backoff(ctx, attempt) {
			return nil, fmt.Errorf("read chain %s: %w", id, err)
		}
	}
}

// lastEvent is the run's last event (signed checkpoints may follow it).
func lastEvent(chain []lctl.Event) lctl.Event {
	last := chain[len(chain)-1]
	for i := len(chain) - 1; i > 0 && last.Type == checkpoint.EventType; i-- {
		last = chain[i-1]
	}
	return last
}

// settled drops the in-doubt marks a later outcome of the same step
// settled.
func settled(o []string) []string {
	var out []string
	for _, x := range o {
		if x != "in_doubt" {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return o
	}
	return out
}

// readRecord is the executor's record state of a step ("absent" when it
// has none), asked until the executor answers.
func readRecord(ctx context.Context, exec xctv1.ExecutorServiceClient, id string) (string, error) {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := exec.GetStep(cctx, &xctv1.GetStepRequest{StepId: id})
		cancel()
		switch {
		case err == nil:
			return strings.TrimPrefix(resp.GetStep().GetState().String(), "STEP_RECORD_STATE_"), nil
		case status.Code(err) == codes.NotFound:
			return "absent", nil
		}
		if !backoff(ctx, attempt) {
			return "", fmt.Errorf("the executor's record of %s: %w", id, err)
		}
	}
}
