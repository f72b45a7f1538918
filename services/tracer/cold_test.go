package tracer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/tracer"
)

// TestColdChainsReadBack bounds the events the tracer keeps in memory: the
// chains used least recently are dropped from memory and read back from
// their files when asked for, answering exactly what they answered while in
// memory; a cold chain that gets new events is read back and goes on; a
// tracer starting on more events than its bound loads only part of them.
func TestColdChainsReadBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := tracer.Config{MaxResidentEvents: 40, SnapshotEvery: 5, SyncInterval: 10 * time.Millisecond}
	tr := e.startTracerWith(t, cfg)
	tracer.EvictWrittenChains(tr.svc)
	ctx := context.Background()
	replay := func(tr *running, id string, seq uint64) *lctlv1.ReplayChainResponse {
		t.Helper()
		resp, err := tr.client.ReplayChain(ctx, &lctlv1.ReplayChainRequest{ChainId: id, ToSeq: seq, View: lctlv1.StateView_STATE_VIEW_FULL})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	facts := func(tr *running, id string) *lctlv1.QueryFactsResponse {
		t.Helper()
		resp, err := tr.client.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: id, Query: "SELECT *", ToSeq: 9})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	w := writeRun(t, e.log, "cold-a", 3) // 14 events
	tr.waitFor(t, "cold-a", 14)
	warmReplay, warmFacts := replay(tr, "cold-a", 11), facts(tr, "cold-a")

	ids := []string{"cold-a"}
	for _, id := range []string{"cold-b", "cold-c", "cold-d"} {
		writeRun(t, e.log, id, 3)
		tr.waitFor(t, id, 14)
		ids = append(ids, id)
	}
	// 56 events against a bound of 40: cold-a, used least recently, is out.
	testutil.Eventually(t, waitTimeout, func() error {
		if n, cold := tracer.ResidentEvents(tr.svc), tracer.ColdChains(tr.svc); n > 40 || cold == 0 {
			return fmt.Errorf("%d events in memory, %d cold chains", n, cold)
		}
		return nil
	})
	if !tracer.IsCold(tr.svc, "cold-a") {
		t.Fatal("cold-a, used least recently, is still in memory")
	}
	if got := replay(tr, "cold-a", 11); !proto.Equal(got, warmReplay) {
		t.Errorf("replay of the cold chain read back:\n%v\nwhile in memory:\n%v", got, warmReplay)
	}
	if got := facts(tr, "cold-a"); !proto.Equal(got, warmFacts) {
		t.Errorf("facts of the cold chain read back:\n%v\nwhile in memory:\n%v", got, warmFacts)
	}
	sameAsStream(t, e, tr, ids)

	// Reading the others made cold-a the least recently used again; new
	// events for it bring it back and go on from its last one.
	testutil.Eventually(t, waitTimeout, func() error {
		if n := tracer.ResidentEvents(tr.svc); n > 40 {
			return fmt.Errorf("%d events in memory", n)
		}
		return nil
	})
	if !tracer.IsCold(tr.svc, "cold-a") {
		t.Fatal("cold-a, used least recently, is still in memory")
	}
	appendEvents(t, w, []ev{{"step_start", "m1", map[string]any{"step": 4.0}}})
	tr.waitFor(t, "cold-a", 15)
	sameAsStream(t, e, tr, ids)

	// A tracer starting on 57 events keeps at most 40 of them in memory
	// and serves every chain whole.
	tr.stop()
	second := e.startTracerWith(t, cfg)
	tracer.EvictWrittenChains(second.svc)
	if n := tracer.ResidentEvents(second.svc); n > 40 {
		t.Errorf("%d events in memory after start, bound 40", n)
	}
	if cold := tracer.ColdChains(second.svc); cold == 0 {
		t.Error("no chain is cold after start")
	}
	sameAsStream(t, e, second, ids)
	if got := replay(second, "cold-b", 11); got.GetSeq() != 11 {
		t.Errorf("replay of cold-b after restart at seq %d", got.GetSeq())
	}
}
