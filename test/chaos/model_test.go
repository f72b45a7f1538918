package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// model is the suite's agent, a ProposerService the orchestrators call
// over gRPC. Each run performs ops operations "<run>/1".."<run>/ops" on the
// ledger tool, in order. It decides from the history alone (what the chain
// says happened), as a model does:
//   - success: the operation is done, the next one follows;
//   - an error whose suggested_action says to retry (retry_later,
//     wait_and_retry_later, ...): the same operation again, as a new step,
//     after a pause growing with each attempt (0.4 s to 2 s);
//   - needs_human_decision or finish_with_done: it stops;
//   - any other error: it gives that operation up and goes on.
//
// So when the system says "not executed" about a step that did act, the
// model acts again: the ledger shows the same operation twice.
type model struct {
	xctv1.UnimplementedProposerServiceServer
	seed int64
	ops  int

	mu sync.Mutex
	// answered counts the calls answered per run: each is billed
	// callUsage, as an endpoint bills a call whether or not its caller
	// lived to read the answer. The check compares it with what the
	// run's chain charges (uncharged).
	answered map[string]int
	// trap, when armed, is taken by the next call: the call sends its run
	// id on it and waits for the suite (proposeTrap).
	trap chan proposeTrap
	// decideTrap, when armed, is taken by the approver's next decision:
	// it sends the run id and decides once the suite has harmed the
	// run's owner (approvalKinds).
	decideTrap chan proposeTrap
}

// proposeTrap is a call that took the model's trap: run is its run, and
// the call answers once release is closed.
type proposeTrap struct {
	run     string
	release chan struct{}
}

// callUsage is what every model call is billed.
var callUsage = &xctv1.Usage{InputTokens: 10, OutputTokens: 1}

func newModel(seed int64, ops int) *model {
	return &model{seed: seed, ops: ops, answered: map[string]int{}, trap: make(chan proposeTrap), decideTrap: make(chan proposeTrap)}
}

// calls is how many calls of run the model answered.
func (m *model) calls(run string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answered[run]
}

// maxAttempts bounds the retries of one operation.
const maxAttempts = 20

var retryActions = map[string]bool{"retry_later": true, "wait_and_retry_later": true, "reply_with_one_valid_decision": true}

// A crew run (one run in crewEvery) is a crew of two agents served by the
// same model: the entry agent performs operation 1 on the ledger, records
// a fact (facts.add, operation 2) and hands over (xct.handoff, operation
// 3); the other performs operation 4 on the ledger. The crew's tools act
// by their event on the chain (fact_added, handoff), so a fault between
// that event and the step's outcome is a fault between an effect and its
// record, checked as the ledger's effects are.
const crewEvery = 4

// crewOps are a crew run's operations; the ledger's are the others.
var crewOps = map[int]string{2: "facts.add", 3: "xct.handoff"}

// crewFile is the crew of a crew run, its agents served by the model at
// modelAddr. Each member is shown its own turns only (history: own, the
// default since session 20): the model plays the member its brief names
// (crewAgent) from that member's turns, the finder operations 1-3, the
// checker operation 4, as each member's own script. The checker ends the
// work (authority.end_run; by default only the entry agent may).
func crewFile(modelAddr string) []byte {
	return []byte(fmt.Sprintf(`crew: chaos
agents:
  - name: finder
    profile: {type: analyzer, capabilities: [charging], model: "grpc:%[1]s", reliability_score: 0.9}
    tools: [ledger.charge, ledger.put, facts.add, xct.handoff]
    hands_to: [checker]
  - name: checker
    profile: {type: reviewer, capabilities: [charging], model: "grpc:%[1]s", reliability_score: 0.9}
    tools: [ledger.charge, ledger.put]
handoffs: {entry: finder, max_depth: 2, cycles: forbid}
authority: {end_run: [finder, checker]}
`, modelAddr))
}

// crewAgent is the crew member a request's brief names ("" outside a
// crew run): the orchestrator tells each member's model who it is.
func crewAgent(instructions string) string {
	_, rest, ok := strings.Cut(instructions, `You are agent "`)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

// checkerFirstOp is the first operation of the crew's checker: the
// finder's are the ones before.
const checkerFirstOp = 4

// isCrewRun reports whether run id is one of the crew runs.
func isCrewRun(seed int64, id string) bool { return hash(seed, id, "crew")%crewEvery == 0 }

func (m *model) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	// A trap armed (the suite waiting on m.trap) is taken by this call:
	// the suite harms the run's owner while the call is out, then lets
	// it answer.
	t := proposeTrap{run: req.GetRunId(), release: make(chan struct{})}
	select {
	case m.trap <- t:
		select {
		case <-t.release:
		case <-ctx.Done():
		}
	default:
	}
	resp := m.propose(ctx, req)
	resp.Usage = callUsage
	m.mu.Lock()
	m.answered[req.GetRunId()]++
	m.mu.Unlock()
	return resp, nil
}

func (m *model) propose(ctx context.Context, req *xctv1.ProposeRequest) *xctv1.ProposeResponse {
	crew := isCrewRun(m.seed, req.GetRunId())
	ops, first := m.ops, 1
	if crew {
		ops = checkerFirstOp
		if crewAgent(req.GetInstructions()) == "checker" {
			first = checkerFirstOp // its own turns are its operations only
		}
	}
	op, attempts := first, 0
	for _, turn := range req.GetHistory() {
		var d struct {
			NextStep *struct {
				Tool      string         `json:"tool"`
				Arguments map[string]any `json:"arguments"`
			} `json:"next_step"`
		}
		if json.Unmarshal([]byte(turn.GetDecision()), &d) != nil || d.NextStep == nil {
			continue
		}
		var r struct {
			Status  string `json:"status"`
			Details struct {
				SuggestedAction string `json:"suggested_action"`
			} `json:"details"`
		}
		_ = json.Unmarshal([]byte(turn.GetResponse()), &r)
		k := opNumber(d.NextStep.Arguments["op"])
		for n, tool := range crewOps {
			if crew && d.NextStep.Tool == tool {
				k = n
			}
		}
		if k != op {
			continue
		}
		switch {
		case r.Status == "success":
			op, attempts = op+1, 0
		case r.Details.SuggestedAction == "needs_human_decision" || r.Details.SuggestedAction == "finish_with_done":
			return done("stopped: " + r.Details.SuggestedAction)
		case retryActions[r.Details.SuggestedAction]:
			attempts++
		default:
			op, attempts = op+1, 0
		}
	}
	if op > ops {
		return done(fmt.Sprintf("%d operations done", ops))
	}
	if attempts >= maxAttempts {
		return done(fmt.Sprintf("gave up on operation %d", op))
	}
	if attempts > 0 {
		// "retry_later": the model waits before it proposes the operation
		// again (longer after each failure, at most 2 s).
		backoff(ctx, attempts)
	}
	if tool := crewOps[op]; crew && tool != "" {
		args := map[string]any{"id": "F1", "text": "charged " + req.GetRunId(), "confidence": 0.9, "source": "ledger"}
		if tool == "xct.handoff" {
			args = map[string]any{"to": "checker", "summary": "check the charge"}
		}
		out, _ := json.Marshal(map[string]any{"next_step": map[string]any{"tool": tool, "arguments": args, "goal": fmt.Sprintf("operation %d", op)}})
		return &xctv1.ProposeResponse{Output: string(out), Model: "chaos-model"}
	}
	// The operation decides the tool (a retry is the same operation); the
	// attempt only how long the tool takes.
	tool := "ledger.charge"
	if hash(m.seed, req.GetRunId(), op)%3 == 0 {
		tool = "ledger.put"
	}
	r := hash(m.seed, req.GetRunId(), op, attempts)
	args := map[string]any{"op": fmt.Sprintf("%s/%d", req.GetRunId(), op), "work_ms": (r >> 8) % 400}
	if reviewed(m.seed, req.GetRunId(), op) {
		args["review"] = true // the policy sends it to the approver (driver.decide)
	}
	out, _ := json.Marshal(map[string]any{"next_step": map[string]any{
		"tool":      tool,
		"arguments": args,
		"goal":      fmt.Sprintf("operation %d", op),
	}})
	return &xctv1.ProposeResponse{Output: string(out), Model: "chaos-model"}
}

// reviewEvery: one ledger operation in reviewEvery waits for a human's
// approval (the policy's review-ledger rule), which the driver gives.
const reviewEvery = 5

// reviewed reports whether operation op of run id is one of them.
func reviewed(seed int64, id string, op int) bool {
	return hash(seed, id, op, "review")%reviewEvery == 0
}

func hash(parts ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, parts...)
	return h.Sum64()
}

func done(msg string) *xctv1.ProposeResponse {
	out, _ := json.Marshal(map[string]any{"done": true, "message": msg})
	return &xctv1.ProposeResponse{Output: string(out), Model: "chaos-model"}
}

// opNumber is n of "run/n".
func opNumber(v any) int {
	s, _ := v.(string)
	i := strings.LastIndexByte(s, '/')
	var n int
	if i < 0 || func() error { _, err := fmt.Sscanf(s[i+1:], "%d", &n); return err }() != nil {
		return -1
	}
	return n
}

// runRecord is what the API told the client about one run.
type runRecord struct {
	id       string
	started  bool   // StartRun succeeded, or answered AlreadyExists to a retry
	exists   bool   // the start was acknowledged by AlreadyExists
	startErr error  // why it never started
	startSeq uint64 // last_seq in StartRun's answer
	acked    map[uint64]string
	finished bool   // WatchRun delivered run_finished
	status   string // the run's last status seen (GetRun)
	message  string
}

// driver starts runs and follows them through both orchestrators, as a
// client that retries does.
type driver struct {
	orch      [2]xctv1.OrchestratorServiceClient
	executor  xctv1.ExecutorServiceClient
	tracer    lctlv1.TracerServiceClient
	modelAddr string
	seed      int64 // which runs are crew runs (isCrewRun)
	// approver decides the steps the policy sends to a human (as bob);
	// decideTrap is the model's (approvalKinds).
	approver   xctv1.ValidatorServiceClient
	decideTrap chan proposeTrap

	mu   sync.Mutex
	runs []*runRecord
}

func (d *driver) record(r *runRecord) {
	d.mu.Lock()
	d.runs = append(d.runs, r)
	d.mu.Unlock()
}

// backoff waits before the next attempt (the attempt's failure is the
// event; this only paces retries), or returns false when ctx ends.
func backoff(ctx context.Context, attempt int) bool {
	wait := min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// run starts one run and follows it until its end, a visible wait in
// doubt, or ctx's end.
func (d *driver) run(ctx context.Context, id string) {
	r := &runRecord{id: id, acked: map[uint64]string{}}
	defer d.record(r)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		req := &xctv1.StartRunRequest{RunId: id, Goal: "chaos", Model: "grpc:" + d.modelAddr, MaxSteps: 60}
		if isCrewRun(d.seed, id) {
			req.Model, req.Crew, req.CrewFile = "", crewFile(d.modelAddr), "chaos.yaml"
		}
		resp, err := d.orch[attempt%2].StartRun(cctx, req)
		cancel()
		if err == nil {
			r.started, r.startSeq = true, resp.GetRun().GetLastSeq()
			break
		}
		if status.Code(err) == codes.AlreadyExists && attempt > 0 {
			// An earlier attempt started it: the API says the run exists.
			r.started, r.exists = true, true
			break
		}
		if !backoff(ctx, attempt) {
			r.startErr = err
			return
		}
	}
	from := uint64(1)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		c := d.orch[attempt%2]
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		stream, err := c.WatchRun(wctx, &xctv1.WatchRunRequest{RunId: id, FromSeq: from})
		if err == nil {
			for {
				resp, err := stream.Recv()
				if err != nil {
					break
				}
				e := resp.GetEvent()
				r.acked[e.GetSeq()] = e.GetHash()
				from = e.GetSeq() + 1
				if e.GetType() == "approval_requested" {
					d.decide(ctx, id, e.GetData().GetFields()["step_id"].GetStringValue())
				}
				if e.GetType() == lctl.TypeRunFinished {
					r.finished = true
					break
				}
			}
		}
		cancel()
		gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
		got, gerr := c.GetRun(gctx, &xctv1.GetRunRequest{RunId: id})
		gcancel()
		if gerr == nil {
			r.status, r.message = got.GetRun().GetStatus().String(), got.GetRun().GetMessage()
			// A run waiting for an approval waits for this driver's
			// decision: it is followed on (an approval_requested not
			// yet delivered comes with the next watch).
			waitsForUs := got.GetRun().GetStatus() == xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL
			if r.finished || waitingInDoubt(got.GetRun()) && !waitsForUs {
				return
			}
		}
		if !backoff(ctx, attempt) {
			return
		}
	}
}

// decide approves step stepID of run id as bob, a client retrying as it
// is told: UNAVAILABLE or a deadline is sent again (the same decision,
// which the validator answers as the first when it was stored). When the
// suite armed the decide trap, the run's owner is harmed first (killed,
// or paused past its lease) and the decision lands while it is; it is
// then sent once more, as a client whose answer was lost. An approval no
// longer decidable (decided, withdrawn by a cancel, expired) is left.
func (d *driver) decide(ctx context.Context, id, stepID string) {
	if stepID == "" {
		return
	}
	t := proposeTrap{run: id, release: make(chan struct{})}
	trapped := false
	select {
	case d.decideTrap <- t:
		trapped = true
		select {
		case <-t.release:
		case <-ctx.Done():
			return
		}
	default:
	}
	req := &xctv1.DecideApprovalRequest{RunId: id, Step: stepID, Approve: true, Reason: "chaos approver"}
	for sends, attempt := 0, 0; ctx.Err() == nil; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := d.approver.DecideApproval(cctx, req)
		cancel()
		switch code := status.Code(err); {
		case err == nil:
			if sends++; !trapped || sends > 1 {
				return
			}
			continue // the resend: its answer must be the same decision
		case code != codes.Unavailable && code != codes.DeadlineExceeded:
			return
		}
		if !backoff(ctx, attempt) {
			return
		}
	}
}

// getRun asks either orchestrator for the run, until one answers or ctx
// ends (nil then).
func (d *driver) getRun(ctx context.Context, id string) *xctv1.Run {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := d.orch[attempt%2].GetRun(cctx, &xctv1.GetRunRequest{RunId: id})
		cancel()
		if err == nil {
			return got.GetRun()
		}
		if attempt > 20 || !backoff(ctx, attempt) {
			return nil
		}
	}
}

// waitingInDoubt: the run is not over but visibly waits for a decision
// about a step in doubt (a status saying so, or its message).
func waitingInDoubt(run *xctv1.Run) bool {
	s := run.GetStatus().String()
	return strings.Contains(s, "IN_DOUBT") || strings.Contains(s, "WAITING") ||
		(run.GetStatus() != xctv1.RunStatus_RUN_STATUS_RUNNING && strings.Contains(run.GetMessage(), "in doubt"))
}

// serveModel serves the model on the cluster's model listener.
func serveModel(c *cluster, m *model) func() {
	g := grpc.NewServer()
	xctv1.RegisterProposerServiceServer(g, m)
	go func() {
		if err := g.Serve(c.modelLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			fmt.Println("chaos model:", err)
		}
	}()
	return g.Stop
}
