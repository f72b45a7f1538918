package validator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/testutil"
)

// TestRateRecordFull: a limit counting more calls than one record holds
// (the NATS server's max_payload, here made to hold 2) refuses the call
// that would not fit, as a count that cannot be kept (never an allow
// uncounted), and counts nothing for it.
func TestRateRecordFull(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	js, err := jetstream.New(testutil.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := &rateStore{}
	if err := st.bind(ctx, js, 1024+3*rateEntryBytes); err != nil {
		t.Fatal(err)
	}
	if got := st.bucket.Load().maxCalls; got != 2 {
		t.Fatalf("a record holds %d calls, want 2", got)
	}
	limits := []rateLimit{{pattern: "fs.*", global: rate{n: 5, window: time.Hour}, file: "p.yaml", line: 3}}
	now := time.Now()
	for i, step := range []string{"s1", "s2", "s3"} {
		refused, _, err := st.allow(ctx, now, step, rateChecks("", limits, "fs.write", "run-1", "alice"), true)
		switch {
		case i < 2 && (err != nil || refused != nil):
			t.Fatalf("call %d: refused %v, %v", i+1, refused, err)
		case i == 2 && (!errors.Is(err, errRateStore) || refused == nil):
			t.Fatalf("call 3: refused %v, %v; want the count store's error", refused, err)
		}
	}
	es, _, err := st.bucket.Load().read(ctx, rateKey(&rateChecks("", limits, "fs.write", "run-1", "alice")[0]))
	if err != nil || len(es) != 2 {
		t.Fatalf("record: %d calls, %v; want 2", len(es), err)
	}
}
