package tracer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/tracer"
)

// waitTimeout bounds every wait in these tests; waits end as soon as their
// condition holds, so it only matters when something is broken. Some waits
// are for a tracer to take in thousands of events: 20 s was too short for
// 5,030 under -race on a loaded machine (TestEventNotStoredIsReadBack at
// load ~30: 2,187 acknowledged after 20 s).
const waitTimeout = time.Minute

// env is a JetStream server, the event log on it and a tracer data dir.
type env struct {
	nc      *nats.Conn
	log     *eventlog.Log
	dataDir string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ns := testutil.RunJetStream(t)
	nc := testutil.Connect(t, ns)
	l, err := eventlog.Open(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{nc: nc, log: l, dataDir: t.TempDir()}
}

// running is a started tracer served over real gRPC on loopback.
type running struct {
	svc    *tracer.Service
	client lctlv1.TracerServiceClient
	stop   func()
}

// startTracer starts a tracer on env's data dir with its own gRPC server.
// It is stopped when the test ends, or earlier with stop.
func (e *env) startTracer(t testing.TB) *running {
	t.Helper()
	return e.startTracerWith(t, tracer.Config{})
}

// startTracerWith starts a tracer with cfg (its data dir and replicas set
// by the env).
func (e *env) startTracerWith(t testing.TB, cfg tracer.Config) *running {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.DataDir, cfg.Replicas = e.dataDir, 1
	svc, err := tracer.New(cfg, e.nc, log)
	if err != nil {
		t.Fatal(err)
	}
	creds := grpcxtest.New(t)
	srv := grpcx.NewServer("tracer", log, creds.ServerOptions()...)
	svc.Register(srv.GRPC)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpcx.Dial(srv.Addr(), grpcx.WithToken(creds.Token(t, "dave"))) // an auditor
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		conn.Close()
		srv.Stop(ctx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop tracer: %v", err)
		}
	}
	t.Cleanup(stop)
	return &running{svc: svc, client: lctlv1.NewTracerServiceClient(conn), stop: stop}
}

func (r *running) waitFor(t testing.TB, chainID string, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.svc.WaitForSeq(ctx, chainID, seq); err != nil {
		t.Fatalf("wait for %s/%d: %v", chainID, seq, err)
	}
}

// writeRun appends an XCT-shaped run of the given number of steps to a
// chain: run_started, then per step step_start, verdict, tool_call,
// step_end, then run_finished. It returns the writer to append more.
func writeRun(t *testing.T, l *eventlog.Log, chainID string, steps int) *eventlog.ChainWriter {
	t.Helper()
	w, err := l.NewChainWriter(chainID)
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, w, runEvents(chainID, steps))
	return w
}

type ev struct {
	typ, agent string
	data       map[string]any
}

func runEvents(runID string, steps int) []ev {
	out := []ev{{"run_started", "orchestrator", map[string]any{"run_id": runID, "goal": "tidy up", "model": "m1", "principal": "alice", "max_steps": 50.0}}}
	for i := 1; i <= steps; i++ {
		step, id := float64(i), fmt.Sprintf("step-%d", i)
		out = append(out,
			ev{"step_start", "m1", map[string]any{"step": step, "step_id": id, "intent": "look", "input_summary": "", "tool": "list_dir", "arguments": map[string]any{"path": "."}, "model": "m1"}},
			ev{"verdict", "validator", map[string]any{"step": step, "step_id": id, "tool": "list_dir", "decision": "allow", "reasons": []any{map[string]any{"rule_id": "read", "message": "ok"}}, "policy_version": "p1"}},
			ev{"tool_call", "executor", map[string]any{"step": step, "step_id": id, "tool": "list_dir", "input": map[string]any{"path": "."}, "output": map[string]any{"entries": []any{"a", "b"}}, "duration_ms": 3.0, "status": "success"}},
			ev{"step_end", "m1", map[string]any{"step": step, "step_id": id, "outcome": "success", "output_summary": "2 entries", "duration_ms": 10.0, "tokens": map[string]any{"input": 100.0, "output": 10.0}}},
		)
	}
	return append(out, ev{"run_finished", "orchestrator", map[string]any{"status": "done", "message": "tidy", "steps": float64(steps), "tokens": map[string]any{"input": 100.0 * float64(steps), "output": 10.0 * float64(steps)}}})
}

func appendEvents(t *testing.T, w *eventlog.ChainWriter, events []ev) {
	t.Helper()
	for _, e := range events {
		if _, err := w.Append(context.Background(), e.typ, e.agent, e.data); err != nil {
			t.Fatalf("append %s to %s: %v", e.typ, w.ChainID(), err)
		}
	}
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("err = %v, want %v", err, code)
	}
}

func fileLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		n++
	}
	return n
}

func TestMaterializeAndQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-a", 2) // 10 events
	tr := e.startTracer(t)
	writeRun(t, e.log, "run-b", 1) // 6 events, written while running
	tr.waitFor(t, "run-a", 10)
	tr.waitFor(t, "run-b", 6)
	ctx := context.Background()

	got, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "run-a"})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.log.ReadChain(ctx, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != len(stored) {
		t.Fatalf("GetChain has %d events, the stream %d", len(got.Events), len(stored))
	}
	for i, pe := range got.Events {
		se := stored[i]
		if pe.Seq != se.Seq || pe.Hash != se.Hash || pe.PrevHash != se.PrevHash || pe.Type != se.Type ||
			pe.Agent != se.Agent || pe.Timestamp != se.Timestamp || pe.ChainId != "run-a" {
			t.Fatalf("event %d = %v, stream has %+v", i+1, pe, se)
		}
	}
	if d := got.Events[3].Data.AsMap(); d["tool"] != "list_dir" || d["status"] != "success" {
		t.Errorf("tool_call data = %v", d)
	}
	sum := got.Summary
	if sum.ChainId != "run-a" || sum.Events != 10 || !sum.Verified || sum.VerifyError != "" ||
		sum.FirstTimestamp != stored[0].Timestamp || sum.LastTimestamp != stored[9].Timestamp {
		t.Errorf("summary = %v", sum)
	}
	if want := []string{"orchestrator", "m1", "validator", "executor"}; fmt.Sprint(sum.Agents) != fmt.Sprint(want) {
		t.Errorf("agents = %v, want %v", sum.Agents, want)
	}
	if n := fileLines(t, filepath.Join(e.dataDir, "chains", "run-a.jsonl")); n != 10 {
		t.Errorf("chain file has %d lines, want 10", n)
	}

	// Replay: whole chain, a point inside it, past its end.
	rep, err := tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "run-a"})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.State.AsMap()
	run, _ := st["run"].(map[string]any)
	if rep.Seq != 10 || st["seq"] != 10.0 || run["status"] != "done" || len(st["steps"].([]any)) != 2 {
		t.Errorf("replay all: seq %d state %v", rep.Seq, st)
	}
	if want := lctl.Replay("run-a", stored, 0); fmt.Sprint(st["tokens"]) != fmt.Sprint(map[string]any{"input": float64(want.Tokens.Input), "output": float64(want.Tokens.Output)}) {
		t.Errorf("tokens = %v", st["tokens"])
	}
	rep, err = tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "run-a", ToSeq: 3})
	if err != nil {
		t.Fatal(err)
	}
	st = rep.State.AsMap()
	step := st["steps"].([]any)[0].(map[string]any)
	if rep.Seq != 3 || st["run"].(map[string]any)["status"] != "running" || step["decision"] != "allow" || step["outcome"] != "" {
		t.Errorf("replay to 3: seq %d state %v", rep.Seq, st)
	}
	_, err = tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "run-a", ToSeq: 11})
	wantCode(t, err, codes.OutOfRange)

	// List: newest first, limit honoured.
	list, err := tr.client.ListChains(ctx, &lctlv1.ListChainsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Chains) != 2 || list.Chains[0].ChainId != "run-b" || list.Chains[1].ChainId != "run-a" {
		t.Errorf("list = %v", list.Chains)
	}
	list, err = tr.client.ListChains(ctx, &lctlv1.ListChainsRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Chains) != 1 || list.Chains[0].ChainId != "run-b" {
		t.Errorf("list limit 1 = %v", list.Chains)
	}
	_, err = tr.client.ListChains(ctx, &lctlv1.ListChainsRequest{Limit: -1})
	wantCode(t, err, codes.InvalidArgument)
}

func TestUnknownAndBadChains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.startTracer(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"get unknown", func() error {
			_, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "nope"})
			return err
		}, codes.NotFound},
		{"replay unknown", func() error {
			_, err := tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: "nope"})
			return err
		}, codes.NotFound},
		{"export unknown", func() error {
			_, err := tr.client.ExportChain(ctx, &lctlv1.ExportChainRequest{ChainId: "nope"})
			return err
		}, codes.NotFound},
		{"get bad id", func() error {
			_, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "../etc/passwd"})
			return err
		}, codes.InvalidArgument},
		{"get empty id", func() error {
			_, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{})
			return err
		}, codes.InvalidArgument},
		{"export bad format", func() error {
			_, err := tr.client.ExportChain(ctx, &lctlv1.ExportChainRequest{ChainId: "nope", Format: 42})
			return err
		}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.call(), tt.code) })
	}
}

func TestExportChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-x", 3)
	tr := e.startTracer(t)
	tr.waitFor(t, "run-x", 14)
	stored, err := e.log.ReadChain(context.Background(), "run-x")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		format      lctlv1.ExportFormat
		decodeAs    lctl.Format
		contentType string
	}{
		{lctlv1.ExportFormat_EXPORT_FORMAT_UNSPECIFIED, lctl.FormatJSON, "application/json"},
		{lctlv1.ExportFormat_EXPORT_FORMAT_JSON, lctl.FormatJSON, "application/json"},
		{lctlv1.ExportFormat_EXPORT_FORMAT_YAML, lctl.FormatYAML, "application/yaml"},
	} {
		t.Run(tt.format.String(), func(t *testing.T) {
			resp, err := tr.client.ExportChain(context.Background(), &lctlv1.ExportChainRequest{ChainId: "run-x", Format: tt.format})
			if err != nil {
				t.Fatal(err)
			}
			if resp.ContentType != tt.contentType {
				t.Errorf("content type %q, want %q", resp.ContentType, tt.contentType)
			}
			f, err := lctl.DecodeFile(bytes.NewReader(resp.Content), tt.decodeAs)
			if err != nil {
				t.Fatalf("decode export: %v", err)
			}
			if f.LCTL != lctl.Version || f.Chain.ID != "run-x" || len(f.Events) != len(stored) {
				t.Fatalf("export: lctl %q chain %q events %d", f.LCTL, f.Chain.ID, len(f.Events))
			}
			if err := lctl.Verify(f.Events); err != nil {
				t.Fatalf("exported chain does not verify: %v", err)
			}
			for i := range stored {
				if f.Events[i].Hash != stored[i].Hash {
					t.Fatalf("event %d hash differs from the stream's", i+1)
				}
			}
		})
	}
}

// TestRestartResumes stops the tracer, appends while it is down, and starts
// a new one on the same data dir: the durable consumer resumes, nothing is
// lost and nothing is stored twice.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := writeRun(t, e.log, "run-r", 1) // 6 events
	first := e.startTracer(t)
	first.waitFor(t, "run-r", 6)
	first.stop()

	more := runEvents("run-r", 2)[1:9] // two more steps: 8 events
	appendEvents(t, w, more)
	writeRun(t, e.log, "run-new", 1)

	second := e.startTracer(t)
	second.waitFor(t, "run-r", 14)
	second.waitFor(t, "run-new", 6)
	ctx := context.Background()
	got, err := second.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: "run-r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 14 || !got.Summary.Verified {
		t.Fatalf("after restart: %d events, summary %v", len(got.Events), got.Summary)
	}
	for i, pe := range got.Events {
		if pe.Seq != uint64(i+1) {
			t.Fatalf("event at %d has seq %d", i, pe.Seq)
		}
	}
	if n := fileLines(t, filepath.Join(e.dataDir, "chains", "run-r.jsonl")); n != 14 {
		t.Errorf("chain file has %d lines, want 14", n)
	}

	// Events appended after the restart arrive too.
	appendEvents(t, w, []ev{{"step_start", "m1", map[string]any{"step": 3.0}}})
	second.waitFor(t, "run-r", 15)
	if n := fileLines(t, filepath.Join(e.dataDir, "chains", "run-r.jsonl")); n != 15 {
		t.Errorf("chain file has %d lines, want 15", n)
	}
}

// TestBacklog writes a few thousand events before the tracer starts.
func TestBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const chains, steps = 8, 80 // 8 chains of 322 events: 2576 events
	perChain := uint64(len(runEvents("x", steps)))
	ctx := context.Background()
	var wg sync.WaitGroup
	for c := 0; c < chains; c++ {
		id := fmt.Sprintf("backlog-%d", c)
		w, err := e.log.NewChainWriter(id)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for _, ev := range runEvents(id, steps) {
				if _, err := w.Append(ctx, ev.typ, ev.agent, ev.data); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	tr := e.startTracer(t)
	for c := 0; c < chains; c++ {
		tr.waitFor(t, fmt.Sprintf("backlog-%d", c), perChain)
	}
	list, err := tr.client.ListChains(ctx, &lctlv1.ListChainsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(0)
	for _, c := range list.Chains {
		if !c.Verified || c.Events != perChain {
			t.Errorf("chain %s: %d events, verified %v (%s)", c.ChainId, c.Events, c.Verified, c.VerifyError)
		}
		total += c.Events
	}
	if len(list.Chains) != chains || total != chains*perChain {
		t.Fatalf("%d chains, %d events; want %d, %d", len(list.Chains), total, chains, chains*perChain)
	}
}

// publishRaw stores an event on the stream without a ChainWriter, the way a
// buggy or hostile writer could.
func publishRaw(t *testing.T, e *env, ev lctl.Event) {
	t.Helper()
	raw, err := json.Marshal(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.JetStream().Publish(context.Background(), eventlog.Subject(ev.ChainID), raw); err != nil {
		t.Fatal(err)
	}
}

func sealed(t *testing.T, chainID string, seq uint64, prev string, data map[string]any) lctl.Event {
	t.Helper()
	ev := lctl.Event{ChainID: chainID, Seq: seq, Type: "step_start", Timestamp: lctl.FormatTime(time.Now()), Agent: "m1", Data: data}
	if err := ev.Seal(prev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestBrokenChainsRecorded covers what a stream written past the single
// writer can hold: a gap, an edited event, a redelivered duplicate, a fork
// and a message that is not an event. None of them stops the tracer.
func TestBrokenChainsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.startTracer(t)
	ctx := context.Background()

	g1 := sealed(t, "gappy", 1, "", map[string]any{"i": 1.0})
	g2 := sealed(t, "gappy", 2, g1.Hash, map[string]any{"i": 2.0})
	g3 := sealed(t, "gappy", 3, g2.Hash, map[string]any{"i": 3.0})
	publishRaw(t, e, g1)
	publishRaw(t, e, g3) // 2 never reaches the stream

	t1 := sealed(t, "tampered", 1, "", map[string]any{"i": 1.0})
	t2 := sealed(t, "tampered", 2, t1.Hash, map[string]any{"i": 2.0})
	t2.Data["i"] = 20.0 // edited after sealing
	publishRaw(t, e, t1)
	publishRaw(t, e, t2)

	d1 := sealed(t, "dup", 1, "", map[string]any{"i": 1.0})
	d2 := sealed(t, "dup", 2, d1.Hash, map[string]any{"i": 2.0})
	publishRaw(t, e, d1)
	publishRaw(t, e, d1) // delivered twice: stored once
	publishRaw(t, e, d2)

	f1 := sealed(t, "forked", 1, "", map[string]any{"i": 1.0})
	f1b := sealed(t, "forked", 1, "", map[string]any{"i": "other"})
	publishRaw(t, e, f1)
	publishRaw(t, e, f1b)

	if _, err := e.log.JetStream().Publish(ctx, eventlog.Subject("garbage"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	// A chain written properly after all of that is still materialized.
	writeRun(t, e.log, "healthy", 1)
	tr.waitFor(t, "healthy", 6)
	tr.waitFor(t, "gappy", 3)
	tr.waitFor(t, "tampered", 2)
	tr.waitFor(t, "dup", 2)
	tr.waitFor(t, "forked", 1)

	tests := []struct {
		chain      string
		events     int
		verified   bool
		errorNames string
	}{
		{"gappy", 2, false, "event 3: seq 3 where 2 was expected (events 2 to 2 are missing)"},
		{"tampered", 2, false, "event 2: content does not match its hash (the event was edited)"},
		{"dup", 2, true, ""},
		{"forked", 1, false, "event 1: a second, different event 1 was delivered (the chain was forked)"},
		{"healthy", 6, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.chain, func(t *testing.T) {
			got, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: tt.chain})
			if err != nil {
				t.Fatal(err)
			}
			s := got.Summary
			if len(got.Events) != tt.events || s.Verified != tt.verified || s.VerifyError != tt.errorNames {
				t.Errorf("%d events, verified %v, error %q; want %d, %v, %q",
					len(got.Events), s.Verified, s.VerifyError, tt.events, tt.verified, tt.errorNames)
			}
		})
	}

	// The undecodable message was published before "healthy", and the
	// consumer handles the stream in order: it is recorded on its chain,
	// which has no events.
	list, err := tr.client.ListChains(ctx, &lctlv1.ListChainsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range list.Chains {
		if c.ChainId == "garbage" {
			found = true
			if c.Verified || c.Events != 0 || c.VerifyError == "" {
				t.Errorf("garbage chain = %v", c)
			}
		}
	}
	if !found {
		t.Errorf("the undecodable message left no trace: %v", list.Chains)
	}
}

// TestRepairsFromStream loses the tail of a chain file (as a crash between
// write and sync could) and shows the next event of the chain brings the
// missing ones back from the stream instead of recording a gap.
func TestRepairsFromStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := writeRun(t, e.log, "run-cut", 1) // 6 events
	first := e.startTracer(t)
	first.waitFor(t, "run-cut", 6)
	first.stop()

	// Keep 3 whole lines and half of the fourth.
	path := filepath.Join(e.dataDir, "chains", "run-cut.jsonl")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut, lines := 0, 0
	for i, b := range raw {
		if b == '\n' {
			lines++
			if lines == 3 {
				cut = i + 1
				break
			}
		}
	}
	if err := os.WriteFile(path, raw[:cut+20], 0o644); err != nil {
		t.Fatal(err)
	}

	appendEvents(t, w, []ev{{"step_start", "m1", map[string]any{"step": 2.0}}})
	second := e.startTracer(t)
	second.waitFor(t, "run-cut", 7)
	got, err := second.client.GetChain(context.Background(), &lctlv1.GetChainRequest{ChainId: "run-cut"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 7 || !got.Summary.Verified {
		t.Fatalf("%d events, summary %v", len(got.Events), got.Summary)
	}
	if n := fileLines(t, path); n != 7 {
		t.Errorf("chain file has %d lines, want 7", n)
	}
}

func TestWaitForSeq(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.startTracer(t)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.svc.WaitForSeq(ctx, "never", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled wait: %v", err)
	}
	if err := tr.svc.WaitForSeq(context.Background(), "bad id!", 1); !errors.Is(err, lctl.ErrInvalidChainID) {
		t.Errorf("bad id: %v", err)
	}

	// A waiter blocked on a chain nobody writes is released by Stop.
	waiting := make(chan error, 1)
	go func() { waiting <- tr.svc.WaitForSeq(context.Background(), "never", 1) }()
	tr.stop()
	select {
	case err := <-waiting:
		if !errors.Is(err, tracer.ErrStopped) {
			t.Errorf("wait across stop: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("WaitForSeq did not return after Stop")
	}
	if err := tr.svc.Start(context.Background()); !errors.Is(err, tracer.ErrStopped) {
		t.Errorf("start after stop: %v", err)
	}
}

func TestConsumerIsDurable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startTracer(t)
	info, err := e.log.JetStream().Consumer(context.Background(), eventlog.StreamName, tracer.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	if cfg.Durable != "tracer" || cfg.AckPolicy != jetstream.AckAllPolicy || cfg.FilterSubject != "lctl.chain.*" ||
		cfg.MaxAckPending != tracer.DefaultMaxAckPending || tracer.DefaultMaxAckPending != 4096 {
		t.Errorf("consumer config = %+v", cfg)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  tracer.Config
		ok   bool
	}{
		{"default replicas", tracer.Config{DataDir: "d"}, true},
		{"three replicas", tracer.Config{DataDir: "d", Replicas: 3}, true},
		{"no data dir", tracer.Config{}, false},
		{"negative replicas", tracer.Config{DataDir: "d", Replicas: -1}, false},
		{"too many replicas", tracer.Config{DataDir: "d", Replicas: 7}, false},
		{"small ack pending", tracer.Config{DataDir: "d", MaxAckPending: 1}, true},
		{"negative ack pending", tracer.Config{DataDir: "d", MaxAckPending: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestConfigFlags(t *testing.T) {
	t.Parallel()
	var cfg tracer.Config
	fs := flag.NewFlagSet("xct", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if err := fs.Parse([]string{"-tracer-data", "/var/lib/xct/tracer"}); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/var/lib/xct/tracer" {
		t.Errorf("data dir = %q", cfg.DataDir)
	}
}
