package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
)

// The hand-built direct get answers as the generic KV client's Get, at
// each point of a key's life (none, written, rewritten, deleted, written
// again, purged), for two keys read in turn, and with no lag: what was
// written before the read is what it answers.
func TestEpochGetAnswersAsTheKVClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	js, err := jetstream.New(nc)
	must(t, err)
	kv, err := js.KeyValue(ctx, verdict.PolicyBucket)
	must(t, err)
	g := newEpochGet(ctx, nc, kv)
	if g == nil {
		t.Fatal("no direct reader for the provisioned policy bucket (it allows direct gets)")
	}
	ids := []string{"ed25519:aa11", "ed25519:bb22"}
	same := func(step string) {
		t.Helper()
		for _, id := range ids {
			// Read with and without a deadline near enough to bound it.
			for _, c := range []context.Context{ctx, context.Background()} {
				got, gerr := g.get(c, id)
				e, werr := kv.Get(ctx, verdict.EpochKey(id))
				var want []byte
				if werr == nil {
					want = e.Value()
				}
				switch {
				case werr != nil && !errors.Is(gerr, werr):
					t.Errorf("%s, %s: direct get %q, %v; the KV client %v", step, id, got, gerr, werr)
				case werr == nil && (gerr != nil || string(got) != string(want)):
					t.Errorf("%s, %s: direct get %q, %v; the KV client %q", step, id, got, gerr, want)
				}
			}
		}
	}
	key0, key1 := verdict.EpochKey(ids[0]), verdict.EpochKey(ids[1])
	same("no record")
	_, err = kv.Put(ctx, key0, []byte(`{"v":1}`))
	must(t, err)
	same("written")
	if got, err := g.get(ctx, ids[0]); err != nil || string(got) != `{"v":1}` {
		t.Fatalf("after the first write: %q, %v", got, err)
	}
	_, err = kv.Put(ctx, key0, []byte(`{"v":2}`))
	must(t, err)
	if got, err := g.get(ctx, ids[0]); err != nil || string(got) != `{"v":2}` {
		t.Fatalf("the read right after a rewrite: %q, %v; want the rewrite", got, err)
	}
	_, err = kv.Put(ctx, key1, []byte(`{"w":1}`))
	must(t, err)
	same("rewritten, another key written")
	must(t, kv.Delete(ctx, key0))
	same("deleted")
	if _, err := g.get(ctx, ids[0]); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a deleted key: %v, want ErrKeyNotFound", err)
	}
	_, err = kv.Put(ctx, key0, []byte(`{"v":3}`))
	must(t, err)
	same("written again")
	must(t, kv.Purge(ctx, key1))
	same("purged")
	if _, err := g.get(ctx, ids[1]); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a purged key: %v, want ErrKeyNotFound", err)
	}
	if _, err := g.get(ctx, "ed25519:a b"); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Errorf("a key id whose key the KV client refuses: %v, want ErrInvalidKey", err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := g.get(done, ids[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled caller: %v, want context.Canceled", err)
	}
}

// A bucket the hand-built get cannot read as the KV client would (no
// direct gets) is read by the generic client.
func TestEpochGetOnlyWithDirectGets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	js, err := jetstream.New(nc)
	must(t, err)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "NODIRECT"})
	must(t, err)
	if newEpochGet(ctx, nc, kv) == nil {
		t.Fatal("a plain bucket allowing direct gets has no direct reader")
	}
	st, err := js.Stream(ctx, "KV_NODIRECT")
	must(t, err)
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	must(t, err)
	kv, err = js.KeyValue(ctx, "NODIRECT")
	must(t, err)
	if newEpochGet(ctx, nc, kv) != nil {
		t.Error("a bucket without direct gets is read by hand")
	}
}

// A reload is seen by the next Execute's check: the executor started on
// NATS reads its key's epoch by the direct get, and an epoch recorded just
// before the check refuses a grant it replaces, with nothing waited for.
func TestEpochCheckSeesAReloadAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, signer, kv := epochExecutor(ctx, t)
	if s.epochDirect.Load() == nil {
		t.Fatal("the executor on NATS does not read epochs by the direct get")
	}
	record := func(version string, at time.Time) {
		t.Helper()
		rec, err := signer.SignEpoch(version, at)
		must(t, err)
		_, err = kv.Put(ctx, verdict.EpochKey(signer.KeyID()), rec)
		must(t, err)
	}
	issued := time.Now()
	grant := &xctv1.VerdictGrant{PolicyVersion: "v1", IssuedAt: timestamppb.New(issued)}
	if err := s.checkEpoch(ctx, signer.KeyID(), grant); err != nil {
		t.Fatalf("no epoch recorded: %v", err)
	}
	record("v1", issued.Add(-time.Second))
	for i := range 3 {
		if err := s.checkEpoch(ctx, signer.KeyID(), grant); err != nil {
			t.Fatalf("check %d under the grant's own policy: %v", i, err)
		}
	}
	record("v2", issued.Add(time.Millisecond))
	if err := s.checkEpoch(ctx, signer.KeyID(), grant); !errors.Is(err, verdict.ErrReplaced) {
		t.Fatalf("the check right after a reload: %v, want ErrReplaced", err)
	}
	// A later grant of the new policy is not refused.
	fresh := &xctv1.VerdictGrant{PolicyVersion: "v2", IssuedAt: timestamppb.New(issued.Add(2 * time.Millisecond))}
	if err := s.checkEpoch(ctx, signer.KeyID(), fresh); err != nil {
		t.Fatalf("a grant of the policy in force: %v", err)
	}
	// A record that is not the key's signed epoch is not taken as one.
	_, err := kv.Put(ctx, verdict.EpochKey(signer.KeyID()), []byte(`{"key_id":"x"}`))
	must(t, err)
	if err := s.checkEpoch(ctx, signer.KeyID(), fresh); !errors.Is(err, errEpochUnread) {
		t.Fatalf("an unverifiable record: %v, want errEpochUnread", err)
	}
}

// BenchmarkEpochCheck is the policy epoch's check of one Execute (the
// record read from the bucket, its verified bytes recognized), by the
// hand-built direct get and by the generic KV client.
func BenchmarkEpochCheck(b *testing.B) {
	ctx := context.Background()
	s, signer, kv := epochExecutor(ctx, b)
	issued := time.Now()
	rec, err := signer.SignEpoch("v1", issued.Add(-time.Second))
	must(b, err)
	_, err = kv.Put(ctx, verdict.EpochKey(signer.KeyID()), rec)
	must(b, err)
	grant := &xctv1.VerdictGrant{PolicyVersion: "v1", IssuedAt: timestamppb.New(issued)}
	direct := s.epochDirect.Load()
	for _, c := range []struct {
		name string
		g    *epochGet
	}{{"direct", direct}, {"kv-client", nil}} {
		b.Run(c.name, func(b *testing.B) {
			s.epochDirect.Store(c.g)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.checkEpoch(ctx, signer.KeyID(), grant); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	s.epochDirect.Store(direct)
}

// epochExecutor is an executor started on a JetStream server of its own,
// verifying the verdicts of signer, and the policy epochs bucket it reads.
func epochExecutor(ctx context.Context, tb testing.TB) (*Service, *verdict.Signer, jetstream.KeyValue) {
	tb.Helper()
	nc := testutil.Connect(tb, testutil.RunJetStream(tb))
	key, err := verdict.GenerateKey()
	must(tb, err)
	signer, err := verdict.NewSigner(key, 0)
	must(tb, err)
	ver, err := verdict.NewVerifier(signer.Public())
	must(tb, err)
	s, err := New(Config{Workspace: tb.TempDir(), MaxOutputBytes: 1024, Verifier: ver}, nc, nil)
	must(tb, err)
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	must(tb, s.Start(ctx))
	js, err := jetstream.New(nc)
	must(tb, err)
	kv, err := js.KeyValue(ctx, verdict.PolicyBucket)
	must(tb, err)
	return s, signer, kv
}
