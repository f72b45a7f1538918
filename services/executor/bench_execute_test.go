package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// BenchmarkExecuteHandler is the executor's handler for one step as the
// orchestrator calls it: the signed verdict checked, the step recorded
// (in memory: JetStream's part is BenchmarkStepOverhead's), a no-op tool,
// the outcome recorded. The verdicts are signed before the timer starts;
// "small" has two short arguments, "1KiB" an fs.write-like content.
func BenchmarkExecuteHandler(b *testing.B) {
	for _, size := range []struct {
		name string
		args map[string]any
	}{
		{"small", map[string]any{"path": "a.txt", "n": 1.0}},
		{"1KiB", map[string]any{"path": "config/app.yaml", "content": strings.Repeat("replicas: 3\n", 86), "mode": "overwrite"}},
	} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			signer, v, err := verdict.NewPair(time.Hour)
			must(b, err)
			noop := testTool("bench.noop", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
				return map[string]any{"ok": true}, nil
			})
			s, err := New(Config{Workspace: b.TempDir(), Verifier: v}, nil, nil, noop)
			must(b, err)
			b.Cleanup(func() { _ = s.Stop(ctx) })
			h := &handler{s: s}
			args, err := structpb.NewStruct(size.args)
			must(b, err)
			digest, err := verdict.StructDigest(args)
			must(b, err)
			st, _ := s.tool("bench.noop")
			toolDigest := verdict.ToolDigest(st.desc)
			reqs := make([]*xctv1.ExecuteRequest, b.N)
			for i := range reqs {
				run := fmt.Sprintf("bench-%d", i)
				id := wire.StepID(run, 1, "bench.noop", args)
				sv, err := signer.Sign(&xctv1.VerdictGrant{RunId: run, Step: 1, StepId: id, Tool: "bench.noop", ArgumentsDigest: digest, ToolDigest: toolDigest}, time.Now())
				must(b, err)
				reqs[i] = &xctv1.ExecuteRequest{RunId: run, StepId: id, Tool: "bench.noop", Arguments: args, Verdict: sv}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				resp, err := h.Execute(ctx, reqs[i])
				if err != nil || resp.GetResponse().GetError() != nil || resp.GetReplayed() {
					b.Fatalf("step: %v %v", resp, err)
				}
			}
		})
	}
}
