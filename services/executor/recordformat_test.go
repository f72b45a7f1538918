package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// oldSucceeded is a finished record as executors before the binary form
// wrote it (protobuf JSON, byte for byte what protojson.Marshal gave).
const oldSucceeded = `{"stepId":"old-done","runId":"run","tool":"test.once",` +
	`"argumentsDigest":"sha256:9a3c4d1bfcc2bd8b8b4d7c8a1c3f1f3e0bd2b5a3b42f3b2bbd06d77e4b01c0a4",` +
	`"state":"STEP_RECORD_STATE_SUCCEEDED","attempt":1,"effect":"EFFECT_IRREVERSIBLE","executor":"old-executor",` +
	`"startedAt":"2026-11-20T10:00:00Z","deadline":"2026-11-20T10:00:15Z","finishedAt":"2026-11-20T10:00:01Z",` +
	`"response":{"success":{"result":{"charged":42}}},"duration":"0.250s","verdictGrants":["g-old"],"aFieldOfTomorrow":1}`

// TestDecodeRecordBothFormats: the stored forms decode to the same record;
// an old JSON record (with a field this version does not know) is read; a
// record that is neither is corrupt, never an empty record.
func TestDecodeRecordBothFormats(t *testing.T) {
	t.Parallel()
	old, err := decodeRecord([]byte(oldSucceeded))
	must(t, err)
	if old.GetState() != stateSucceeded || old.GetExecutor() != "old-executor" ||
		old.GetResponse().GetSuccess().GetResult().GetStructValue().AsMap()["charged"] != 42.0 ||
		old.GetDuration().AsDuration() != 250*time.Millisecond || old.GetVerdictGrants()[0] != "g-old" {
		t.Fatalf("old record decoded as %v", old)
	}
	for _, asJSON := range []bool{false, true} {
		data, err := encodeRecord(old, asJSON)
		must(t, err)
		if (data[0] == '{') != asJSON {
			t.Fatalf("asJSON=%v: stored form starts with %q", asJSON, data[0])
		}
		back, err := decodeRecord(data)
		must(t, err)
		if !proto.Equal(back, old) {
			t.Fatalf("asJSON=%v: round trip %v != %v", asJSON, back, old)
		}
	}
	bin, _ := encodeRecord(old, false)
	js, _ := encodeRecord(old, true)
	if len(bin) >= len(js) {
		t.Fatalf("binary record %d bytes, JSON %d", len(bin), len(js))
	}
	for name, bad := range map[string][]byte{
		"empty":         nil,
		"broken JSON":   []byte(`{"stepId":"x",`),
		"broken binary": bin[:len(bin)/2],
		"no step id":    []byte(`{"state":"STEP_RECORD_STATE_PENDING"}`),
		"not a record":  []byte("\xff\xff\xff"),
	} {
		if rec, err := decodeRecord(bad); !errors.Is(err, ErrStepCorrupt) {
			t.Errorf("%s: decodeRecord = %v, %v; want ErrStepCorrupt", name, rec, err)
		}
	}
}

// TestRollingUpgradeRecords: an executor of this version on a bucket that
// an older executor wrote (protobuf JSON) replays the old outcomes, takes
// over the old pending records (re-run when idempotent, in doubt when
// not), and writes the binary form; an executor run with
// --step-record-format=json, as during an upgrade from a version that only
// reads JSON, writes JSON; each reads what the other wrote.
func TestRollingUpgradeRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	once := countedTool("test.once", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	again := countedTool("test.again", true, xctv1.Effect_EFFECT_IRREVERSIBLE)
	ws := t.TempDir()
	newExec, err := New(Config{Workspace: ws}, nc, testLogger(t), once, again)
	must(t, err)
	must(t, newExec.Start(ctx))
	t.Cleanup(func() { _ = newExec.Stop(context.Background()) })
	jsonExec, err := New(Config{Workspace: ws, RecordFormat: FormatJSON}, nc, testLogger(t), once, again)
	must(t, err)
	must(t, jsonExec.Start(ctx))
	t.Cleanup(func() { _ = jsonExec.Stop(context.Background()) })

	j, err := jetstream.New(nc)
	must(t, err)
	kv, err := j.KeyValue(ctx, StepsBucket)
	must(t, err)
	// What the old executor left: written as it wrote them.
	args := map[string]any{"n": 1.0}
	past := time.Now().Add(-time.Minute)
	oldJSON := func(rec *xctv1.StepRecord) {
		t.Helper()
		data, err := protojson.Marshal(rec)
		must(t, err)
		_, err = kv.Create(ctx, rec.GetStepId(), data)
		must(t, err)
	}
	done := &xctv1.StepRecord{StepId: "old-done", RunId: "run", Tool: "test.once", ArgumentsDigest: argumentsDigest(args),
		State: stateSucceeded, Attempt: 1, Executor: "old-executor", StartedAt: timestamppb.New(past), FinishedAt: timestamppb.New(past)}
	done.Response = mustSuccess(t, map[string]any{"charged": 42})
	oldJSON(done)
	for _, rec := range []*xctv1.StepRecord{
		{StepId: "old-pending-idem", Tool: "test.again", Idempotent: true},
		{StepId: "old-pending", Tool: "test.once"},
	} {
		rec.RunId, rec.ArgumentsDigest, rec.State, rec.Attempt, rec.Executor = "run", argumentsDigest(args), statePending, 1, "old-executor"
		rec.StartedAt, rec.Deadline = timestamppb.New(past), timestamppb.New(past.Add(time.Second))
		oldJSON(rec)
	}

	// The old outcome is replayed, nothing acts.
	r := execStep(t, newExec, "old-done", "test.once", args)
	if !r.GetReplayed() || r.GetResponse().GetSuccess().GetResult().GetStructValue().AsMap()["charged"] != 42.0 || once.calls.Load() != 0 {
		t.Fatalf("old outcome: %v (calls %d)", r, once.calls.Load())
	}
	// An old pending record past its deadline: idempotent, re-run once and
	// recorded in the binary form; not idempotent, in doubt.
	if r := execStep(t, newExec, "old-pending-idem", "test.again", args); r.GetReplayed() || r.GetAttempt() != 2 || again.calls.Load() != 1 {
		t.Fatalf("old pending idempotent: %v (calls %d)", r, again.calls.Load())
	}
	if r := execStep(t, newExec, "old-pending", "test.once", args); codeOf(r.GetResponse()) != "IN_DOUBT" || once.calls.Load() != 0 {
		t.Fatalf("old pending: %v (calls %d)", r, once.calls.Load())
	}
	stored := func(id string) []byte {
		t.Helper()
		e, err := kv.Get(ctx, id)
		must(t, err)
		return e.Value()
	}
	if b := stored("old-pending-idem"); b[0] == '{' {
		t.Fatalf("a record this version wrote is JSON: %s", b)
	}
	if rec, _, err := jsonExec.Step(ctx, "old-pending-idem"); err != nil || rec.GetState() != stateSucceeded || len(rec.GetReruns()) != 1 {
		t.Fatalf("the JSON-writing executor reads the binary record: %v, %v", rec, err)
	}

	// Mixed executors: each replays what the other recorded, and the
	// JSON-writing one writes JSON.
	execStep(t, jsonExec, "by-json", "test.once", map[string]any{"n": 2.0})
	if b := stored("by-json"); b[0] != '{' {
		t.Fatalf("--step-record-format=json wrote %x", b[:8])
	}
	execStep(t, newExec, "by-proto", "test.once", map[string]any{"n": 3.0})
	if r := execStep(t, newExec, "by-json", "test.once", map[string]any{"n": 2.0}); !r.GetReplayed() {
		t.Fatalf("binary-writing executor did not replay the JSON record: %v", r)
	}
	if r := execStep(t, jsonExec, "by-proto", "test.once", map[string]any{"n": 3.0}); !r.GetReplayed() {
		t.Fatalf("JSON-writing executor did not replay the binary record: %v", r)
	}
	if once.calls.Load() != 2 {
		t.Fatalf("test.once acted %d times, want 2", once.calls.Load())
	}

	// A stored value that is no record is refused, never acted on.
	_, err = kv.Create(ctx, "garbage", []byte("\xff\xfe not a record"))
	must(t, err)
	st, _, err := newExec.Step(ctx, "garbage")
	if !errors.Is(err, ErrStepCorrupt) {
		t.Fatalf("Step of a corrupt record = %v, %v", st, err)
	}
}

func TestRecordFormatConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Workspace: t.TempDir(), RecordFormat: "yaml"}, nil, nil); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("New with record format yaml = %v", err)
	}
}

func mustSuccess(tb testing.TB, result any) *xctv1.Response {
	tb.Helper()
	resp, err := wire.SuccessResponse(result)
	must(tb, err)
	return resp
}
