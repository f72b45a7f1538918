package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// Issue 12, session 11: a step's claim (its pending record) is stored, but
// the store's acknowledgement is lost (a stream leader change, a
// connection dropped after the write): the create times out. Before the
// fix the executor answered UNAVAILABLE without acting and left its
// pending record behind; the caller's retry found it, waited for its
// deadline, and was told the step is IN_DOUBT, for a human to decide,
// although nothing had acted. Now the executor reads its record back: its
// own claim that landed unseen is released, and the step is claimed again
// and runs once.
func TestClaimLandedUnseenIsNotInDoubt(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	loser := testutil.NewAckLoser(t, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	nc, err := nats.Connect(loser.URL(), testutil.Admin())
	must(t, err)
	t.Cleanup(nc.Close)
	tool := countedTool("test.charge", false, xctv1.Effect_EFFECT_IRREVERSIBLE)
	tool.desc.Timeout = durationpb.New(300 * time.Millisecond) // its record's deadline passes while the create waits
	s, err := New(Config{Workspace: t.TempDir(), StepGrace: 100 * time.Millisecond}, nc, testLogger(t), tool)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	loser.LoseNext(func(subject string, _ []byte) bool { return strings.HasPrefix(subject, "$KV."+StepsBucket+".") })
	args, err := structpb.NewStruct(map[string]any{"amount": 5.0})
	must(t, err)
	req := &xctv1.ExecuteRequest{RunId: "run", StepId: "charge-1", Tool: "test.charge", Arguments: args}
	// A caller retries as told: UNAVAILABLE means "ask again".
	var resp *xctv1.ExecuteResponse
	for range 3 {
		resp, err = s.execute(ctx, req)
		if status.Code(err) != codes.Unavailable {
			break
		}
		t.Logf("retrying after: %v", err)
	}
	must(t, err)
	select {
	case <-loser.Lost:
	default:
		t.Fatal("no acknowledgement was lost")
	}
	if c := resp.GetResponse().GetError().GetCode(); c == string(wire.CodeInDoubt) {
		t.Fatalf("a step that never acted is in doubt: %v (the tool acted %d times)", resp.GetResponse().GetError().GetMessage(), tool.calls.Load())
	}
	if resp.GetResponse().GetSuccess() == nil || tool.calls.Load() != 1 {
		t.Fatalf("answer %v, the tool acted %d times; want one success", resp, tool.calls.Load())
	}
	rec, doubt, err := s.Step(ctx, "charge-1")
	must(t, err)
	if doubt || rec.GetState() != stateSucceeded || rec.GetAttempt() != 1 {
		t.Fatalf("record: %v (in doubt %v)", rec, doubt)
	}
}
