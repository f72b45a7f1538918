package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

// BenchmarkStepOverhead measures what the executor adds to a step: the
// step record (create pending, record the outcome: two conditional KV
// writes) around a no-op tool, next to one plain KV write in the same
// JetStream, the unit of its cost. "memory" is the executor without NATS:
// the overhead that is not JetStream's. "replay" is a step asked again.
func BenchmarkStepOverhead(b *testing.B) {
	ctx := context.Background()
	nc := testutil.Connect(b, testutil.RunJetStream(b))
	noop := testTool("bench.noop", 0, 0, func(context.Context, map[string]any) (any, *xctv1.Error) {
		return map[string]any{"ok": true}, nil
	})
	js, err := New(Config{Workspace: b.TempDir()}, nc, nil, noop)
	must(b, err)
	must(b, js.Start(ctx))
	b.Cleanup(func() { _ = js.Stop(ctx) })
	mem, err := New(Config{Workspace: b.TempDir()}, nil, nil, noop)
	must(b, err)
	b.Cleanup(func() { _ = mem.Stop(ctx) })
	args, _ := structpb.NewStruct(map[string]any{"path": "a.txt"})

	step := func(b *testing.B, s *Service, id string) {
		resp, err := s.execute(ctx, &xctv1.ExecuteRequest{RunId: "bench", StepId: id, Tool: "bench.noop", Arguments: args})
		if err != nil || resp.GetResponse().GetError() != nil {
			b.Fatalf("step: %v %v", resp, err)
		}
	}
	b.Run("kv-put", func(b *testing.B) {
		j, err := jetstream.New(nc)
		must(b, err)
		kv, err := j.KeyValue(ctx, StepsBucket)
		must(b, err)
		rec, _ := encodeRecord(&xctv1.StepRecord{StepId: "x", RunId: "bench", Tool: "bench.noop", ArgumentsDigest: argumentsDigest(args.AsMap()), State: statePending, Attempt: 1}, false)
		i := 0
		for b.Loop() {
			i++
			if _, err := kv.Put(ctx, fmt.Sprintf("kvput-%d", i), rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kv-put-direct", func(b *testing.B) {
		// The same write as kv-put, as the step store makes it (kvput.go).
		put := js.steps.(*kvStepStore).put
		rec, _ := encodeRecord(&xctv1.StepRecord{StepId: "x", RunId: "bench", Tool: "bench.noop", ArgumentsDigest: argumentsDigest(args.AsMap()), State: statePending, Attempt: 1}, false)
		i := 0
		for b.Loop() {
			i++
			if _, err := put.write(ctx, fmt.Sprintf("kvdirect-%d", i), rec, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("step-jetstream", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			step(b, js, fmt.Sprintf("js-%d", i))
		}
	})
	b.Run("step-memory", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			step(b, mem, fmt.Sprintf("mem-%d", i))
		}
	})
	b.Run("replay-jetstream", func(b *testing.B) {
		step(b, js, "replayed")
		for b.Loop() {
			step(b, js, "replayed")
		}
	})
}
