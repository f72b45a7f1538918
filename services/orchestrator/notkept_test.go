package orchestrator

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
	"github.com/xct-dev/xct/services/executor"
)

// Issue 12, session 11: a tool that acted and said it succeeded, but whose
// result the executor cannot keep (over the tool's output cap, not JSON,
// nested too deep). Before, the step was recorded FAILED (OUTPUT_TOO_LARGE,
// TOOL_FAILURE): a model told "failed" proposes the step again, and a
// tool that is not idempotent acts twice. Now the step is a success whose
// result says it was not kept.

// unkeptTool acts (counted), then returns a result the executor cannot
// keep: "big" over its cap, "nan" not JSON, "deep" nested too deep.
type unkeptTool struct {
	mode  string
	calls atomic.Int32
}

func (u *unkeptTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{Name: "test.charge", Description: "charges, and answers too much", InputSchema: `{"type":"object"}`,
		Effect: xctv1.Effect_EFFECT_REVERSIBLE, Timeout: durationpb.New(time.Minute), MaxOutputBytes: 1024}
}

func (u *unkeptTool) Invoke(ctx context.Context, _ map[string]any) (any, *xctv1.Error) {
	if e := executor.Commit(ctx); e != nil {
		return nil, e
	}
	u.calls.Add(1)
	switch u.mode {
	case "big":
		return map[string]any{"charged": 5.0, "receipt": strings.Repeat("r", 4096)}, nil
	case "nan":
		return map[string]any{"charged": math.NaN()}, nil
	}
	var deep any = "leaf"
	for range wire.MaxDepth + 2 {
		deep = []any{deep}
	}
	return deep, nil
}

// chargeModel proposes test.charge, and proposes it again (up to three
// times) while the system answers with an error, as a model told "failed"
// does; it finishes once told anything else. It keeps what it was told.
type chargeModel struct {
	mu   sync.Mutex
	told []map[string]any
}

func (m *chargeModel) Name() string { return "tester" }
func (m *chargeModel) Close() error { return nil }
func (m *chargeModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	h := req.GetHistory()
	again := len(h) == 0
	if len(h) > 0 && len(h) < 3 {
		var told map[string]any
		if err := json.Unmarshal([]byte(h[len(h)-1].GetResponse()), &told); err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.told = append(m.told, told)
		m.mu.Unlock()
		again = told["status"] == "error"
	}
	out := `{"done": true, "message": "charged"}`
	if again {
		out = `{"next_step": {"tool": "test.charge", "arguments": {"amount": 5}, "goal": "charge"}}`
	}
	return &xctv1.ProposeResponse{Output: out, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

func TestUnkeptResultIsASuccessNotActedAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mode, reason string }{
		{"big", "OUTPUT_TOO_LARGE"}, {"nan", "NOT_JSON"}, {"deep", "TOO_DEEP"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			model := &chargeModel{}
			f := newFixture(t, newGatedModel())
			tool := &unkeptTool{mode: c.mode}
			ex := f.serveExecutor("executor-unkept", tool)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a, _ := (&outcomeFixture{fixture: f}).orch("orch-a", model)
			id := f.start(a)

			events := f.waitEnd(id)
			if err := lctl.Verify(events); err != nil {
				t.Fatal(err)
			}
			if n := tool.calls.Load(); n != 1 {
				t.Fatalf("the tool acted %d times (a model told it failed proposed it again):\n%s", n, describe(events))
			}
			if last := events[len(events)-1]; last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
			calls := only(events, lctl.TypeToolCall)
			if len(calls) != 1 || len(only(events, lctl.TypeError)) != 0 {
				t.Fatalf("want one tool_call and no error:\n%s", describe(events))
			}
			onChain, _ := calls[0].Data["output"].(map[string]any)
			if onChain["result_not_kept"] != true || onChain["reason"] != c.reason {
				t.Fatalf("the chain's result %v does not say it was not kept (%s):\n%s", calls[0].Data["output"], c.reason, describe(events))
			}
			if ends := only(events, lctl.TypeStepEnd); len(ends) != 1 || str(ends[0].Data, "output_summary") != "ok, result not kept: "+c.reason {
				t.Fatalf("step_end does not say the result was not kept:\n%s", describe(events))
			}
			rec, doubt, err := ex.Step(ctx, str(calls[0].Data, "step_id"))
			if err != nil || doubt || rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
				t.Fatalf("record %v (in doubt %v), %v", rec, doubt, err)
			}
			if got := rec.GetResponse().GetSuccess().GetResult().AsInterface(); !sameJSON(got, onChain) {
				t.Fatalf("record's result %v, chain's %v", got, onChain)
			}
			model.mu.Lock()
			defer model.mu.Unlock()
			if len(model.told) != 1 || model.told[0]["status"] != "success" {
				t.Fatalf("the model was told %v", model.told)
			}
			if told, _ := model.told[0]["result"].(map[string]any); !sameJSON(told, onChain) {
				t.Fatalf("the model was told %v, the chain holds %v", model.told[0], onChain)
			}
		})
	}
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// A step whose tool_call is on the chain and whose step_end is not (its
// owner stopped between them) is ended by the next owner with the same
// summary.
func TestResumedStepSaysItsResultWasNotKept(t *testing.T) {
	for _, c := range []struct {
		out  any
		want string
	}{
		{map[string]any{"result_not_kept": true, "reason": "TOO_DEEP"}, "ok, result not kept: TOO_DEEP"},
		{map[string]any{"n": 1.0}, "ok"},
		{"plain", "ok"},
	} {
		s := &xctevent.Step{Start: xctevent.StepStart{Step: 1, StepID: "s1", Tool: "test.charge", Arguments: map[string]any{}},
			Result: &xctevent.ToolCall{Step: 1, StepID: "s1", Tool: "test.charge", Output: c.out}}
		if got := openStepOf("run-1", s).summary; got != c.want {
			t.Errorf("output %v: summary %q, want %q", c.out, got, c.want)
		}
	}
}
