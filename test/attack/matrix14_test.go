package attack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
)

// Session 14 (attack14b): the authorization matrix, end to end.

// matrixPrincipals are the callers of TestAttackAuthorizationMatrix: the
// development credentials' people, the orchestrator's service identity
// (grpcxtest.Service, the one --step-callers and --verdict-callers name),
// a second service identity (a deployment's tracer) and a second
// submitter, eve, who owns no run of the test.
var matrixPrincipals = []string{grpcxtest.Service, "service:tracer", "admin", "dev", "alice", "eve", "bob", "carol", "dave"}

// withExtraPrincipals adds service:tracer (role service) and eve
// (submitter) to the cluster's tokens file and narrows verdicts and steps
// to the orchestrator's identity, as the manifests do. It returns their
// tokens.
func withExtraPrincipals(t *testing.T) (bindOption, map[string]string) {
	t.Helper()
	toks := map[string]string{}
	for _, name := range []string{"service:tracer", "eve"} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
	}
	return func(cfg *app.Config, _ *app.Options) {
		b, err := os.ReadFile(cfg.Auth.TokensFile)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := auth.ParseTokens(b)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries,
			auth.TokenEntry{Principal: "service:tracer", Roles: []string{auth.RoleService}, Token: toks["service:tracer"]},
			auth.TokenEntry{Principal: "eve", Roles: []string{auth.RoleSubmitter}, Token: toks["eve"]})
		out, err := yaml.Marshal(entries)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg.Auth.TokensFile, out, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Executor.StepCallers = []string{grpcxtest.Service}
		cfg.Validator.VerdictCallers = []string{grpcxtest.Service}
	}, toks
}

// matrixConns dials each service of c as each principal once.
type matrixConns struct {
	t     *testing.T
	c     *bindCluster
	extra map[string]string
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (m *matrixConns) conn(target, who string) *grpc.ClientConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := target + "/" + who
	if cc, ok := m.conns[key]; ok {
		return cc
	}
	var cc *grpc.ClientConn
	switch tok, ok := m.extra[who]; {
	case who == "":
		var err error
		if cc, err = grpcx.Dial(m.c.app.Addr(target)); err != nil {
			m.t.Fatal(err)
		}
		m.t.Cleanup(func() { _ = cc.Close() })
	case ok:
		var err error
		if cc, err = grpcx.Dial(m.c.app.Addr(target), grpcx.WithToken(tok)); err != nil {
			m.t.Fatal(err)
		}
		m.t.Cleanup(func() { _ = cc.Close() })
	default:
		cc = m.c.creds.Dial(m.t, m.c.app.Addr(target), who)
	}
	m.conns[key] = cc
	return cc
}

func (m *matrixConns) orch(who string) xctv1.OrchestratorServiceClient {
	return xctv1.NewOrchestratorServiceClient(m.conn(app.TargetOrchestrator, who))
}
func (m *matrixConns) val(who string) xctv1.ValidatorServiceClient {
	return xctv1.NewValidatorServiceClient(m.conn(app.TargetValidator, who))
}
func (m *matrixConns) exec(who string) xctv1.ExecutorServiceClient {
	return xctv1.NewExecutorServiceClient(m.conn(app.TargetExecutor, who))
}
func (m *matrixConns) tracer(who string) lctlv1.TracerServiceClient {
	return lctlv1.NewTracerServiceClient(m.conn(app.TargetTracer, who))
}

// matrixRow is one call: who may make it (allowed; everyone else must be
// refused PERMISSION_DENIED, by the role table or the handler), and what
// an allowed call must also show (check, may be nil).
type matrixRow struct {
	name    string
	allowed []string
	call    func(ctx context.Context, who string) (any, error)
	check   func(who string, resp any) error
}

// The promise, for every RPC of every service: each principal can do only
// what docs/security.md says its roles allow, and a service identity
// other than the orchestrator's gets no verdict, runs, previews and fences
// no step, opens and withdraws no approval. Each row calls one RPC with a
// request that would act, as each principal: an allowed caller is not
// refused for who it is (its answer may still say the run ended or the
// step is unknown), everyone else is refused PERMISSION_DENIED, and a
// caller without credentials UNAUTHENTICATED. Held on main (session 14):
// the table (auth.DefaultTable) refuses by role; the handlers refuse by
// name (a run's own principal, ActingAs), by --step-callers and
// --verdict-callers; ListApprovals shows the arguments only to who may
// decide.
func TestAttackAuthorizationMatrix(t *testing.T) {
	t.Parallel()
	opt, extra := withExtraPrincipals(t)
	c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "config-approval.yaml")), opt)
	m := &matrixConns{t: t, c: c, extra: extra, conns: map[string]*grpc.ClientConn{}}
	if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "config", "app.yaml"), []byte("mode: safe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// alice's run W waits for a human to approve a write holding a
	// secret; her run D ended, having written a file.
	c.writeScript(t, "w.yaml", script(step("fs.write", `{path: config/app.yaml, content: "key: `+awsKey+`\n"}`)))
	c.writeScript(t, "d.yaml", script(step("fs.write", `{path: d.txt, content: "d\n"}`)))
	c.writeScript(t, "n.yaml", script())
	d := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "d", Model: "scripted:d.yaml"})
	if got := fmt.Sprint(stepErrors(d)); got != "[]" {
		t.Fatalf("alice's run D: %v", got)
	}
	resp, err := m.orch("alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "w", Model: "scripted:w.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.GetRun().GetRunId()
	pending := waitApproval(t, c, "bob", w)

	// A signed verdict for a read at step 99 of D, as the orchestrator
	// gets it, for the Execute row.
	vreq, ereq := proposal(t, d.GetRunId(), 99, "fs.list", map[string]any{"path": "."})
	vreq.Run.Principal = "alice"
	v, err := m.val(grpcxtest.Service).Validate(ctx, vreq)
	if err != nil {
		t.Fatal(err)
	}
	if v.GetVerdict().GetSigned() == nil {
		t.Fatalf("the orchestrator's Validate of a read: %v, want a signed allow", v.GetVerdict())
	}
	ereq.Verdict = v.GetVerdict().GetSigned()

	newStepID := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	writeArgs, err := structpb.NewStruct(map[string]any{"path": "config/app.yaml", "content": "x\n"})
	if err != nil {
		t.Fatal(err)
	}
	// A trace of each exporter's own: a trace's chain takes the spans of
	// the principal who exported its first ones only.
	otlpReq := func(who string) *coltracepb.ExportTraceServiceRequest {
		traceID, span := make([]byte, 16), make([]byte, 8)
		_, _ = rand.Read(traceID)
		_, _ = rand.Read(span)
		now := uint64(time.Now().UnixNano())
		return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "matrix-" + who}}}}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
				TraceId: traceID, SpanId: span, Name: "work", StartTimeUnixNano: now, EndTimeUnixNano: now + 1,
			}}}},
		}}}
	}

	everyone := matrixPrincipals
	readers := everyone
	rows := []matrixRow{
		// Orchestrator.
		{name: "StartRun", allowed: []string{"admin", "dev", "alice", "eve"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.orch(who).StartRun(ctx, &xctv1.StartRunRequest{Goal: "n", Model: "scripted:n.yaml"})
			},
			check: func(who string, resp any) error {
				if got := resp.(*xctv1.StartRunResponse).GetRun().GetPrincipal(); got != who {
					return fmt.Errorf("the run's principal is %q", got)
				}
				return nil
			}},
		{name: "StartRun in alice's name", allowed: []string{"alice"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.orch(who).StartRun(ctx, &xctv1.StartRunRequest{Goal: "n", Model: "scripted:n.yaml", Principal: "alice"})
			}},
		{name: "GetRun", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.orch(who).GetRun(ctx, &xctv1.GetRunRequest{RunId: d.GetRunId()})
		}},
		{name: "ListRuns", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.orch(who).ListRuns(ctx, &xctv1.ListRunsRequest{})
		}},
		{name: "WatchRun", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			s, err := m.orch(who).WatchRun(ctx, &xctv1.WatchRunRequest{RunId: d.GetRunId()})
			if err != nil {
				return nil, err
			}
			return s.Recv()
		}},
		// Of an ended run: an allowed caller is told it ended; the owner
		// check comes first (CancelRun).
		{name: "CancelRun of alice's run", allowed: []string{"admin", "dev", "alice", "carol"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.orch(who).CancelRun(ctx, &xctv1.CancelRunRequest{RunId: d.GetRunId()})
			}},
		{name: "RollbackRun", allowed: []string{"admin", "dev", "carol"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.orch(who).RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: d.GetRunId()})
			}},
		{name: "RollbackRun in carol's name", allowed: []string{"carol"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.orch(who).RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: d.GetRunId(), Principal: "carol"})
			}},

		// Validator.
		{name: "Validate", allowed: []string{grpcxtest.Service, "service:tracer", "admin"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.val(who).Validate(ctx, vreq)
			},
			check: func(who string, resp any) error {
				signed := resp.(*xctv1.ValidateResponse).GetVerdict().GetSigned() != nil
				if signed != (who == grpcxtest.Service) {
					return fmt.Errorf("signed: %v", signed)
				}
				return nil
			}},
		{name: "RequestApproval", allowed: []string{grpcxtest.Service},
			call: func(ctx context.Context, who string) (any, error) {
				// The orchestrator's is refused for the request (no
				// proposal), not for who it is.
				return m.val(who).RequestApproval(ctx, &xctv1.RequestApprovalRequest{})
			}},
		{name: "WithdrawApproval", allowed: []string{grpcxtest.Service},
			call: func(ctx context.Context, who string) (any, error) {
				if who == grpcxtest.Service {
					// It would withdraw W's: ask for a step that has none.
					return m.val(who).WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{RunId: w, StepId: newStepID(), By: "x", Reason: "x"})
				}
				return m.val(who).WithdrawApproval(ctx, &xctv1.WithdrawApprovalRequest{RunId: w, StepId: pending.GetStepId(), By: who, Reason: "x"})
			}},
		{name: "ListApprovals", allowed: readers,
			call: func(ctx context.Context, who string) (any, error) {
				return m.val(who).ListApprovals(ctx, &xctv1.ListApprovalsRequest{RunId: w})
			},
			check: func(who string, resp any) error {
				l := resp.(*xctv1.ListApprovalsResponse).GetApprovals()
				if len(l) != 1 {
					return fmt.Errorf("%d approvals", len(l))
				}
				content := l[0].GetProposal().GetArguments().GetFields()["content"].GetStringValue()
				full := who == "bob" || who == "admin" // approvers who did not start W
				if shown := strings.Contains(content, awsKey); shown != full {
					return fmt.Errorf("the arguments shown in full: %v (content %q)", shown, content)
				}
				return nil
			}},
		{name: "DecideApproval in another's name", allowed: nil,
			call: func(ctx context.Context, who string) (any, error) {
				other := "bob"
				if who == "bob" {
					other = "admin"
				}
				return m.val(who).DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: w, Step: pending.GetStepId(), Approve: true, Approver: other})
			}},

		// Executor.
		{name: "ListTools", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.exec(who).ListTools(ctx, &xctv1.ListToolsRequest{})
		}},
		{name: "Execute with the orchestrator's verdict", allowed: []string{grpcxtest.Service},
			call: func(ctx context.Context, who string) (any, error) {
				return m.exec(who).Execute(ctx, ereq)
			},
			check: func(_ string, resp any) error {
				if e := resp.(*xctv1.ExecuteResponse).GetResponse().GetError(); e != nil {
					return fmt.Errorf("the step failed: %v", e)
				}
				return nil
			}},
		{name: "PreviewStep", allowed: []string{grpcxtest.Service},
			call: func(ctx context.Context, who string) (any, error) {
				return m.exec(who).PreviewStep(ctx, &xctv1.PreviewStepRequest{Tool: "fs.write", Arguments: writeArgs})
			}},
		{name: "GetStep", allowed: []string{grpcxtest.Service, "service:tracer", "admin", "dev", "carol", "dave"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.exec(who).GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId()})
			}},
		{name: "GetStep with fence", allowed: []string{grpcxtest.Service},
			call: func(ctx context.Context, who string) (any, error) {
				return m.exec(who).GetStep(ctx, &xctv1.GetStepRequest{StepId: newStepID(), Fence: true})
			}},
		{name: "ResolveStep", allowed: []string{"admin", "dev", "carol"},
			call: func(ctx context.Context, who string) (any, error) {
				// A step without a record: the decision becomes its record
				// (records.go, ResolveStep), for who may resolve.
				return m.exec(who).ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: newStepID(), Decision: xctv1.StepDecision_STEP_DECISION_FAILED, Reason: "x"})
			}},
		{name: "ResolveStep in carol's name", allowed: []string{"carol"},
			call: func(ctx context.Context, who string) (any, error) {
				return m.exec(who).ResolveStep(ctx, &xctv1.ResolveStepRequest{StepId: newStepID(), Decision: xctv1.StepDecision_STEP_DECISION_FAILED, Reason: "x", ResolvedBy: "carol"})
			}},

		// Tracer.
		{name: "ListChains", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.tracer(who).ListChains(ctx, &lctlv1.ListChainsRequest{})
		}},
		{name: "GetChain", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.tracer(who).GetChain(ctx, &lctlv1.GetChainRequest{ChainId: d.GetRunId()})
		}},
		{name: "VerifyChain", allowed: readers, call: func(ctx context.Context, who string) (any, error) {
			return m.tracer(who).VerifyChain(ctx, &lctlv1.VerifyChainRequest{ChainId: d.GetRunId()})
		}},
		{name: "OTLP Export", allowed: []string{grpcxtest.Service, "service:tracer", "admin", "dev", "alice", "eve"},
			call: func(ctx context.Context, who string) (any, error) {
				return coltracepb.NewTraceServiceClient(m.conn(app.TargetTracer, who)).Export(ctx, otlpReq(who))
			}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for _, who := range everyone {
				cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
				resp, err := row.call(cctx, who)
				ccancel()
				code := status.Code(err)
				if slices.Contains(row.allowed, who) {
					if code == codes.PermissionDenied || code == codes.Unauthenticated {
						t.Errorf("%s, allowed, was refused: %v", who, err)
					} else if err == nil && row.check != nil {
						if cerr := row.check(who, resp); cerr != nil {
							t.Errorf("%s: %v", who, cerr)
						}
					}
					continue
				}
				if code != codes.PermissionDenied {
					t.Errorf("%s, not allowed: %v (answer %v), want PermissionDenied", who, err, resp)
				}
			}
			// Without credentials, nothing but UNAUTHENTICATED.
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			defer ccancel()
			if _, err := row.call(cctx, ""); status.Code(err) != codes.Unauthenticated {
				t.Errorf("without credentials: %v, want Unauthenticated", err)
			}
		})
	}

	// None of it moved W: its approval is still pending, bob approves,
	// and the write of what bob was shown is done.
	if got := waitApproval(t, c, "bob", w); got.GetStepId() != pending.GetStepId() || got.GetState() != xctv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("W's approval after the matrix: %v", got)
	}
	if _, err := m.val("bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: w, Step: pending.GetStepId(), Approve: true}); err != nil {
		t.Fatal(err)
	}
	run := c.waitRun(t, "alice", w)
	if got := fmt.Sprint(stepErrors(run)); got != "[]" {
		t.Errorf("W after bob approved: %v", got)
	}
	if got, _ := readWS(t, c.workspace, "config/app.yaml"); got != "key: "+awsKey+"\n" {
		t.Errorf("config/app.yaml: %q", got)
	}
}

// An operator forged the outcome of a step that had not run: a step
// without a record takes a human's resolution as its record (a step in
// doubt whose record outlived --step-retention is resolved so), and a
// record without a call holds for whatever call carries its step id.
// Under config-approval.yaml alice's write of config/app.yaml waited for
// bob; carol (operator) read its step id from ListApprovals and resolved
// it "succeeded" with a result of her own; bob approved, and on main the
// run ended DONE with carol's result as the write's, the file unchanged.
// A resolution made before the validator allowed the step settled no
// doubt: the executor now runs the step under the verdict issued after
// it, and the resolution is kept in the record's reruns.
func TestAttackOperatorResolvesAStepBeforeItRuns(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "config-approval.yaml")))
	if err := os.MkdirAll(filepath.Join(c.workspace, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "config", "app.yaml"), []byte("mode: safe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "a.yaml", script(step("fs.write", `{path: config/app.yaml, content: "mode: fast\n"}`)))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	a := waitApproval(t, c, "bob", id)
	forged, err := structpb.NewValue(map[string]any{"forged": "by carol"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.executorAs(t, "carol").ResolveStep(ctx, &xctv1.ResolveStepRequest{
		StepId: a.GetStepId(), Decision: xctv1.StepDecision_STEP_DECISION_SUCCEEDED, Reason: "done already", Result: forged,
	}); err != nil {
		// Refusing the resolution would hold too.
		t.Logf("carol's resolution: %v", err)
	}
	if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: a.GetStepId(), Approve: true}); err != nil {
		t.Fatal(err)
	}
	run := c.waitRun(t, "alice", id)
	for _, s := range run.GetSteps() {
		if strings.Contains(fmt.Sprint(s.GetResponse()), "forged") {
			t.Errorf("the run took carol's result for the approved write: %v", s.GetResponse())
		}
	}
	if got, _ := readWS(t, c.workspace, "config/app.yaml"); got != "mode: fast\n" {
		t.Errorf("config/app.yaml after bob approved: %q, want the write done", got)
	}
}
