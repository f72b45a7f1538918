package eventlog_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// A Publish under a context that never ends (context.Background,
// context.WithoutCancel: the executor's step records) is bounded by the
// publisher's own timeout on the client's pooled timer, and answers as a
// Publish under a deadline does: the write lands at the expected
// sequence, a write whose expected last sequence is stale is refused with
// the stream's error, a message id stored before is a duplicate, and nobody
// listening is jetstream.ErrNoStreamResponse. A context without a
// deadline that can be cancelled is still obeyed.
func TestPublishUnderANeverEndingContext(t *testing.T) {
	t.Parallel()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FOREVER", Subjects: []string{"forever.>"}}); err != nil {
		t.Fatal(err)
	}
	p := eventlog.NewPublisher(nc, "FOREVER")
	for i, c := range []context.Context{context.Background(), context.WithoutCancel(ctx), ctx} {
		subj := "forever." + string(rune('a'+i))
		first, err := p.Publish(c, subj, []byte("1"), subj+"/1", 0)
		if err != nil || first.Seq == 0 || first.Duplicate {
			t.Fatalf("context %d: first write %+v, %v", i, first, err)
		}
		next, err := p.Publish(c, subj, []byte("2"), subj+"/2", first.Seq)
		if err != nil || next.Seq <= first.Seq {
			t.Fatalf("context %d: second write %+v, %v", i, next, err)
		}
		var apiErr *jetstream.APIError
		if _, err := p.Publish(c, subj, []byte("3"), subj+"/3", first.Seq); !errors.As(err, &apiErr) ||
			apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
			t.Fatalf("context %d: a write expecting a stale sequence: %v, want the stream's wrong last sequence error", i, err)
		}
		again, err := p.Publish(c, subj, []byte("2"), subj+"/2", next.Seq)
		if err != nil || !again.Duplicate || again.Seq != next.Seq {
			t.Fatalf("context %d: the second write again: %+v, %v; want a duplicate of %d", i, again, err, next.Seq)
		}
		if _, err := p.Publish(c, "nobody."+subj, []byte("{}"), "", 0); !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("context %d: nobody listening: %v, want jetstream.ErrNoStreamResponse", i, err)
		}
	}
	sub, err := nc.Subscribe("silent.x", func(*nats.Msg) {}) // listens, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	stop, cancelStop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Publish(stop, "silent.x", []byte("{}"), "", 0)
		done <- err
	}()
	cancelStop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, eventlog.ErrNotSent) {
			t.Fatalf("a cancelled context without a deadline: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("a Publish whose context was cancelled did not return")
	}
}

// BenchmarkPublishRecord is one conditional write, as the executor's step
// records make them, under a context that never ends and under a
// deadline.
func BenchmarkPublishRecord(b *testing.B) {
	s := testutil.RunJetStream(b)
	nc := testutil.Connect(b, s)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "FOREVER", Subjects: []string{"forever.>"}, MaxMsgsPerSubject: 1}); err != nil {
		b.Fatal(err)
	}
	p := eventlog.NewPublisher(nc, "FOREVER")
	runs := 0
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"never-ending", func() (context.Context, context.CancelFunc) {
			return context.WithoutCancel(context.Background()), func() {}
		}},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 5*time.Second)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			runs++
			subj := "forever." + c.name + "." + strconv.Itoa(runs)
			var last uint64
			for b.Loop() {
				ctx, cancel := c.ctx()
				ack, err := p.Publish(ctx, subj, []byte(`{"state":1}`), "", last)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				last = ack.Seq
			}
		})
	}
}
