package eventlog

import (
	"context"
	"errors"
	"testing"

	"github.com/xct-dev/xct/internal/testutil"
)

// A duplicate acknowledgement is accepted only for the writer's own event:
// the same bytes on the same subject (a retry whose first ack was lost).
// A single node checks the expected sequence first, so this path is
// reached there only through a replicated stream; it is checked directly.
func TestSameAsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	l, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := l.NewChainWriter("mine")
	raw := []byte(`{"chain_id":"mine","seq":1}`)
	ack, err := l.JetStream().Publish(ctx, Subject("mine"), raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.sameAsStored(ctx, ack.Sequence, raw); err != nil {
		t.Fatalf("own event: %v", err)
	}
	if err := w.sameAsStored(ctx, ack.Sequence, []byte(`{"chain_id":"mine","seq":1,"x":1}`)); !errors.Is(err, ErrConflict) {
		t.Fatalf("other bytes: err = %v, want ErrConflict", err)
	}
	other, _ := l.NewChainWriter("other")
	if err := other.sameAsStored(ctx, ack.Sequence, raw); !errors.Is(err, ErrConflict) {
		t.Fatalf("other subject: err = %v, want ErrConflict", err)
	}
	if err := w.sameAsStored(ctx, ack.Sequence+100, raw); err == nil || errors.Is(err, ErrConflict) {
		t.Fatalf("unreadable message: err = %v, want an error that is not a conflict", err)
	}
}
