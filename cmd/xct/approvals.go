package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

func dialValidator(id *identity, addr string) (xctv1.ValidatorServiceClient, func(), error) {
	conn, err := id.dial(addr)
	if err != nil {
		return nil, nil, err
	}
	return xctv1.NewValidatorServiceClient(conn), func() { _ = conn.Close() }, nil
}

func validatorError(what, addr string, err error) error {
	st := status.Convert(err)
	return fmt.Errorf("%s (validator %s): %s: %s%s", what, addr, st.Code(), st.Message(), rpcHint(err))
}

// cmdApprovals lists approvals: the proposal, why it needs a human, and the
// preview of what it would do.
func cmdApprovals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("approvals", stderr)
	var id identity
	addr := id.addrFlag(fs, "validator-addr", svcValidator, "validator gRPC address")
	runID := fs.String("run", "", "only this run's approvals")
	all := fs.Bool("all", false, "include decided and expired approvals")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	client, closeConn, err := dialValidator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := client.ListApprovals(cctx, &xctv1.ListApprovalsRequest{RunId: *runID, All: *all})
	if err != nil {
		return validatorError("list approvals", *addr, err)
	}
	if len(resp.GetApprovals()) == 0 {
		fmt.Fprintln(stdout, "no approvals waiting")
		return nil
	}
	for i, a := range resp.GetApprovals() {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printApproval(stdout, a)
	}
	return nil
}

func printApproval(w io.Writer, a *xctv1.Approval) {
	// Every text here but the state and the times is the run's or its
	// model's: each is printed through line (or, for the preview, a line
	// at a time), so what the approver reads is what would run.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := strings.ToLower(strings.TrimPrefix(a.GetState().String(), "APPROVAL_STATE_"))
	fmt.Fprintf(tw, "run\t%s\n", line(a.GetRunId()))
	fmt.Fprintf(tw, "step\t%d (%s)\n", a.GetStep(), line(a.GetStepId()))
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "requested by\t%s at %s\n", line(a.GetRequestedBy()), a.GetRequestedAt().AsTime().Local().Format(time.DateTime))
	if a.GetAgent() != "" {
		// A crew run's step: the member that proposed it, and the
		// hand-overs that gave it control (the entry agent first).
		fmt.Fprintf(tw, "crew member\t%s (crew %s)\n", line(a.GetAgent()), line(a.GetCrew()))
		path := make([]string, len(a.GetHandoffPath()))
		for i, p := range a.GetHandoffPath() {
			path[i] = line(p)
		}
		fmt.Fprintf(tw, "handed over\t%s\n", strings.Join(path, " -> "))
	}
	fmt.Fprintf(tw, "expires\t%s\n", a.GetExpiresAt().AsTime().Local().Format(time.DateTime))
	fmt.Fprintf(tw, "proposal\t%s\n", line(a.GetProposal().GetTool()))
	if g := a.GetProposal().GetGoal(); g != "" {
		fmt.Fprintf(tw, "goal\t%s\n", line(g))
	}
	for _, r := range a.GetReasons() {
		fmt.Fprintf(tw, "why\t%s: %s\n", line(r.GetRuleId()), line(r.GetMessage()))
	}
	if a.GetDecidedBy() != "" {
		fmt.Fprintf(tw, "decided by\t%s: %s\n", line(a.GetDecidedBy()), line(a.GetReason()))
	}
	_ = tw.Flush()
	// The arguments in full: what the approval is bound to, and for a tool
	// without a preview all the approver is shown (a first part of them
	// left out the url of an http.request whose body came first).
	fmt.Fprintln(w, "arguments:")
	var args bytes.Buffer
	enc := json.NewEncoder(&args)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a.GetProposal().GetArguments().AsMap()); err != nil {
		args.Reset()
		fmt.Fprintf(&args, "(not shown: %v)\n", err)
	}
	for _, l := range strings.Split(strings.TrimRight(args.String(), "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", line(l))
	}
	if p := a.GetPreview(); p != nil && p.GetContent() != "" {
		// What the approval binds: the step acts only on the entry the
		// preview was made from (a redacted preview's digest is keyed).
		if b := p.GetBaseDigest(); b != "" {
			fmt.Fprintf(w, "bound to: %s\n", line(baseWords(b)))
		}
		fmt.Fprintf(w, "preview (%s):\n", line(p.GetKind()))
		for _, l := range strings.Split(strings.TrimRight(p.GetContent(), "\n"), "\n") {
			v, _ := wire.Visible(l, "\t")
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
}

// cmdDecide is xct approve and xct deny.
func cmdDecide(ctx context.Context, approve bool, args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "approve", false: "deny"}[approve]
	fs := newFlagSet(name, stderr)
	var id identity
	addr := id.addrFlag(fs, "validator-addr", svcValidator, "validator gRPC address")
	reason := fs.String("reason", "", "why (required to deny)")
	id.register(fs, "as") // who decides: never the principal who started the run
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return &exitError{code: 2, err: fmt.Errorf("usage: xct %s RUN STEP [--reason TEXT] (STEP: the step number or its step id)", name)}
	}
	if !approve && *reason == "" {
		return &exitError{code: 2, err: errors.New("-reason is required to deny: the model is told why")}
	}
	client, closeConn, err := dialValidator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The decision names the step id: a number is turned into the id of
	// the one approval of that number, and refused when the run has had
	// several (the one read may not be the one pending now).
	step := fs.Arg(1)
	if n, err := strconv.Atoi(step); err == nil {
		list, err := client.ListApprovals(cctx, &xctv1.ListApprovalsRequest{RunId: fs.Arg(0), All: true})
		if err != nil {
			return validatorError(name, *addr, err)
		}
		var ids []string
		for _, a := range list.GetApprovals() {
			if int(a.GetStep()) == n {
				ids = append(ids, a.GetStepId())
			}
		}
		switch len(ids) {
		case 0:
			return fmt.Errorf("run %s has no approval for step %d (xct approvals --run %s --all)", fs.Arg(0), n, fs.Arg(0))
		case 1:
			step = ids[0]
		default:
			return fmt.Errorf("step %d of run %s has had %d approvals (%s): name the one you read by its step id (xct approvals --run %s --all)",
				n, fs.Arg(0), len(ids), strings.Join(ids, ", "), fs.Arg(0))
		}
	}
	resp, err := client.DecideApproval(cctx, &xctv1.DecideApprovalRequest{
		RunId: fs.Arg(0), Step: step, Approve: approve, Reason: *reason,
	})
	if err != nil {
		return validatorError(name, *addr, err)
	}
	a := resp.GetApproval()
	fmt.Fprintf(stdout, "step %d (%s) of %s %s by %s\n", a.GetStep(), a.GetStepId(), a.GetRunId(), map[bool]string{true: "approved", false: "denied"}[approve], a.GetDecidedBy())
	if v := a.GetDecidedPolicyVersion(); approve && v != "" && v != a.GetPolicyVersion() {
		fmt.Fprintf(stdout, "note: the approval was asked under policy %s and the policy is now %s: it counts only while the policy in force asks a human about the step for the same rules (%s); otherwise the step is refused (the model may propose it again under this policy)\n",
			a.GetPolicyVersion(), v, strings.Join(ruleIDs(a.GetReasons()), ", "))
	}
	return nil
}

// cmdResolve records a human's decision about a step in doubt: the executor
// may have acted but has no result. succeeded and failed close the step;
// retry lets the next execution of the same step id run it once more.
func cmdResolve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("resolve", stderr)
	var id identity
	orchAddr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address (to find the step's id)")
	execAddr := id.addrFlag(fs, "executor-addr", svcExecutor, "executor gRPC address")
	outcome := fs.String("outcome", "", "what the step did: succeeded, failed, or retry (run it once more)")
	id.register(fs, "as") // who decides
	reason := fs.String("reason", "", "why (recorded with the decision)")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	decision, ok := map[string]xctv1.StepDecision{
		"succeeded": xctv1.StepDecision_STEP_DECISION_SUCCEEDED,
		"failed":    xctv1.StepDecision_STEP_DECISION_FAILED,
		"retry":     xctv1.StepDecision_STEP_DECISION_RETRY,
	}[*outcome]
	if fs.NArg() != 2 || !ok {
		msg := "usage: xct resolve RUN STEP --outcome succeeded|failed|retry [--reason TEXT] [--as PRINCIPAL]"
		if *outcome != "" && !ok {
			msg = fmt.Sprintf("--outcome %q: want succeeded, failed or retry; %s", *outcome, msg)
		}
		return &exitError{code: 2, err: errors.New(msg)}
	}
	// The decision names the step's id and the step_in_doubt it settles,
	// as the run's chain holds them now: sent again later, it cannot
	// settle another attempt's doubt.
	client, closeConn, err := dialOrchestrator(&id, *orchAddr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	run, err := client.GetRun(cctx, &xctv1.GetRunRequest{RunId: fs.Arg(0)})
	cancel()
	if err != nil {
		return rpcError("get run", *orchAddr, err)
	}
	var step *xctv1.Step
	n, byNumber := strconv.Atoi(fs.Arg(1))
	for _, st := range run.GetRun().GetSteps() {
		if (byNumber == nil && int(st.GetNumber()) == n) || st.GetStepId() == fs.Arg(1) {
			step = st
		}
	}
	switch {
	case step == nil || step.GetStepId() == "":
		return fmt.Errorf("run %s has no executed step %s", fs.Arg(0), fs.Arg(1))
	case step.GetInDoubtSeq() == 0:
		return fmt.Errorf("step %d (%s) of run %s is not in doubt on its chain (%s): a decision settles a step in doubt only",
			step.GetNumber(), step.GetStepId(), fs.Arg(0), strings.ToLower(strings.TrimPrefix(step.GetState().String(), "STEP_STATE_")))
	}
	stepID := step.GetStepId()
	conn, err := id.dial(*execAddr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := xctv1.NewExecutorServiceClient(conn).ResolveStep(cctx, &xctv1.ResolveStepRequest{
		StepId: stepID, Decision: decision, Reason: *reason, RunId: fs.Arg(0), InDoubtSeq: step.GetInDoubtSeq(),
	})
	if err != nil {
		st := status.Convert(err)
		return fmt.Errorf("resolve (executor %s): %s: %s", *execAddr, st.Code(), st.Message())
	}
	fmt.Fprintf(stdout, "step %s resolved as %s by %s (state %s)\n", stepID, *outcome, resp.GetStep().GetResolution().GetResolvedBy(),
		strings.ToLower(strings.TrimPrefix(resp.GetStep().GetState().String(), "STEP_RECORD_STATE_")))
	return nil
}

// ruleIDs are the rule ids of reasons.
func ruleIDs(reasons []*xctv1.Reason) []string {
	out := make([]string, 0, len(reasons))
	for _, r := range reasons {
		out = append(out, r.GetRuleId())
	}
	return out
}

// baseWords says what a preview's base digest binds the approval to.
func baseWords(b string) string {
	switch {
	case b == "absent":
		return "no entry at the path (absent): the step does nothing if one is there by then"
	case b == "refused":
		return "nothing the step could act on (refused): the step, approved, is refused"
	case strings.HasPrefix(b, "[REDACTED"):
		return b + " (the digest of a redacted preview's entry, keyed): the step acts only on that entry"
	}
	return b + ": the step acts only on the entry with this digest"
}
