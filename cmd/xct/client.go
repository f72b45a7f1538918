package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xct-dev/xct/examples"
	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
)

func dialOrchestrator(id *identity, addr string) (xctv1.OrchestratorServiceClient, func(), error) {
	conn, err := id.dial(addr)
	if err != nil {
		return nil, nil, err
	}
	return xctv1.NewOrchestratorServiceClient(conn), func() { conn.Close() }, nil
}

// rpcError makes a gRPC error one readable line.
func rpcError(what, addr string, err error) error {
	st := status.Convert(err)
	return fmt.Errorf("%s (orchestrator %s): %s: %s%s", what, addr, st.Code(), st.Message(), rpcHint(err))
}

type labelFlags map[string]string

func (l labelFlags) String() string { return "" }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: want key=value", v)
	}
	l[k] = val
	return nil
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var id identity
	addr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address; several, comma-separated, to follow the run when one stops (the run starts on the first)")
	model := fs.String("model", "", "the model: scripted:FILE (inside the orchestrator's -scripts-dir), openai:MODEL or grpc:ADDR")
	crewFile := fs.String("crew", "", "a crew file (docs/crews.md): its agents propose in turn, each on its own models (instead of -model)")
	goal := fs.String("goal", "", "what the run should achieve")
	runID := fs.String("run-id", "", "run id (generated when empty)")
	maxSteps := fs.Int("max-steps", 0, "step budget (0: the orchestrator's default)")
	id.register(fs, "as")
	detach := fs.Bool("detach", false, "start the run and print its id without following it")
	retry := fs.Duration("start-retry", time.Minute, "how long to retry, with the same run id, a start that may have reached an orchestrator and failed UNAVAILABLE or past its deadline (0: until an orchestrator answers, or the command is interrupted)")
	labels := labelFlags{}
	fs.Var(labels, "label", "key=value label (repeatable)")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if (*model == "") == (*crewFile == "") || *goal == "" {
		return &exitError{code: 2, err: errors.New("-goal and one of -model or -crew are required")}
	}
	if *retry < 0 {
		return &exitError{code: 2, err: errors.New("-start-retry must not be negative")}
	}
	var crewSrc []byte
	if *crewFile != "" {
		var err error
		if crewSrc, err = readCrewFile(*crewFile); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	addrs := strings.Split(*addr, ",")
	client, closeConn, err := dialOrchestrator(&id, addrs[0])
	if err != nil {
		return err
	}
	defer closeConn()
	started, err := startRun(ctx, &id, client, addrs, *retry, &xctv1.StartRunRequest{
		Goal: *goal, Model: *model, RunId: *runID, MaxSteps: int32(*maxSteps), Labels: labels,
		Crew: crewSrc, CrewFile: filepath.Base(*crewFile),
	})
	if err != nil {
		return err
	}
	if *detach {
		fmt.Fprintln(stdout, started)
		return nil
	}
	return watch(ctx, &id, client, addrs[0], started, stdout, addrs[1:]...)
}

// startRun starts the run req asks for and returns its id. The id is the
// caller's (--run-id), or made here, never by the orchestrator: a start
// whose answer was lost (the orchestrator died after it recorded the run,
// a connection cut) is retried with the same id, as UNAVAILABLE tells it
// to, on the next of the addresses, and a retry told ALREADY_EXISTS is
// the earlier attempt's run, which is followed. A retry that made its own
// id would start the goal a second time, its steps acting again (session
// 17). A first attempt never sent (no orchestrator there) fails at once:
// nothing started. Retried for up to bound (0: until an answer, or ctx
// ends); past it, after an attempt that may have been sent, the
// orchestrators are asked for the run (GetRun): one that has it, it is
// followed; else the error names the id, which may have started.
func startRun(ctx context.Context, id *identity, client xctv1.OrchestratorServiceClient, addrs []string, bound time.Duration, req *xctv1.StartRunRequest) (string, error) {
	if req.GetRunId() == "" {
		req.RunId = newRunID()
	}
	cur, closeCur := client, func() {}
	defer func() { closeCur() }()
	first := time.Now()
	sent := false // an attempt may have reached an orchestrator: the run may have started
	for i, attempt := 0, 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var p peer.Peer
		resp, err := cur.StartRun(sctx, req, grpc.Peer(&p))
		cancel()
		// gRPC fills the peer only once a transport stream existed for
		// the call: without one, not a byte of it was sent.
		sent = sent || (err != nil && p.Addr != nil)
		mayHave := fmt.Sprintf("it may have started: see xct show %s before starting it again", req.GetRunId())
		inDoubt := fmt.Sprintf("start run %s (%s)", req.GetRunId(), mayHave)
		switch code := status.Code(err); {
		case err == nil:
			return resp.GetRun().GetRunId(), nil
		case code == codes.AlreadyExists && attempt > 1:
			return req.GetRunId(), nil // started by an earlier attempt whose answer was lost
		case !sent && attempt == 1:
			return "", rpcError("start run", addrs[i], err) // never sent: nothing started
		case code != codes.Unavailable && code != codes.DeadlineExceeded || ctx.Err() != nil:
			if sent && attempt > 1 {
				return "", rpcError(inDoubt, addrs[i], err)
			}
			return "", rpcError("start run", addrs[i], err)
		case bound > 0 && time.Since(first) > bound:
			if sent && runExists(ctx, id, addrs, req.GetRunId()) {
				// The start landed and its answer was lost; the
				// orchestrators still refuse starts but can say the run
				// is there: it is followed, as an ALREADY_EXISTS is.
				return req.GetRunId(), nil
			}
			return "", rpcError(fmt.Sprintf("start run %s, retried for %v (--start-retry; %s)", req.GetRunId(), bound, mayHave), addrs[i], err)
		}
		if len(addrs) > 1 {
			i = (i + 1) % len(addrs)
			closeCur()
			next, closeNext, derr := dialOrchestrator(id, addrs[i])
			if derr != nil {
				return "", derr
			}
			cur, closeCur = next, closeNext
		}
		select {
		case <-ctx.Done():
			return "", rpcError("start run "+req.GetRunId(), addrs[i], ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runExists asks the orchestrators at addrs, one after another, for run
// runID: true when one has it. An answer that does not find it (NotFound
// from a run not yet visible there, an orchestrator down) proves nothing:
// false, and the caller names the run that may have started.
func runExists(ctx context.Context, id *identity, addrs []string, runID string) bool {
	for _, addr := range addrs {
		client, closeConn, err := dialOrchestrator(id, addr)
		if err != nil {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = client.GetRun(gctx, &xctv1.GetRunRequest{RunId: runID})
		cancel()
		closeConn()
		if err == nil {
			return true
		}
	}
	return false
}

// newRunID is a run id as the orchestrator makes them (run-UTC time-8 hex).
func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "run-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// watchRetry bounds how long watch keeps trying to reach an orchestrator
// after a stream broke.
const watchRetry = 60 * time.Second

// watch prints a run's events until it ends; the exit code says how. When
// the stream breaks with UNAVAILABLE (the orchestrator stopped and handed
// its runs over), it watches again from the next event, on the next of
// the addresses (addr, then others, round robin): the run goes on at
// another replica and its chain is the same.
func watch(ctx context.Context, id *identity, client xctv1.OrchestratorServiceClient, addr, runID string, stdout io.Writer, others ...string) error {
	addrs := append([]string{addr}, others...)
	cur, closeCur := client, func() {}
	defer func() { closeCur() }()
	p := newStepPrinter(stdout)
	var from uint64
	var broken time.Time
	for i := 0; ; {
		err := watchOnce(ctx, cur, runID, from, func(e *lctlv1.Event) {
			from = e.GetSeq() + 1
			broken = time.Time{}
			p.print(e)
		})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return rpcError("watch run "+runID, addrs[i], err)
		}
		if broken.IsZero() {
			broken = time.Now()
		} else if time.Since(broken) > watchRetry {
			return rpcError("watch run "+runID, addrs[i], err)
		}
		if len(addrs) > 1 {
			i = (i + 1) % len(addrs)
			closeCur()
			next, closeNext, derr := dialOrchestrator(id, addrs[i])
			if derr != nil {
				return derr
			}
			cur, closeCur = next, closeNext
		}
		select {
		case <-ctx.Done():
			return rpcError("watch run "+runID, addrs[i], ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	switch p.finalStatus {
	case "done":
		return nil
	case "":
		return fmt.Errorf("run %s: the stream ended before the run did", runID)
	}
	return &exitError{code: 1, err: fmt.Errorf("run %s %s", runID, p.finalStatus)}
}

// watchOnce streams a run's events from seq from until the run ends (nil)
// or the stream breaks.
func watchOnce(ctx context.Context, client xctv1.OrchestratorServiceClient, runID string, from uint64, fn func(*lctlv1.Event)) error {
	stream, err := client.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: runID, FromSeq: from})
	if err != nil {
		return err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(msg.GetEvent())
	}
}

// playDemo starts the bundled demos through the orchestrator's gRPC API
// and prints their steps as they happen: a single model's run, then a
// crew's. In the crew's run a human (bob, an approver) approves the step
// that waits for one, so the demo shows an approval without stopping.
func playDemo(ctx context.Context, id, approver *identity, addr, validatorAddr string, stdout io.Writer) error {
	client, closeConn, err := dialOrchestrator(id, addr)
	if err != nil {
		return err
	}
	defer closeConn()
	for _, req := range []*xctv1.StartRunRequest{{
		Goal:   "Switch the checkout service's deployment from blue to green",
		Model:  "scripted:demo.yaml",
		Labels: map[string]string{"demo": "true"},
	}, {
		// A crew: three agents, facts, handoffs, contracts, a model
		// fallback and an approval.
		Goal:     "Find and fix the SQL injection in UserController.py",
		Crew:     examples.CrewDemo,
		CrewFile: "examples/crews/demo/crew.yaml",
		Labels:   map[string]string{"demo": "crew"},
	}} {
		resp, err := client.StartRun(ctx, req)
		if err != nil {
			return rpcError("start demo", addr, err)
		}
		runID := resp.GetRun().GetRunId()
		wctx, stopApprover := context.WithCancel(ctx)
		if len(req.GetCrew()) > 0 {
			go approveDemo(wctx, client, approver, validatorAddr, runID)
		}
		fmt.Fprintln(stdout)
		err = watch(ctx, id, client, addr, runID, stdout)
		stopApprover()
		if err != nil {
			return err
		}
	}
	return nil
}

// approveDemo approves, as approver, each step of the demo run that waits
// for a human: what a reviewer would do in the debugger or with xct
// approve. It follows the run's chain and returns when the run ends.
func approveDemo(ctx context.Context, client xctv1.OrchestratorServiceClient, approver *identity, validatorAddr, runID string) {
	stream, err := client.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: runID})
	if err != nil {
		return
	}
	val, closeVal, err := dialValidator(approver, validatorAddr)
	if err != nil {
		return
	}
	defer closeVal()
	for {
		msg, err := stream.Recv()
		if err != nil {
			return // the run ended (EOF) or the demo stops
		}
		if e := msg.GetEvent(); e.GetType() == lctl.TypeApprovalRequested {
			step := e.GetData().GetFields()["step_id"].GetStringValue()
			_, _ = val.DecideApproval(ctx, &xctv1.DecideApprovalRequest{
				RunId: runID, Step: step, Approve: true, Reason: "demo: the reviewer read the diff of the fix",
			})
		}
	}
}

func cmdRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("runs", stderr)
	var id identity
	addr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address")
	limit := fs.Int("limit", 50, "how many runs")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	client, closeConn, err := dialOrchestrator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := client.ListRuns(cctx, &xctv1.ListRunsRequest{Limit: int32(*limit)})
	if err != nil {
		return rpcError("list runs", *addr, err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tEVENTS\tMODEL\tSTARTED\tGOAL")
	for _, r := range resp.GetRuns() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", line(r.GetRunId()), runStatus(r.GetStatus()), r.GetLastSeq(), line(r.GetModel()),
			r.GetCreatedAt().AsTime().Local().Format(time.DateTime), truncate(r.GetGoal(), 60))
	}
	return tw.Flush()
}

func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("show", stderr)
	var id identity
	addr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address")
	asJSON := fs.Bool("json", false, "print the run as JSON")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 2, err: errors.New("usage: xct show RUN")}
	}
	client, closeConn, err := dialOrchestrator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := client.GetRun(cctx, &xctv1.GetRunRequest{RunId: fs.Arg(0)})
	if err != nil {
		return rpcError("get run", *addr, err)
	}
	r := resp.GetRun()
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	fmt.Fprintf(stdout, "run        %s\nstatus     %s\ngoal       %s\nmodel      %s\nprincipal  %s\nstarted    %s\ntokens     %d in / %d out\nevents     %d\n",
		line(r.GetRunId()), runStatus(r.GetStatus()), line(r.GetGoal()), line(r.GetModel()), line(r.GetPrincipal()),
		r.GetCreatedAt().AsTime().Local().Format(time.RFC3339), r.GetInputTokens(), r.GetOutputTokens(), r.GetLastSeq())
	if r.GetMessage() != "" {
		fmt.Fprintf(stdout, "message    %s\n", line(r.GetMessage()))
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tTOOL\tVERDICT\tRESPONSE")
	for _, st := range r.GetSteps() {
		resp := "-" // no response: the step did not run
		switch {
		case st.GetResponse().GetError() != nil:
			e := st.GetResponse().GetError()
			resp = e.GetCode() + ": " + e.GetMessage()
		case st.GetResponse().GetSuccess() != nil:
			resp = "success"
		case st.GetState() == xctv1.StepState_STEP_STATE_CANCELLED:
			resp = "- (the run was cancelled: the step did not run)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", st.GetNumber(), stepState(st.GetState()), line(st.GetProposal().GetTool()),
			verdictName(st.GetVerdict().GetDecision()), truncate(resp, 70))
	}
	return tw.Flush()
}

func runStatus(s xctv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATUS_"))
}

func stepState(s xctv1.StepState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STEP_STATE_"))
}

func verdictName(d xctv1.VerdictDecision) string {
	if d == xctv1.VerdictDecision_VERDICT_DECISION_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(strings.TrimPrefix(d.String(), "VERDICT_DECISION_"))
}

func truncate(s string, n int) string {
	return text.TruncateRunes(line(strings.ReplaceAll(s, "\n", " ")), n)
}

// line is text a run or its model chose (a goal, a message, a path, a
// fact), as one line a terminal prints as it is: every character that a
// terminal would not show as itself (a carriage return, an escape
// sequence, a bidirectional override, a newline or a tab that would make
// a row of its own) is written as its escape (wire.Visible).
func line(s string) string {
	v, _ := wire.Visible(s, "")
	return v
}

// cmdRollback undoes an ended run's steps, newest first, each as a governed
// step on the run's chain.
func cmdRollback(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rollback", stderr)
	var id identity
	addr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address")
	toStep := fs.Int("to-step", 0, "keep steps up to and including this one (0: undo every step)")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *toStep < 0 {
		return &exitError{code: 2, err: errors.New("usage: xct rollback RUN [--to-step N]")}
	}
	client, closeConn, err := dialOrchestrator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	resp, err := client.RollbackRun(cctx, &xctv1.RollbackRunRequest{RunId: fs.Arg(0), ToStep: int32(*toStep)})
	if err != nil {
		return rpcError("rollback", *addr, err)
	}
	fmt.Fprintf(stdout, "undone steps: %v\n", resp.GetUndone())
	if resp.GetStatus() != "done" {
		return &exitError{code: 1, err: fmt.Errorf("rollback of %s stopped: %s", fs.Arg(0), resp.GetMessage())}
	}
	fmt.Fprintln(stdout, "rollback done")
	return nil
}
