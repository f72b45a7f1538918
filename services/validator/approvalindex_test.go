package validator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/validator"
)

// countingKV counts what is read of the approvals bucket: gets and
// watched entries, by whether the key is an approval's ("<run>.<step>")
// or another (the pending index's "pending.<run>.<step>").
type countingKV struct {
	jetstream.KeyValue
	mu                      sync.Mutex
	approvalReads, others   int
	approvalKeys, otherKeys []string
}

func (k *countingKV) count(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if strings.Count(key, ".") == 1 {
		k.approvalReads++
		k.approvalKeys = append(k.approvalKeys, key)
	} else {
		k.others++
		k.otherKeys = append(k.otherKeys, key)
	}
}

func (k *countingKV) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.approvalReads, k.others, k.approvalKeys, k.otherKeys = 0, 0, nil, nil
}

func (k *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	k.count(key)
	return k.KeyValue.Get(ctx, key)
}

func (k *countingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.Watch(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	cw := &countingWatcher{KeyWatcher: w, out: make(chan jetstream.KeyValueEntry), done: make(chan struct{})}
	go func() {
		defer close(cw.out)
		for e := range w.Updates() {
			if e != nil {
				k.count(e.Key())
			}
			select {
			case cw.out <- e:
			case <-cw.done:
				return
			}
		}
	}()
	return cw, nil
}

type countingWatcher struct {
	jetstream.KeyWatcher
	out      chan jetstream.KeyValueEntry
	done     chan struct{}
	stopOnce sync.Once
}

func (w *countingWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.out }

func (w *countingWatcher) Stop() error {
	w.stopOnce.Do(func() { close(w.done) })
	return w.KeyWatcher.Stop()
}

// indexSubjects is how many keys of the approvals bucket hold a message
// under "pending." (index entries and their markers not yet expired).
func indexSubjects(tb testing.TB, a *approvals) int {
	tb.Helper()
	js, err := jetstream.New(a.nc)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := js.Stream(context.Background(), "KV_"+validator.ApprovalsBucket)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter("$KV."+validator.ApprovalsBucket+".pending.>"))
	if err != nil {
		tb.Fatal(err)
	}
	return len(info.State.Subjects)
}

// Session 19 (ops19), issue 17: a list of the pending approvals watched
// every key of the approvals bucket and decoded every approval ever
// opened (previews up to 256 KiB each), so its cost grew with every
// approval closed. Now an index key "pending.<run>.<step>" is written
// before an approval is opened and removed after it leaves pending
// (decided, expired, withdrawn), and the list reads the index and the
// approvals it names: with 1,000 closed approvals and 3 pending, it reads
// the 3. The index's markers expire (the bucket lets them, set by
// provisioning), so the index holds the pending approvals only.
func TestPendingListReadsOnlyThePending(t *testing.T) {
	t.Parallel()
	a := startApprovals(t, validator.WithIndexMarkerTTL(time.Second))
	const closed = 1000
	opened := make([]*xctv1.Approval, closed)
	for i := range closed {
		opened[i] = a.request(t, stepRequest(t, fmt.Sprintf("closed-%d", i), 1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"}), nil)
	}
	// Each way out of pending: approved, denied, withdrawn, expired.
	for i := range 4 {
		if _, err := a.decide(opened[i].GetRunId(), opened[i].GetStepId(), true, "bob", "fine"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 4; i < 8; i++ {
		if _, err := a.decide(opened[i].GetRunId(), opened[i].GetStepId(), false, "bob", "no"); err != nil {
			t.Fatal(err)
		}
	}
	svc := auth.NewContext(context.Background(), auth.Principal{Name: "service:orchestrator", Roles: []string{auth.RoleService}, Service: true})
	for i := 8; i < 12; i++ {
		if _, err := a.s.WithdrawApproval(svc, &xctv1.WithdrawApprovalRequest{RunId: opened[i].GetRunId(), StepId: opened[i].GetStepId(), By: "carol", Reason: "cancelled"}); err != nil {
			t.Fatal(err)
		}
	}
	a.clock.Advance(2 * time.Hour) // past the policy's approval_ttl: the rest expire when listed
	if got := a.list(t, "", false); len(got) != 0 {
		t.Fatalf("%d approvals listed pending after every one was closed", len(got))
	}
	var want []string
	for i := range 3 {
		want = append(want, a.request(t, stepRequest(t, fmt.Sprintf("open-%d", i), 1, "fs.write", map[string]any{"path": "config/b.yaml", "content": "b\n"}), nil).GetStepId())
	}

	counter := &countingKV{}
	validator.WrapApprovalsKV(a.s, func(kv jetstream.KeyValue) jetstream.KeyValue { counter.KeyValue = kv; return counter })
	got := a.list(t, "", false)
	var ids []string
	for _, ap := range got {
		ids = append(ids, ap.GetStepId())
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("pending list %v, want %v", ids, want)
	}
	if counter.approvalReads > 3 {
		t.Fatalf("the pending list read %d approvals for 3 pending among %d closed (%v...)", counter.approvalReads, closed, counter.approvalKeys[:min(5, len(counter.approvalKeys))])
	}
	if counter.others > 3 {
		t.Fatalf("the pending list read %d index entries for 3 pending: %v", counter.others, counter.otherKeys)
	}
	// Every approval is still there for a list of all of them.
	counter.reset()
	all := a.list(t, "", true)
	if len(all) != closed+3 {
		t.Fatalf("a list of all approvals has %d, want %d", len(all), closed+3)
	}
	states := map[xctv1.ApprovalState]int{}
	for _, ap := range all {
		states[ap.GetState()]++
	}
	if states[xctv1.ApprovalState_APPROVAL_STATE_APPROVED] != 4 || states[xctv1.ApprovalState_APPROVAL_STATE_DENIED] != 4 ||
		states[xctv1.ApprovalState_APPROVAL_STATE_WITHDRAWN] != 4 || states[xctv1.ApprovalState_APPROVAL_STATE_EXPIRED] != closed-12 ||
		states[xctv1.ApprovalState_APPROVAL_STATE_PENDING] != 3 {
		t.Fatalf("states %v", states)
	}
	if counter.others != 0 {
		t.Fatalf("a list of all approvals read %d index entries as approvals: %v", counter.others, counter.otherKeys)
	}
	// The markers of the 1,000 closed approvals' index keys expire: the
	// index then holds the 3 pending ones only.
	testutil.Eventually(t, time.Minute, func() error {
		n := indexSubjects(t, a)
		if n < 3 {
			t.Fatalf("the index holds %d keys, fewer than the 3 pending approvals", n)
		}
		if n > 3 {
			return fmt.Errorf("the index holds %d keys for 3 pending approvals", n)
		}
		return nil
	})
}

// An approval an older validator opened (no index key) is listed pending
// by a validator started after it: the start indexes every pending
// approval it finds. An index key naming a closed approval is removed by
// the list that finds it so; one naming no approval is kept while an
// approval may still be on its way (its request writes the index first),
// and removed once it is older than that.
func TestPendingIndexIsRepaired(t *testing.T) {
	t.Parallel()
	a := startApprovals(t)
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, validator.ApprovalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// An older validator's pending approval: the approval only.
	req := stepRequest(t, "old-1", 1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"})
	old := &xctv1.Approval{RunId: "old-1", Step: 1, StepId: req.GetStepId(), Proposal: req.GetProposal(), RequestedBy: "alice",
		State: xctv1.ApprovalState_APPROVAL_STATE_PENDING, RequestedAt: timestamppb.New(a.clock.Now()), ExpiresAt: timestamppb.New(a.clock.Now().Add(time.Hour))}
	raw, err := protojson.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "old-1."+req.GetStepId(), raw); err != nil {
		t.Fatal(err)
	}
	_ = a.s.Stop(ctx)
	a.s = a.start(t)
	if got := a.list(t, "", false); len(got) != 1 || got[0].GetStepId() != req.GetStepId() {
		t.Fatalf("after a restart the pending list is %v; want the older validator's approval", got)
	}
	if _, err := kv.Get(ctx, "pending.old-1."+req.GetStepId()); err != nil {
		t.Fatalf("the start did not index the older validator's pending approval: %v", err)
	}

	// An index key left behind for an approval that was closed.
	ap := a.request(t, configWrite(t, 2, "config/b.yaml"), nil)
	if _, err := a.decide("run-1", ap.GetStepId(), true, "bob", "fine"); err != nil {
		t.Fatal(err)
	}
	stale := "pending.run-1." + ap.GetStepId()
	if _, err := kv.Put(ctx, stale, nil); err != nil {
		t.Fatal(err)
	}
	// An index key whose approval was never made (its request failed
	// after writing it), and one whose approval is being made.
	if _, err := kv.Put(ctx, "pending.run-9.nothing", nil); err != nil {
		t.Fatal(err)
	}
	if got := a.list(t, "", false); len(got) != 1 || got[0].GetRunId() != "old-1" {
		t.Fatalf("pending list %v; want old-1's approval only", got)
	}
	if _, err := kv.Get(ctx, stale); err == nil {
		t.Fatalf("the index key of a closed approval is still there after a list")
	}
	if _, err := kv.Get(ctx, "pending.run-9.nothing"); err != nil {
		t.Fatalf("a fresh index key without its approval (yet) was removed: %v", err)
	}
	a.clock.Advance(11 * time.Minute)
	_ = a.list(t, "", false)
	if _, err := kv.Get(ctx, "pending.run-9.nothing"); err == nil {
		t.Fatalf("an index key without an approval, older than any request, is still there")
	}
}

// BenchmarkListPendingAmongClosed lists the 3 pending approvals of a
// bucket where 1,000 more were opened and closed (expired), each with a
// 4 KiB preview (session 19): before the pending index, every list read
// and decoded all 1,003.
func BenchmarkListPendingAmongClosed(b *testing.B) {
	benchListPendingAmongClosed(b, startApprovals(b), false)
}

// BenchmarkListPendingAmongClosedMarkersGone is the same once the index
// keys' markers of the closed approvals expired (1 s here, a minute in a
// cluster): the index then holds the 3 pending approvals only.
func BenchmarkListPendingAmongClosedMarkersGone(b *testing.B) {
	benchListPendingAmongClosed(b, startApprovals(b, validator.WithIndexMarkerTTL(time.Second)), true)
}

func benchListPendingAmongClosed(b *testing.B, a *approvals, markersGone bool) {
	preview := &xctv1.Preview{Kind: "diff", Content: strings.Repeat("+a line of the file as it would be\n", 120)}
	for i := range 1000 {
		a.request(b, stepRequest(b, fmt.Sprintf("closed-%d", i), 1, "fs.write", map[string]any{"path": "config/a.yaml", "content": "a\n"}), preview)
	}
	a.clock.Advance(2 * time.Hour)
	if got := a.list(b, "", false); len(got) != 0 {
		b.Fatalf("%d pending after expiry", len(got))
	}
	for i := range 3 {
		a.request(b, stepRequest(b, fmt.Sprintf("open-%d", i), 1, "fs.write", map[string]any{"path": "config/b.yaml", "content": "b\n"}), preview)
	}
	if markersGone {
		testutil.Eventually(b, time.Minute, func() error {
			if n := indexSubjects(b, a); n != 3 {
				return fmt.Errorf("the index holds %d keys", n)
			}
			return nil
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := a.list(b, "", false); len(got) != 3 {
			b.Fatalf("listed %d pending approvals, want 3", len(got))
		}
	}
}
