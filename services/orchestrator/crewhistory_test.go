package orchestrator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
)

// memberAwareModel answers as the agent its brief names: the finder
// counts once (test.count) and hands over, the checker answers done. It
// keeps the histories the checker was shown.
type memberAwareModel struct {
	mu      sync.Mutex
	checker [][]*xctv1.Turn
}

func (m *memberAwareModel) Name() string { return "tester" }
func (m *memberAwareModel) Close() error { return nil }
func (m *memberAwareModel) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	out := `{"done": true, "message": "checked"}`
	switch {
	case strings.Contains(req.GetInstructions(), `You are agent "finder"`):
		out = `{"next_step": {"tool": "xct.handoff", "arguments": {"to": "checker", "summary": "check the count"}, "goal": "hand over"}}`
		if len(req.GetHistory()) == 0 {
			out = step("test.count", 1)
		}
	default:
		m.mu.Lock()
		m.checker = append(m.checker, req.GetHistory())
		m.mu.Unlock()
	}
	return &xctv1.ProposeResponse{Output: out, Model: "tester", Usage: &xctv1.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

// The crew file's history (session 20): by default (no history:, or
// own) the checker is shown none of the finder's turns, its tool result
// included; history: shared keeps the behaviour before by name, the
// checker shown the finder's two turns.
func TestCrewHistorySetting(t *testing.T) {
	t.Parallel()
	base := strings.Replace(handoverCrew, "history: shared\n", "", 1)
	if base == handoverCrew {
		t.Fatal("handoverCrew no longer says history: shared")
	}
	for _, tc := range []struct {
		name, file string
		want       int
	}{
		{"default", base, 0},
		{"own", base + "history: own\n", 0},
		{"shared", base + "history: shared\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			model := &memberAwareModel{}
			f := newFixture(t, nil)
			s, _ := f.launch(Config{DrainTimeout: 20 * time.Second, Instance: "orch", CallTimeout: time.Minute}, model)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count and check", Crew: []byte(tc.file), CrewFile: "pair.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			events := f.waitEnd(resp.GetRun().GetRunId())
			if last := events[len(events)-1]; last.Data["status"] != "done" {
				t.Fatalf("run ended %v:\n%s", last.Data, describe(events))
			}
			model.mu.Lock()
			defer model.mu.Unlock()
			if len(model.checker) != 1 || len(model.checker[0]) != tc.want {
				t.Fatalf("the checker was asked %d times, first shown %v; want once, shown %d turns", len(model.checker), model.checker, tc.want)
			}
			if h := model.checker[0]; tc.want > 0 && (!strings.Contains(h[0].GetDecision(), "test.count") || !strings.Contains(h[1].GetDecision(), "xct.handoff")) {
				t.Fatalf("the shared history is not the finder's count and handoff: %v", h)
			}
		})
	}
}
