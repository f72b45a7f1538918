package eventlog

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

	"github.com/xct-dev/xct/internal/testutil"
)

// stand is a stream's stand-in on a real NATS server: it receives the
// Publisher's writes on grp.* and answers each when the test says, as
// the stream would (an acknowledgement with a sequence, or an error), so
// that the test decides when each write's acknowledgement comes back.
type stand struct {
	t   *testing.T
	sub *nats.Subscription
}

func newStand(t *testing.T, nc *nats.Conn) *stand {
	sub, err := nc.SubscribeSync("grp.*")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &stand{t: t, sub: sub}
}

// next is the next write the server delivered.
func (s *stand) next() *nats.Msg {
	s.t.Helper()
	m, err := s.sub.NextMsg(10 * time.Second)
	if err != nil {
		s.t.Fatalf("no write reached the server: %v", err)
	}
	return m
}

func (s *stand) ack(m *nats.Msg, seq uint64) {
	s.t.Helper()
	if err := m.Respond(fmt.Appendf(nil, `{"stream":"S","seq":%d}`, seq)); err != nil {
		s.t.Fatal(err)
	}
}

// result is what one write's caller got.
type result struct {
	ack PubAck
	err error
}

// startWrite starts a write of subject on p and returns where its result comes.
func startWrite(p *Publisher, subject string, timeout time.Duration) chan result {
	ch := make(chan result, 1)
	go func() {
		ack, err := p.PublishWithin(timeout, subject, []byte(subject), "id-"+subject, 7)
		ch <- result{ack, err}
	}()
	return ch
}

func pending(ch chan result) bool {
	select {
	case r := <-ch:
		ch <- r
		return false
	default:
		return true
	}
}

// Writes in flight at once, answered out of order: each caller gets its
// own acknowledgement or the stream's refusal, matched by its reply
// subject, never another's and not before it; each write is sent as
// made (subject, message id, expected sequence).
func TestRepliesEachCallerItsOwn(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	subjects := []string{"grp.a", "grp.b", "grp.c", "grp.d"}
	chs := map[string]chan result{}
	msgs := map[string]*nats.Msg{}
	for _, subj := range subjects {
		chs[subj] = startWrite(p, subj, 10*time.Second)
		m := st.next()
		if m.Subject != subj || string(m.Data) != subj || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "7" || m.Header.Get(jetstream.MsgIDHeader) != "id-"+subj {
			t.Fatalf("write = %s %q %v; want %s", m.Subject, m.Data, m.Header, subj)
		}
		msgs[subj] = m
	}
	st.ack(msgs["grp.d"], 14)
	if r := <-chs["grp.d"]; r.err != nil || r.ack.Seq != 14 {
		t.Fatalf("grp.d = %+v, %v; want seq 14", r.ack, r.err)
	}
	for _, subj := range subjects[:3] {
		if !pending(chs[subj]) {
			t.Fatalf("%s released by another write's acknowledgement", subj)
		}
	}
	if err := msgs["grp.b"].Respond([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`)); err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	if r := <-chs["grp.b"]; !errors.As(r.err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("grp.b = %+v, %v; want the stream's refusal", r.ack, r.err)
	}
	if !pending(chs["grp.a"]) || !pending(chs["grp.c"]) {
		t.Fatal("a caller released by another write's refusal")
	}
	st.ack(msgs["grp.c"], 13)
	st.ack(msgs["grp.a"], 11)
	for subj, want := range map[string]uint64{"grp.a": 11, "grp.c": 13} {
		if r := <-chs[subj]; r.err != nil || r.ack.Seq != want {
			t.Fatalf("%s = %+v, %v; want seq %d", subj, r.ack, r.err, want)
		}
	}
	// A reply that comes after its caller gave up is dropped; the
	// next write is answered as any.
	late := startWrite(p, "grp.e", time.Millisecond)
	me := st.next()
	if r := <-late; !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("unanswered write = %+v, %v; want deadline exceeded", r.ack, r.err)
	}
	st.ack(me, 15)
	f := startWrite(p, "grp.f", 10*time.Second)
	st.ack(st.next(), 16)
	if r := <-f; r.err != nil || r.ack.Seq != 16 {
		t.Fatalf("grp.f = %+v, %v", r.ack, r.err)
	}
}

// Under a context: a write answered, and one whose context is cancelled
// ends with the context's error.
func TestRepliesUnderAContext(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan result, 1)
	go func() {
		ack, err := p.Publish(ctx, "grp.a", []byte("a"), "", 0)
		ch <- result{ack, err}
	}()
	st.next()
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled write = %+v, %v", r.ack, r.err)
	}
	go func() {
		ack, err := p.Publish(context.Background(), "grp.b", []byte("b"), "", 0)
		ch <- result{ack, err}
	}()
	st.ack(st.next(), 2)
	if r := <-ch; r.err != nil || r.ack.Seq != 2 {
		t.Fatalf("grp.b = %+v, %v", r.ack, r.err)
	}
}

// A connection closed fails every write waiting at once, and every later
// write.
func TestRepliesClosedConnectionFailsTheWritesWaiting(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	a := startWrite(p, "grp.a", time.Minute)
	st.next()
	b := startWrite(p, "grp.b", time.Minute)
	st.next()
	nc.Close()
	for _, ch := range []chan result{a, b} {
		if r := <-ch; !errors.Is(r.err, nats.ErrConnectionClosed) {
			t.Fatalf("write on a closed connection = %+v, %v", r.ack, r.err)
		}
	}
	if _, err := p.PublishWithin(time.Minute, "grp.c", nil, "", 0); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("write after the close = %v", err)
	}
}

// Many chains written at once through one Publisher on the embedded
// JetStream server: every append lands once, each chain's
// events in order at the stream sequences their writers were told.
func TestRepliesManyChainsOnTheStream(t *testing.T) {
	s := testutil.RunJetStream(t)
	l, err := Open(context.Background(), testutil.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	const chains, per = 48, 30
	var wg sync.WaitGroup
	errs := make(chan error, chains)
	seqs := make([][]uint64, chains)
	for c := range chains {
		w, err := l.NewChainWriter(fmt.Sprintf("grp-%d", c))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range per {
				if i%3 == 2 {
					if _, err := w.AppendPackWithin(10*time.Second, []Draft{{Type: "step_start", Agent: "o", Data: map[string]any{"i": i}}, {Type: "verdict", Agent: "v", Data: map[string]any{"i": i}}}); err != nil {
						errs <- err
						return
					}
				} else if _, err := w.AppendWithin(10*time.Second, "note", "o", map[string]any{"i": i}); err != nil {
					errs <- err
					return
				}
				w.mu.Lock()
				seqs[c] = append(seqs[c], w.streamSeq)
				w.mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ctx := context.Background()
	for c := range chains {
		id := fmt.Sprintf("grp-%d", c)
		events, err := l.ReadChain(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := per + per/3; len(events) != want {
			t.Fatalf("chain %s holds %d events; want %d", id, len(events), want)
		}
		for i, e := range events {
			if e.Seq != uint64(i+1) {
				t.Fatalf("chain %s event %d has seq %d", id, i, e.Seq)
			}
		}
		// Each write's stream sequence is where the stream holds it.
		for _, seq := range seqs[c] {
			m, err := l.stream.GetMsg(ctx, seq)
			if err != nil || m.Subject != Subject(id) {
				t.Fatalf("chain %s: stream message %d is %v, %v", id, seq, m, err)
			}
		}
		if !strings.HasPrefix(id, "grp-") {
			t.Fatal(id)
		}
	}
}
