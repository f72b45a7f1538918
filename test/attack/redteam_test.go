package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/otlp"
)

// Session 6 (red team): attacks that combine allowed actions, each first
// seen to get through, then closed.

// A read-only role wrote a step record: GetStep is open to auditors and
// operators (to read records), and its fence flag records a step without
// a record as "not executed". Step ids are computable from what WatchRun
// shows (run, step number, tool, arguments), so an auditor who fenced a
// step between its verdict and its Execute made the orchestrator's call
// replay "not executed": the run's allowed step never ran. The fence is
// the orchestrator's (role service) only.
func TestAttackFenceByAReader(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vreq, ereq := proposal(t, "fence-run", 1, "fs.write", map[string]any{"path": "planned.txt", "content": "x"})
	v, err := c.validatorAs(t, "service:dev").Validate(ctx, vreq)
	if err != nil || v.GetVerdict().GetSigned() == nil {
		t.Fatalf("validate: %v %v", v, err)
	}
	for _, who := range []string{"dave", "carol", "dev", "admin"} {
		_, err := c.executorAs(t, who).GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId(), Fence: true})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s fenced a step: %v", who, err)
		}
		// Reading stays open to them.
		if _, err := c.executorAs(t, who).GetStep(ctx, &xctv1.GetStepRequest{StepId: ereq.GetStepId()}); status.Code(err) != codes.NotFound {
			t.Errorf("%s reading a step without a record: %v", who, err)
		}
	}
	resp, err := c.executorAs(t, "service:dev").Execute(ctx, withVerdict(ereq, v.GetVerdict().GetSigned()))
	if err != nil || resp.GetResponse().GetError() != nil {
		t.Fatalf("the allowed step: %v %v", resp, err)
	}
	if got, _ := readWS(t, c.workspace, "planned.txt"); got != "x" {
		t.Fatalf("the allowed step did not act: planned.txt = %q", got)
	}
}

// An allowed read ran the model's code: the model wrote a bare git
// repository's files (HEAD, config, objects/, refs/: none of them a
// protected name) into a directory with fs.write, and the shipped
// example's git status (effect read, so allowed without a human) run in
// that directory took it for a repository and ran its core.fsmonitor
// command. Inside the sandbox, but with the workspace writable: a "read"
// deleted and wrote files no policy had judged, and nothing recorded how
// to undo it. Now a program whose effect is read sees the workspace
// read-only, and the example's git ignores repositories it was not
// pointed at (safe.bareRepository=explicit). Since session 18 HEAD is a
// protected name (the next human's git has no such setting): the
// model's write of it is denied, and the test starts from one already
// there.
func TestAttackReadProgramRunsModelWrittenGitConfig(t *testing.T) {
	requireSandbox(t)
	t.Run("the shipped example", func(t *testing.T) {
		attackBareRepo(t, withShippedExample(t), false)
	})
	// A git without the example's setting still runs the model's
	// command, but as a read: it changes nothing.
	t.Run("a read git without safe.bareRepository", func(t *testing.T) {
		attackBareRepo(t, withTools(t, "shell:\n  binaries:\n    - {name: git, effect: read, idempotent: true, subcommands: [status], allow_flags: []}\n", ""), true)
	})
}

func attackBareRepo(t *testing.T, tools bindOption, runs bool) {
	c := startBindCluster(t, tools)
	victim := filepath.Join(c.workspace, "victim.txt")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(c.workspace, "owned.txt")
	payload := fmt.Sprintf("echo pwned > %s; rm -f %s; echo RAN >&2; false", owned, victim)
	cfg := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = \"" + payload + "\"\n"
	// Since session 18 HEAD is a protected name (the next human's git
	// would take sub/ for a repository): the model's is denied, and the
	// attack goes on with one already there, as a human's.
	if err := os.MkdirAll(filepath.Join(c.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "sub", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "a.yaml", script(
		step("fs.write", `{path: sub/HEAD, content: "ref: refs/heads/dev\n"}`),
		step("fs.write", `{path: sub/objects/.keep, content: ""}`),
		step("fs.write", `{path: sub/refs/heads/.keep, content: ""}`),
		step("fs.write", fmt.Sprintf("{path: sub/config, content: %q}", cfg)),
		step("shell.exec", "{argv: [git, status], cwd: sub}"),
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := stepErrors(run); len(got) != 5 || fmt.Sprint(got[:4]) != "[POLICY_DENIED   ]" {
		t.Fatalf("steps %v", got)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("git status (a read) deleted or changed victim.txt: %q %v", b, err)
	}
	if _, err := os.Stat(owned); err == nil {
		t.Errorf("git status (a read) wrote owned.txt")
	}
	res := fmt.Sprint(run.GetSteps()[4].GetResponse())
	if ran := strings.Contains(res, "RAN"); ran != runs {
		t.Errorf("the model's core.fsmonitor ran: %v, want %v: %s", ran, runs, res)
	}
	if runs && !strings.Contains(res, "Read-only file system") {
		t.Errorf("the command ran but did not meet a read-only workspace: %s", res)
	}
}

// The policy judged one path and the tool acted on another: the shipped
// read-only policy denies fs tools on paths ending in ".key" or ".pem",
// and fs.read cleaned "deploy.key/." to "deploy.key" and read it. Any
// rule on a path string had the same hole ("./x", "a//b", "x/", "a/../b"
// for a prefix or suffix match). Now the fs tools (and shell.exec's cwd)
// take a path only in its clean form, the form the policy saw.
func TestAttackPolicySeesAnotherPath(t *testing.T) {
	t.Parallel()
	policy, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", "read-only.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := startBindCluster(t, withTools(t, "", string(policy)))
	for _, f := range []string{"deploy.key", "tls.pem"} {
		if err := os.WriteFile(filepath.Join(c.workspace, f), []byte("SECRET-KEY-MATERIAL\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.writeScript(t, "a.yaml", script(
		step("fs.read", `{path: deploy.key}`), // the policy's own case
		step("fs.read", `{path: deploy.key/.}`),
		step("fs.read", `{path: tls.pem//.}`),
		step("fs.read", `{path: ./tls.pem/}`),
		step("fs.list", `{path: .}`), // a clean path still works
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	got := stepErrors(run)
	want := []string{"POLICY_DENIED", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT", ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	for i, s := range run.GetSteps() {
		if strings.Contains(fmt.Sprint(s.GetResponse()), "SECRET-KEY-MATERIAL") {
			t.Errorf("step %d read the key: %v", i+1, s.GetResponse())
		}
	}
}

// A submitter wrote into a run's chain through the tracer: run ids are
// the caller's to choose, and the tracer appends an OTLP trace's spans to
// the chain "otel-<trace id>", resuming whatever chain has that id. A run
// started as "otel-<hex>" and spans exported with that trace id put
// events no service of the run wrote (a step, a tool call: whatever the
// spans say) on the run's chain, its audit record, and made the
// orchestrator a second writer of it. Now the otel- ids are the tracer's:
// StartRun refuses them.
func TestAttackOTLPWritesIntoARun(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	traceID := []byte{0x5e, 0xc0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e}
	runID := otlp.ChainID(traceID)
	c.writeScript(t, "a.yaml", "steps:\n  - done: true\n    message: finished\n")
	run, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{RunId: runID, Goal: "g", Model: "scripted:a.yaml"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("StartRun %s: %v %v, want INVALID_ARGUMENT", runID, run.GetRun().GetStatus(), err)
	}
	// The same caller's spans for that trace.
	now := uint64(time.Now().UnixNano())
	spans := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: traceID, SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Name: "execute_tool fs.write",
		StartTimeUnixNano: now, EndTimeUnixNano: now + 1000,
		Attributes: []*commonpb.KeyValue{
			{Key: "gen_ai.operation.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "execute_tool"}}},
			{Key: "gen_ai.tool.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "fs.write"}}},
		},
	}}}}}}}
	if _, err := coltracepb.NewTraceServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "alice")).Export(ctx, spans); err != nil {
		t.Fatal(err)
	}
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "alice"))
	var events []*lctlv1.Event
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: runID})
		if err != nil {
			return err
		}
		events = resp.GetEvents()
		for _, e := range events {
			if _, ok := e.GetData().AsMap()["otel"]; ok {
				return nil // the spans arrived
			}
		}
		return fmt.Errorf("the spans are not on %s yet (%d events)", runID, len(events))
	})
	for _, e := range events {
		if e.GetType() == "run_started" {
			t.Fatalf("the spans were written into the run's chain: %d events, the first %s", len(events), events[0].GetType())
		}
	}
}

// The policy judged one path and the tool changed another through a
// symbolic link: the shipped config-approval policy sends changes under
// config/ to a human, and a link settings -> config in the workspace (a
// repository's own, or one a writing program made) let fs.write
// settings/app.yaml change config/app.yaml with no approval; the same
// link in front of a key let fs.read past the read-only policy's rule.
// Now the fs tools refuse a path that goes through a link, naming the
// path it leads to, which the policy then judges.
func TestAttackPolicySeesTheLinkNotItsTarget(t *testing.T) {
	t.Parallel()
	t.Run("config-approval", func(t *testing.T) {
		c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "config-approval.yaml")))
		app := filepath.Join(c.workspace, "config", "app.yaml")
		if err := os.MkdirAll(filepath.Dir(app), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(app, []byte("mode: safe\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("config", filepath.Join(c.workspace, "settings")); err != nil {
			t.Fatal(err)
		}
		c.writeScript(t, "a.yaml", script(
			step("fs.write", `{path: settings/app.yaml, content: "mode: pwned\n"}`),
			step("fs.delete", `{path: settings/app.yaml}`),
			step("fs.move", `{from: settings/app.yaml, to: app.yaml}`),
			step("fs.move", `{from: app.yaml, to: settings/new.yaml}`),
		))
		run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
		if got := stepErrors(run); fmt.Sprint(got) != "[INVALID_ARGUMENT INVALID_ARGUMENT INVALID_ARGUMENT INVALID_ARGUMENT]" {
			t.Errorf("steps %v", got)
		}
		if b, err := os.ReadFile(app); err != nil || string(b) != "mode: safe\n" {
			t.Errorf("config/app.yaml changed without approval: %q %v", b, err)
		}
		if e := run.GetSteps()[0].GetResponse().GetError(); e.GetDetails().AsMap()["real"] != "config/app.yaml" {
			t.Errorf("the refusal does not name the real path: %v", e)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "read-only.yaml")))
		if err := os.WriteFile(filepath.Join(c.workspace, "deploy.key"), []byte("SECRET-KEY-MATERIAL\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("deploy.key", filepath.Join(c.workspace, "notes.txt")); err != nil {
			t.Fatal(err)
		}
		c.writeScript(t, "a.yaml", script(step("fs.read", `{path: notes.txt}`)))
		run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
		if got := stepErrors(run); fmt.Sprint(got) != "[INVALID_ARGUMENT]" || strings.Contains(fmt.Sprint(run.GetSteps()[0].GetResponse()), "SECRET-KEY") {
			t.Errorf("steps %v: %v", got, run.GetSteps()[0].GetResponse())
		}
	})
}

func shippedPolicy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A submitter skipped the approvals of the shipped production policy:
// its rule let reversible changes run without a human when the run's
// label env was not "prod", and labels are whatever the submitter sends
// with StartRun ("staging", "Prod", "production"). The runs act on the
// same executor whatever they are labelled, and a submitter must not
// approve its own run's steps (DecideApproval refuses it): a label that
// skips them is the same thing. Now a label may only ask for more.
func TestAttackLabelSkipsApproval(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, withTools(t, "", shippedPolicy(t, "production.yaml")))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val := c.validatorAs(t, "service:dev")
	for i, env := range []string{"", "staging", "dev", "Prod", "production", "prod"} {
		vreq, _ := proposal(t, fmt.Sprintf("label-run-%d", i), 1, "fs.write", map[string]any{"path": "app.yaml", "content": "x"})
		if env != "" {
			vreq.Run.Labels = map[string]string{"env": env}
		}
		v, err := val.Validate(ctx, vreq)
		if err != nil {
			t.Fatal(err)
		}
		if d := v.GetVerdict().GetDecision(); d != xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
			t.Errorf("a submitter's write labelled env=%q: %s, want a human's approval", env, d)
		}
	}
}
