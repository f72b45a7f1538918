package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

// snapshot reads every file under dir: path → content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func render(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

const changes = `
steps:
  - next_step: {tool: fs.write, arguments: {path: config/app.yaml, content: "deployment: green\n"}, goal: replace}
  - next_step: {tool: fs.write, arguments: {path: new/notes.txt, content: "created\n"}, goal: create}
  - next_step: {tool: fs.read, arguments: {path: config/app.yaml}, goal: read}
  - next_step: {tool: fs.move, arguments: {from: old.txt, to: moved.txt}, goal: move}
  - next_step: {tool: fs.delete, arguments: {path: doomed.txt}, goal: delete}
  - done: true
    message: changed
`

func seedWorkspace(t *testing.T, ws string) {
	t.Helper()
	for name, content := range map[string]string{"config/app.yaml": "deployment: blue\n", "old.txt": "old\n", "doomed.txt": "keep me\n"} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRollbackRestoresTheWorkspace(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	seedWorkspace(t, c.workspace)
	before := snapshot(t, c.workspace)
	c.writeScript(t, "changes.yaml", changes)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "change things", Model: "scripted:changes.yaml", Principal: "alice"})
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE {
		t.Fatalf("run %s: %s", run.GetStatus(), run.GetMessage())
	}
	if render(snapshot(t, c.workspace)) == render(before) {
		t.Fatal("the run changed nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Roll back only what came after step 2.
	resp, err := c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId(), ToStep: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resp.GetUndone()) != "[5 4]" || resp.GetStatus() != "done" {
		t.Fatalf("partial rollback: %v %s %s", resp.GetUndone(), resp.GetStatus(), resp.GetMessage())
	}
	mid := snapshot(t, c.workspace)
	if mid["doomed.txt"] != "keep me\n" || mid["old.txt"] != "old\n" || mid["config/app.yaml"] != "deployment: green\n" {
		t.Fatalf("after the partial rollback:\n%s", render(mid))
	}
	// Then the rest: the workspace is as it was.
	resp, err = c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resp.GetUndone()) != "[2 1]" {
		t.Fatalf("full rollback undid %v (%s)", resp.GetUndone(), resp.GetMessage())
	}
	if got, want := render(snapshot(t, c.workspace)), render(before); got != want {
		t.Fatalf("workspace after rollback:\n%s\nwant:\n%s", got, want)
	}
	// Nothing left to undo.
	resp, err = c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
	if err != nil || len(resp.GetUndone()) != 0 {
		t.Fatalf("third rollback: %v %v", resp.GetUndone(), err)
	}

	// Every undo is a governed step on the chain, which still verifies.
	tracer := c.tracer
	var events []lctl.Event
	lastSeq := uint64(0)
	got, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	lastSeq = got.GetRun().GetLastSeq()
	if err := c.app.Tracer.WaitForSeq(ctx, run.GetRunId(), lastSeq); err != nil {
		t.Fatal(err)
	}
	chain, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range chain.GetEvents() {
		events = append(events, lctlpb.FromProto(e))
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range events {
		switch {
		case e.Type == "rollback_started" || e.Type == "rollback_finished":
			trail = append(trail, e.Type+"/"+e.Agent)
		case e.Type == lctl.TypeVerdict && e.Data["tool"] == "xct.undo":
			trail = append(trail, "verdict "+e.Data["decision"].(string))
		case e.Type == lctl.TypeToolCall && e.Data["tool"] == "xct.undo":
			trail = append(trail, "undo "+e.Data["output"].(map[string]any)["tool"].(string))
		}
	}
	want := "rollback_started/carol verdict allow undo fs.delete verdict allow undo fs.move rollback_finished/carol " +
		"rollback_started/carol verdict allow undo fs.write verdict allow undo fs.write rollback_finished/carol " +
		"rollback_started/carol rollback_finished/carol"
	if strings.Join(trail, " ") != want {
		t.Fatalf("trail:\n%s\nwant:\n%s", strings.Join(trail, " "), want)
	}
}

func TestRollbackStopsAtIrreversibleAndConflicts(t *testing.T) {
	t.Parallel()
	c, _, v := approvalCluster(t, "1h", "blue")
	_ = v
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.writeScript(t, "w.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: a.txt, content: "one\n"}, goal: write}
  - done: true
`)
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:w.yaml", Principal: "alice"})
	// Someone changes the file after the run: the undo must not overwrite it.
	if err := os.WriteFile(filepath.Join(c.workspace, "a.txt"), []byte("changed by hand\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: run.GetRunId()})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != "failed" || !strings.Contains(resp.GetMessage(), "changed") || len(resp.GetUndone()) != 0 {
		t.Fatalf("rollback over a changed file: %v %s %s", resp.GetUndone(), resp.GetStatus(), resp.GetMessage())
	}
	if b, _ := os.ReadFile(filepath.Join(c.workspace, "a.txt")); string(b) != "changed by hand\n" {
		t.Fatalf("the rollback overwrote a later change: %q", b)
	}

	// A run with an irreversible step (test.deploy, approved) is refused
	// before anything is undone.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	start, err := c.orch.StartRun(ctx2, &xctv1.StartRunRequest{Goal: "deploy", Model: "func:deployer", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pending(t, v, start.GetRun().GetRunId(), 1)
	if _, err := v.DecideApproval(ctx2, &xctv1.DecideApprovalRequest{RunId: start.GetRun().GetRunId(), Step: "1", Approve: true, Approver: "bob"}); err != nil {
		t.Fatal(err)
	}
	c.watch(t, ctx2, start.GetRun().GetRunId())
	_, err = c.orchAs(t, "carol").RollbackRun(ctx2, &xctv1.RollbackRunRequest{RunId: start.GetRun().GetRunId()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "step 1 (test.deploy)") {
		t.Fatalf("rollback past an irreversible step: %v", err)
	}
}
