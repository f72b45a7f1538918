package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
)

// spy is a model that plays fixed decisions and keeps every context it is
// sent, to show what the model sees.
type spy struct {
	mu        sync.Mutex
	decisions []string
	contexts  []string
}

func (p *spy) Name() string { return "spy" }
func (p *spy) Close() error { return nil }
func (p *spy) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	raw, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	p.contexts = append(p.contexts, string(raw))
	n := len(p.contexts) - 1
	if n >= len(p.decisions) {
		return &xctv1.ProposeResponse{Output: `{"done":true,"message":"finished"}`}, nil
	}
	return &xctv1.ProposeResponse{Output: p.decisions[n]}, nil
}

func decisionJSON(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"next_step": map[string]any{"tool": tool, "arguments": args, "goal": "g"}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const redactionPolicy = `
approval_ttl: 1h
rules:
  - id: reads
    effect: allow
    effects: [read]
  - id: writes-need-a-human
    effect: require_approval
    tools: ["fs.write"]
    message: writes need a human
`

// TestSecretsAreRedactedEverywhere runs a step whose arguments carry a
// password (approved by a human from a diff preview), a step whose result
// carries an API key, and a step whose error echoes a token, and then
// looks for the three secrets in the LCTL stream's raw bytes, the step
// records, the tracer's files, the exported spans and what the model was
// sent: none may be there, their markers must be, and the file the tool
// wrote must hold the real password. It sets the process environment for
// OTLP, so it must not run in parallel.
func TestSecretsAreRedactedEverywhere(t *testing.T) {
	const (
		password  = "Tr0ub4dor-3-horse"
		apiKey    = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
		pathToken = "sk-proj-Zq7Wm3Kp9Lx2Nv5Rt8Yb4Hc6"
	)
	secrets := []string{password, apiKey, pathToken}
	rcv, addr := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(redactionPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	writeArgs := map[string]any{"path": "config/db.yaml", "content": "user: app\npassword: " + password + "\n"}
	model := &spy{decisions: []string{
		decisionJSON(t, "fs.write", writeArgs),
		decisionJSON(t, "fs.read", map[string]any{"path": "notes/deploy.txt"}),
		decisionJSON(t, "fs.read", map[string]any{"path": "missing/" + pathToken + ".txt"}),
	}}
	c := startCluster(t, func(cfg *app.Config, o *app.Options) {
		cfg.Validator.PolicyFile = policy
		o.Orchestrator = append(o.Orchestrator, orchestrator.WithProposer("spy", model))
	})
	if err := os.MkdirAll(filepath.Join(c.workspace, "notes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.workspace, "notes", "deploy.txt"), []byte("deploy with "+apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	validator := c.validatorAs(t, "bob")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := c.orch.StartRun(ctx, &xctv1.StartRunRequest{Goal: "configure the database", Model: "func:spy", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()

	// The cluster's markers: the same key every service of it uses.
	nc := testutil.Connect(t, c.nats)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	key, err := redact.ClusterKey(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Rules{}, key)
	if err != nil {
		t.Fatal(err)
	}
	markers := map[string]string{}
	for _, s := range secrets {
		markers[s] = red.Marker(s)
	}

	// The approver sees a diff with the marker, not the password.
	a := pending(t, validator, id, 1)
	if p := a.GetPreview().GetContent(); a.GetPreview().GetKind() != "diff" || strings.Contains(p, password) || !strings.Contains(p, "+password: "+markers[password]) {
		t.Fatalf("preview %q:\n%s", a.GetPreview().GetKind(), p)
	}
	if _, err := validator.DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: a.GetStepId(), Approve: true, Approver: "bob"}); err != nil {
		t.Fatal(err)
	}
	c.watch(t, ctx, id) // to the run's end
	got, err := c.orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	run := got.GetRun()
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || len(run.GetSteps()) != 3 {
		t.Fatalf("run ended %s with %d steps: %s", run.GetStatus(), len(run.GetSteps()), run.GetMessage())
	}

	// The tool got the real value, and the step id is over the real
	// arguments.
	written, err := os.ReadFile(filepath.Join(c.workspace, "config", "db.yaml"))
	if err != nil || string(written) != writeArgs["content"] {
		t.Fatalf("the file holds %q (%v), want the real password", written, err)
	}
	realArgs, err := structpb.NewStruct(writeArgs)
	if err != nil {
		t.Fatal(err)
	}
	if want := wire.StepID(id, 1, "fs.write", realArgs); run.GetSteps()[0].GetStepId() != want {
		t.Fatalf("step id %s, want %s (over the real arguments)", run.GetSteps()[0].GetStepId(), want)
	}

	// noSecrets fails when text holds a secret, and when it lacks one of
	// the markers it must hold.
	noSecrets := func(where, text string, want ...string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %q", where, s)
			}
		}
		for _, s := range want {
			if !strings.Contains(text, markers[s]) {
				t.Errorf("%s lacks the marker of %q", where, s)
			}
		}
	}

	// What the model was sent.
	model.mu.Lock()
	contexts := strings.Join(model.contexts, "\n")
	model.mu.Unlock()
	noSecrets("the model's context", contexts, apiKey, password, pathToken)

	// The LCTL stream, byte for byte.
	stream, err := js.Stream(ctx, eventlog.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		raw.Write(msg.Data)
		raw.WriteByte('\n')
	}
	if !strings.Contains(raw.String(), id) {
		t.Fatal("the run is not on the stream")
	}
	noSecrets("the LCTL stream", raw.String(), password, apiKey, pathToken)

	// The step records and their blobs.
	noSecrets("the step records", readBucket(t, js, executor.StepsBucket, executor.BlobsBucket), apiKey, pathToken)

	// The tracer's files, once it has the whole chain.
	tracerDir := filepath.Join(filepath.Dir(c.workspace), "tracer")
	testutil.Eventually(t, 30*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(tracerDir, "chains", id+".jsonl"))
		if err != nil || !strings.Contains(string(b), `"run_finished"`) {
			return fmt.Errorf("the tracer has not materialized the run yet: %w", err)
		}
		return nil
	})
	noSecrets("the tracer's files", render(snapshot(t, tracerDir)), password, apiKey, pathToken)

	// The exported spans: stopping the app flushes them.
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	c.app.Stop(sctx)
	var spans string
	testutil.Eventually(t, time.Minute, func() error {
		var b strings.Builder
		failedStep := false
		for _, s := range rcv.snapshot() {
			j, err := protojson.Marshal(s)
			if err != nil {
				return err
			}
			b.Write(j)
			if s.GetName() == "execute_tool fs.read" && strings.Contains(s.GetStatus().GetMessage(), "NOT_FOUND") {
				failedStep = true
			}
		}
		if !failedStep {
			return errors.New("no span of the failed step yet")
		}
		spans = b.String()
		return nil
	})
	noSecrets("the exported spans", spans, pathToken)
}

// readBucket returns every value of a KV bucket and every object of an
// object store, as one text.
func readBucket(t *testing.T, js jetstream.JetStream, kvName, objName string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	kv, err := js.KeyValue(ctx, kvName)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(e.Value())
		b.WriteByte('\n')
		n++
	}
	if n == 0 {
		t.Fatalf("bucket %s is empty", kvName)
	}
	obj, err := js.ObjectStore(ctx, objName)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return b.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	list, err := obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return b.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range list {
		r, err := obj.Get(ctx, info.Name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}
