package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// BenchmarkOrphanSearch is one interval of the orphan search on a log of
// 10,000 ended runs and 10 live ones (owned by another orchestrator):
// "first" is a process's first search (nothing cached), "steady" a later
// one. jsreq/op counts the JetStream API requests of one search (every
// request on $JS.API.>), which does not depend on the machine's load.
func BenchmarkOrphanSearch(b *testing.B) {
	const endedRuns, liveRuns = 10000, 10
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := testutil.RunJetStream(b)
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), testutil.Admin())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	events, err := eventlog.Open(ctx, conn())
	if err != nil {
		b.Fatal(err)
	}
	write := func(id string, end bool) {
		w, err := events.NewChainWriter(id)
		if err != nil {
			b.Fatal(err)
		}
		evs := []xctevent.Event{xctevent.RunStarted{RunID: id, Goal: "count", Model: "func:tester", Principal: "alice", Roles: []string{auth.RoleSubmitter}, MaxSteps: 10}}
		if end {
			evs = append(evs, xctevent.RunFinished{Status: "done", Message: "finished"})
		}
		for _, e := range evs {
			if _, err := w.Append(ctx, e.Type(), agentOrchestrator, e.Data()); err != nil {
				b.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < endedRuns; i += 8 {
				write(fmt.Sprintf("ended-%d", i), true)
			}
		})
	}
	wg.Wait()
	kv, err := events.JetStream().KeyValue(ctx, OwnersBucket)
	if err != nil {
		b.Fatal(err)
	}
	for i := range liveRuns {
		id := fmt.Sprintf("live-%d", i)
		if _, err := kv.Put(ctx, livePrefix+id, []byte("bench-other")); err != nil {
			b.Fatal(err)
		}
		if _, err := kv.Put(ctx, id, encodeOwner(ownerRecord{Owner: "bench-other"})); err != nil {
			b.Fatal(err)
		}
		write(id, false)
	}
	if chains, err := events.Chains(ctx); err != nil || len(chains) != endedRuns+liveRuns {
		b.Fatalf("%d chains, %v", len(chains), err)
	}
	s, err := New(Config{Instance: "bench", OrphanScan: -1, RunLease: time.Minute, CallTimeout: time.Minute,
		ValidatorAddr: "127.0.0.1:1", ExecutorAddr: "127.0.0.1:1"}, conn(), testLogger())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Stop(context.Background()) })

	var reqs atomic.Int64
	sub, err := conn().Subscribe("$JS.API.>", func(*nats.Msg) { reqs.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	run := func(b *testing.B, fresh bool) {
		state := newOrphanSearchState()
		searchOnce(ctx, b, s, state) // warm: what a later interval finds cached
		reqs.Store(0)
		b.ResetTimer()
		for range b.N {
			if fresh {
				b.StopTimer()
				s.runs = newRunIndex()
				state = newOrphanSearchState()
				b.StartTimer()
			}
			searchOnce(ctx, b, s, state)
		}
		b.StopTimer()
		b.ReportMetric(float64(reqs.Load())/float64(b.N), "jsreq/op")
	}
	b.Run("first", func(b *testing.B) { run(b, true) })
	b.Run("steady", func(b *testing.B) { run(b, false) })
}

// newOrphanSearchState and searchOnce are one search's state and one
// search (apart, so the benchmark reads the same against another version
// of the search).
func newOrphanSearchState() *orphanSearch { return newOrphanSearch() }

func searchOnce(ctx context.Context, b *testing.B, s *Service, o *orphanSearch) {
	if err := s.findOrphans(ctx, o); err != nil {
		b.Fatal(err)
	}
}
