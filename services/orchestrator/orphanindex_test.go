package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// apiSpy sees every JetStream API request on the server (a subscriber on
// $JS.API.> gets a copy of each) and counts those whose subject or body
// holds a string.
type apiSpy struct {
	mu   sync.Mutex
	reqs []string // subject + " " + body
}

func spyAPI(t *testing.T, f *fixture) *apiSpy {
	t.Helper()
	a := &apiSpy{}
	nc := connect(t, f.ns)
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		a.mu.Lock()
		a.reqs = append(a.reqs, m.Subject+" "+string(m.Data))
		a.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// count is the requests that hold any of subs.
func (a *apiSpy) count(subs ...string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.reqs {
		for _, s := range subs {
			if strings.Contains(r, s) {
				n++
				break
			}
		}
	}
	return n
}

// Issue 12, session 12: the orphan search listed every chain of the
// stream (the stream's per-subject counts) at each interval and read the
// ends of each it did not know ended: O(all chains) per interval per
// replica. 300 ended runs and one orphan: the orphan's entry is written
// (as StartRun does) and searched for while its chain does not exist yet,
// then its run_started lands, and it is resumed; no JetStream request
// names an ended run's chain, and the stream's subjects are never listed
// (on main both were: 600 reads of the ended chains' ends).
func TestOrphanSearchReadsOnlyLiveRuns(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ended = 300
	for i := range ended {
		writeChain(ctx, f, fmt.Sprintf("ended-%d", i), xctevent.RunFinished{Status: "done", Message: "finished"})
	}
	spy := spyAPI(t, f)
	const id = "run-orphan"
	indexLive(ctx, f, id)
	f.launch(Config{RunLease: 500 * time.Millisecond, DrainTimeout: 5 * time.Second, Instance: "orch-a", CallTimeout: time.Minute,
		OrphanScan: 50 * time.Millisecond}, model)
	// Searched for while it has no chain: kept, not forgotten. (On main
	// the search listed the stream's subjects instead.)
	testutil.Eventually(t, 30*time.Second, func() error {
		if n, m := spy.count("lctl.chain."+id), spy.count(`"subjects_filter"`); n < 3 && m < 3 {
			return fmt.Errorf("the orphan's chain was looked for %d times (%d listings)", n, m)
		}
		return nil
	})
	writeChain(ctx, f, id) // its run_started lands late

	events := f.waitEnd(id)
	f.checkChain(id, events, 1)
	if resumed := only(events, TypeRunResumed); len(resumed) != 1 || str(resumed[0].Data, "reason") != "unowned" {
		t.Fatalf("want one run_resumed (unowned):\n%s", describe(events))
	}
	if n := spy.count("lctl.chain.ended-"); n != 0 {
		t.Errorf("%d JetStream requests named an ended run's chain", n)
	}
	if n := spy.count(`"subjects_filter"`); n != 0 {
		t.Errorf("%d requests listed the stream's subjects", n)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, err := f.owners.Get(ctx, livePrefix+id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the ended orphan's live entry stays: %w", err)
		}
		return nil
	})
}

// A run StartRun starts is indexed as live before its run_started, and
// its entry goes once its end is on the chain (purged: no delete marker
// stays for a listing to read).
func TestStartedRunIsIndexedUntilItEnds(t *testing.T) {
	t.Parallel()
	model := newGatedModel(step("test.count", 1))
	f := newFixture(t, model)
	a, _ := f.orchestrator("orch-a", time.Second)
	gate := model.gate(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := a.StartRun(as(ctx, "alice", auth.RoleSubmitter), &xctv1.StartRunRequest{Goal: "count", Model: "func:tester", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetRun().GetRunId()
	<-model.asked // the run waits for its model
	if _, err := f.owners.Get(ctx, livePrefix+id); err != nil {
		t.Fatalf("a running run's live entry: %v", err)
	}
	close(gate)
	f.waitEnd(id)
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, err := f.owners.Get(ctx, livePrefix+id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the ended run's live entry: %w", err)
		}
		return nil
	})
	st, err := f.events.JetStream().Stream(ctx, "KV_"+OwnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, "$KV."+OwnersBucket+"."+livePrefix+id); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the live entry left a message (a delete marker?): %v", err)
	}
}
