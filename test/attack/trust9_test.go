package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/otlp"
)

// Session 9 (trust9): attacks that combine allowed actions, each first
// seen to get through, then closed.

// A rollback acted where no policy looked, through a link made after the
// step. Every step is allowed (the default policy; config-approval.yaml):
// run A writes d/FILE (reversible) with the bytes the target holds (the
// model may read it); run B deletes that file and the directory
// (reversible) and makes d a link with a reversible program of the
// operator's (ln). When an operator rolled run A back, xct.undo removed
// "the file run A created" at d/FILE, which then was the target (its
// checksum matched), and the link: .git/description (.git/HEAD when
// this was written), which the fs tools never
// change (a protected path), or config/app.yaml, which the shipped
// config-approval.yaml lets change only with a human's approval, was
// gone. The undo now checks its paths as the fs tools do.
func TestAttackRollbackThroughALinkMadeAfterTheStep(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	for _, tc := range []struct {
		name, policy, dir, file, content, refusal string
	}{
		// .git/description: HEAD is a protected name itself since
		// session 18 (the model's d/HEAD is denied before any link).
		{"into a protected path", "", ".git", "description", "Unnamed repository\n", "protected path"},
		{"past an approval", "config-approval.yaml", "config", "app.yaml", "mode: safe\n", "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := ""
			if tc.policy != "" {
				policy = shippedPolicy(t, tc.policy)
			}
			tools := "shell:\n  binaries:\n    - {name: ln, effect: reversible, allow_flags: [-s]}\n"
			c := startBindCluster(t, withTools(t, tools, policy))
			target := filepath.Join(tc.dir, tc.file)
			if err := os.MkdirAll(filepath.Join(c.workspace, tc.dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(c.workspace, target), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			c.writeScript(t, "a.yaml", script(
				step("fs.read", fmt.Sprintf(`{path: %s}`, target)),
				step("fs.write", fmt.Sprintf(`{path: d/%s, content: %q}`, tc.file, tc.content)),
			))
			a := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if got := stepErrors(a); fmt.Sprint(got) != "[ ]" {
				t.Fatalf("run A's steps: %v", got)
			}
			c.writeScript(t, "b.yaml", script(
				step("fs.delete", fmt.Sprintf(`{path: d/%s}`, tc.file)),
				step("fs.delete", `{path: d}`),
				step("shell.exec", fmt.Sprintf(`{argv: [ln, -s, %s, d]}`, tc.dir)),
			))
			b := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:b.yaml"})
			if got := stepErrors(b); fmt.Sprint(got) != "[  ]" {
				t.Fatalf("run B's steps: %v: %v", got, b.GetSteps())
			}
			if fi, err := os.Lstat(filepath.Join(c.workspace, "d")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("run B made no link d: %v %v", fi, err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rb, err := c.orchestratorAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: a.GetRunId()})
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := readWS(t, c.workspace, target); !ok || got != tc.content {
				t.Fatalf("the rollback changed %s through the link d: %q (exists %v); rollback %v", target, got, ok, rb)
			}
			if rb.GetStatus() != "failed" || len(rb.GetUndone()) != 0 || !strings.Contains(rb.GetMessage(), tc.refusal) {
				t.Errorf("rollback: %v", rb)
			}
			if fi, err := os.Lstat(filepath.Join(c.workspace, "d")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link d: %v %v", fi, err)
			}
		})
	}
}

// An approver's preview showed a file no read of which was allowed: the
// fs.write preview, which goes into the approval and on the chain (read
// by every reader), read the file through a symbolic link at the path
// written, where fs.read refuses a link (naming where it leads, for the
// policy to judge) and fs.write refuses to write through one. Under a
// policy that keeps keys secret and asks a human for writes, the model's
// fs.write of notes.txt (a link to deploy.key) put the key in the
// approval; under the shipped config-approval.yaml, a link under config/
// to a file with another name outside the workspace (a hard link made on
// the host: fs.read and the preview refuse those by their link count)
// put that outside file there. The preview now refuses a link as
// fs.write does and shows no content through it.
func TestAttackPreviewReadsThroughALink(t *testing.T) {
	t.Parallel()
	const secretPolicy = `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: no-secrets
    effect: deny
    tools: ["fs.*"]
    when: 'has(args.path) && args.path.lowerAscii().matches("\\.key$")'
  - {id: writes-need-a-human, effect: require_approval, effects: [reversible, irreversible]}
`
	for _, tc := range []struct {
		name, policy, link, to, secret string
		outside                        bool
	}{
		{"a key no policy lets it read", secretPolicy, "notes.txt", "deploy.key", "KEY-MATERIAL-7f3a91", false},
		{"a file outside the workspace", shippedPolicy(t, "config-approval.yaml"), "config/app.yaml", "../hl.txt", "OUTSIDE-SECRET-5c2e08", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startBindCluster(t, withTools(t, "", tc.policy))
			secret := filepath.Join(c.workspace, "deploy.key")
			if tc.outside {
				secret = filepath.Join(filepath.Dir(c.workspace), "outside.txt")
			}
			if err := os.WriteFile(secret, []byte(tc.secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.outside {
				if err := os.Link(secret, filepath.Join(c.workspace, "hl.txt")); err != nil {
					t.Fatal(err)
				}
			}
			link := filepath.Join(c.workspace, tc.link)
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tc.to, link); err != nil {
				t.Fatal(err)
			}
			c.writeScript(t, "a.yaml", script(
				step("fs.read", fmt.Sprintf(`{path: %s}`, tc.link)),
				step("fs.write", fmt.Sprintf(`{path: %s, content: "x\n"}`, tc.link)),
			))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			defer func() {
				_, _ = c.orchestratorAs(t, "alice").CancelRun(context.Background(), &xctv1.CancelRunRequest{RunId: id, Reason: "done testing"})
			}()
			a := waitApproval(t, c, "bob", id)
			if pv := a.GetPreview().GetContent(); strings.Contains(pv, tc.secret) || !strings.Contains(pv, "symbolic link") {
				t.Errorf("the approver's preview: %q", pv)
			}
			// The chain, which every reader reads, holds it nowhere.
			run, err := c.orchestratorAs(t, "dave").GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
			if err != nil {
				t.Fatal(err)
			}
			if e := run.GetRun().GetSteps()[0].GetResponse().GetError(); e.GetCode() != "INVALID_ARGUMENT" && e.GetCode() != "PERMISSION_DENIED" {
				t.Errorf("fs.read through the link: %v", run.GetRun().GetSteps()[0].GetResponse())
			}
			stream, err := c.orchestratorAs(t, "dave").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := stream.Recv()
				if err != nil {
					t.Fatalf("watch: %v", err)
				}
				if strings.Contains(ev.String(), tc.secret) {
					t.Fatalf("the chain holds the secret: %s event %d", ev.GetEvent().GetType(), ev.GetEvent().GetSeq())
				}
				if strings.Contains(ev.GetEvent().GetType(), "approval_requested") {
					break
				}
			}
		})
	}
}

// exportSpan exports one span of trace as principal over OTLP gRPC and
// returns the spans the tracer rejected.
func exportSpan(t *testing.T, c *bindCluster, principal string, trace, span, parent []byte, name, tool string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := uint64(time.Now().UnixNano())
	str := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	attrs := []*commonpb.KeyValue{{Key: "gen_ai.operation.name", Value: str(strings.Fields(name)[0])}}
	if tool != "" {
		attrs = append(attrs, &commonpb.KeyValue{Key: "gen_ai.tool.name", Value: str(tool)})
	}
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: trace, SpanId: span, ParentSpanId: parent, Name: name,
		StartTimeUnixNano: now, EndTimeUnixNano: now + 1000, Attributes: attrs,
	}}}}}}}
	resp, err := coltracepb.NewTraceServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), principal)).Export(ctx, req)
	if err != nil {
		t.Fatalf("export as %s: %v", principal, err)
	}
	return resp.GetPartialSuccess().GetRejectedSpans()
}

// A submitter wrote into another submitter's trace: the tracer appends
// every exported span to chain otel-<trace id>, whoever exports it, and
// ListChains shows every reader the chains' ids. dev exported a span
// "execute_tool fs.delete" with the trace id of alice's chain, and it was
// appended to alice's trace, her agent's audit record, as if her agent
// had done it. Now the chain's first event names its exporter and the
// tracer appends only that principal's spans to it; another's are
// refused (rejected in partial_success, not retried).
func TestAttackOTLPSpanIntoAnotherSubmittersTrace(t *testing.T) {
	t.Parallel()
	c := startBindCluster(t, func(cfg *app.Config, _ *app.Options) { cfg.Tracer.OTLP.Hold = -1 })
	trace := []byte{0x7a, 0x11, 0xce, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	root := []byte{1, 1, 1, 1, 1, 1, 1, 1}
	chain := otlp.ChainID(trace)
	if n := exportSpan(t, c, "alice", trace, root, nil, "invoke_agent planner", ""); n != 0 {
		t.Fatalf("alice's own span rejected: %d", n)
	}
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dave"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := func() []*lctlv1.Event {
		resp, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: chain})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetEvents()
	}
	var before int
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: chain})
		if err != nil {
			return err
		}
		before = len(resp.GetEvents())
		return nil
	})
	if n := exportSpan(t, c, "dev", trace, []byte{2, 2, 2, 2, 2, 2, 2, 2}, root, "execute_tool fs.delete", "fs.delete"); n != 1 {
		t.Errorf("dev's span in alice's trace: %d rejected, want 1", n)
	}
	// Alice's own later spans still go on.
	if n := exportSpan(t, c, "alice", trace, []byte{3, 3, 3, 3, 3, 3, 3, 3}, root, "execute_tool fs.read", "fs.read"); n != 0 {
		t.Errorf("alice's later span rejected: %d", n)
	}
	testutil.Eventually(t, 20*time.Second, func() error {
		if got := events(); len(got) <= before {
			return fmt.Errorf("alice's later span is not on her chain: %d events", len(got))
		}
		return nil
	})
	// The chain is read in order: dev's span, had it been appended, is
	// there before alice's later one.
	got := events()
	for _, e := range got {
		if ref, _ := e.GetData().AsMap()["otel"].(map[string]any); ref["span_id"] == "0202020202020202" {
			t.Errorf("dev's span was appended to alice's trace: %s %v", e.GetType(), e.GetData().AsMap())
		}
	}
	if first, _ := got[0].GetData().AsMap()["otel"].(map[string]any); first["exporter"] != "alice" {
		t.Errorf("the chain's first event does not name its exporter: %v", first)
	}
}

// An approver's preview showed a file the run may not read: under a
// policy that keeps keys from being read and asks a human for writes,
// the model's fs.write of deploy.key waited for an approval whose preview
// (a diff against the file as it is, on the chain for every reader) held
// the key it was refused to read a step before. The validator now shows
// a preview's current content only when the run could read the file: it
// asks the policy about fs.read of the same path, and otherwise says why
// the content is not shown.
func TestAttackPreviewShowsAFileTheRunMayNotRead(t *testing.T) {
	t.Parallel()
	const policy = `rules:
  - {id: allow-read, effect: allow, effects: [read]}
  - id: keys-are-not-read
    effect: deny
    tools: ["fs.read"]
    when: 'args.path.lowerAscii().endsWith(".key")'
  - {id: writes-need-a-human, effect: require_approval, effects: [reversible, irreversible]}
`
	const secret = "KEY-MATERIAL-a4d9e2"
	c := startBindCluster(t, withTools(t, "", policy))
	if err := os.WriteFile(filepath.Join(c.workspace, "deploy.key"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "notes.txt"), []byte("old notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, shows, hides string }{
		{"deploy.key", "not shown", secret},
		{"notes.txt", "-old notes", ""}, // a file it may read: the diff as before
	} {
		c.writeScript(t, "a.yaml", script(
			step("fs.read", fmt.Sprintf(`{path: %s}`, tc.path)),
			step("fs.write", fmt.Sprintf(`{path: %s, content: "rotated\n"}`, tc.path)),
		))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetRun().GetRunId()
		a := waitApproval(t, c, "bob", id)
		if pv := a.GetPreview().GetContent(); !strings.Contains(pv, tc.shows) || tc.hides != "" && strings.Contains(pv, tc.hides) {
			t.Errorf("%s: the approver's preview: %q", tc.path, pv)
		}
		stream, err := c.orchestratorAs(t, "dave").WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if tc.hides != "" && strings.Contains(ev.String(), tc.hides) {
				t.Errorf("%s: the chain holds the key: %s event %d", tc.path, ev.GetEvent().GetType(), ev.GetEvent().GetSeq())
			}
			if strings.Contains(ev.GetEvent().GetType(), "approval_requested") {
				break
			}
		}
		_, _ = c.orchestratorAs(t, "alice").CancelRun(context.Background(), &xctv1.CancelRunRequest{RunId: id, Reason: "done testing"})
		cancel()
	}
}
