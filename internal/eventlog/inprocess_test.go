package eventlog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// inProcessAck is a replicated stream's answer to a conditional write
// refused, unstored, while another write of its subject is in process.
const inProcessAck = `{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`

// scriptedStream answers the writes sent to subject with answers, one per
// write, in order (the last one again once they run out), and records
// each write's expected sequence and message id: the server's answers to
// a replicated stream's writes, which a one-node test server never gives.
func scriptedStream(t *testing.T, nc *nats.Conn, subject string, answers ...string) func() [][2]string {
	t.Helper()
	var mu sync.Mutex
	var got [][2]string
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		got = append(got, [2]string{m.Header.Get(jetstream.ExpectedLastSubjSeqHeader), m.Header.Get(jetstream.MsgIDHeader)})
		a := answers[min(len(got), len(answers))-1]
		mu.Unlock()
		_ = m.Respond([]byte(a))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() [][2]string {
		mu.Lock()
		defer mu.Unlock()
		return append([][2]string(nil), got...)
	}
}

// TestPublishSendsAgainAWriteRefusedAsInProcess: a write a replicated
// stream refused because another write of its subject was still in
// process (10164, nothing stored; the server acknowledges a write before
// it clears the subject's mark, so a lone writer's next write can meet
// it) is sent again unchanged and lands; one refused that way every time
// fails with the stream's error after a bounded number of sends, and one
// refused because the subject's last sequence is another (10071) is not
// sent again. Under both bounds, a context and a duration. On main the
// first write failed with 10164 at once, which the chain writer reports
// as another writer's conflict and the executor as a lost step record.
func TestPublishSendsAgainAWriteRefusedAsInProcess(t *testing.T) {
	t.Parallel()
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	p := eventlog.NewPublisher(nc, "LCTL")
	stored := `{"stream":"LCTL","seq":12}`
	wrongLast := `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 11"},"stream":"LCTL","seq":0}`

	bounds := map[string]func(subject string) (eventlog.PubAck, error){
		"context": func(subject string) (eventlog.PubAck, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return p.Publish(ctx, subject, []byte(`{}`), "run/4", 11)
		},
		"within": func(subject string) (eventlog.PubAck, error) {
			return p.PublishWithin(10*time.Second, subject, []byte(`{}`), "run/4", 11)
		},
	}
	for name, publish := range bounds {
		t.Run(name, func(t *testing.T) {
			// Refused twice while in process, then stored.
			sent := scriptedStream(t, nc, "lands."+name, inProcessAck, inProcessAck, stored)
			ack, err := publish("lands." + name)
			if err != nil || ack.Seq != 12 {
				t.Fatalf("write refused twice as in process: ack %+v, err %v; want stored at 12", ack, err)
			}
			writes := sent()
			if len(writes) != 3 {
				t.Fatalf("sent %d times, want 3 (two refusals, then stored)", len(writes))
			}
			for i, w := range writes {
				if w != [2]string{"11", "run/4"} {
					t.Fatalf("send %d carried expected sequence %q, message id %q; want the first send's 11, run/4", i, w[0], w[1])
				}
			}

			// Refused every time: the stream's error, after a bounded number of sends.
			sent = scriptedStream(t, nc, "busy."+name, inProcessAck)
			_, err = publish("busy." + name)
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
				t.Fatalf("write always refused as in process: err %v, want the stream's 10164", err)
			}
			if n := len(sent()); n < 2 || n > 10 {
				t.Fatalf("a write always refused as in process was sent %d times, want a few (2-10)", n)
			}

			// Another writer was first: not sent again.
			sent = scriptedStream(t, nc, "lost."+name, wrongLast, stored)
			_, err = publish("lost." + name)
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
				t.Fatalf("write refused for another last sequence: err %v, want the stream's 10071", err)
			}
			if n := len(sent()); n != 1 {
				t.Fatalf("a write refused for another last sequence was sent %d times, want once", n)
			}
		})
	}
}
