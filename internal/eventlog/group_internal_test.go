package eventlog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// until waits, yielding, until cond holds (under p.group.mu).
func until(t *testing.T, p *Publisher, cond func(g *committer) bool) {
	t.Helper()
	for {
		p.group.mu.Lock()
		ok := cond(p.group)
		p.group.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// fill starts maxGroupsInFlight writes, grp.a0, grp.a1, ..., each a group
// of its own sent at once, and returns their results and messages as the
// server delivered them.
func fill(t *testing.T, p *Publisher, st *stand, timeout time.Duration) ([]chan result, []*nats.Msg) {
	t.Helper()
	var chs []chan result
	var ms []*nats.Msg
	for i := range maxGroupsInFlight {
		subj := fmt.Sprintf("grp.a%d", i)
		chs = append(chs, startWrite(p, subj, timeout))
		m := st.next()
		if m.Subject != subj || string(m.Data) != subj || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "7" || m.Header.Get(jetstream.MsgIDHeader) != "id-"+subj {
			t.Fatalf("write %d = %s %q %v", i, m.Subject, m.Data, m.Header)
		}
		ms = append(ms, m)
	}
	return chs, ms
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

// Writes made while a write is in flight wait and leave together when
// its acknowledgement is in, each as its own request (its subject, id and
// expected sequence), in the order they were made; each caller gets its
// own acknowledgement or error, matched by its reply, never another's,
// and not before it. Fails on main, which has no group commit: the
// writes there go out at once, each on its own.
func TestGroupCommitHoldsWritesBehindTheGroupInFlight(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	a, ma := fill(t, p, st, 10*time.Second)
	var rest []chan result
	for i, subj := range []string{"grp.b", "grp.c", "grp.d"} {
		rest = append(rest, startWrite(p, subj, 10*time.Second))
		until(t, p, func(g *committer) bool { return len(g.queue) == i+1 })
	}
	if out := nc.Stats().OutMsgs; out != maxGroupsInFlight {
		t.Fatalf("%d messages sent while %d groups were in flight; want those alone", out, maxGroupsInFlight)
	}
	for i := range a {
		if !pending(a[i]) {
			t.Fatal("a caller released before its acknowledgement")
		}
	}
	// The last group answered: the queue goes.
	last := len(a) - 1
	st.ack(ma[last], 11)
	if r := <-a[last]; r.err != nil || r.ack.Seq != 11 {
		t.Fatalf("grp.a%d = %+v, %v; want seq 11", last, r.ack, r.err)
	}
	// The queue left as one group, in order.
	var group []*nats.Msg
	for _, want := range []string{"grp.b", "grp.c", "grp.d"} {
		m := st.next()
		if m.Subject != want || string(m.Data) != want || m.Header.Get(jetstream.MsgIDHeader) != "id-"+want {
			t.Fatalf("write %q %q reached the server; want %s next", m.Subject, m.Data, want)
		}
		group = append(group, m)
	}
	// Answered out of order: each caller gets its own, only its own.
	st.ack(group[2], 14)
	if r := <-rest[2]; r.err != nil || r.ack.Seq != 14 {
		t.Fatalf("grp.d = %+v, %v; want seq 14", r.ack, r.err)
	}
	if !pending(rest[0]) || !pending(rest[1]) {
		t.Fatal("a caller released by another write's acknowledgement")
	}
	if err := group[0].Respond([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`)); err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	if r := <-rest[0]; !errors.As(r.err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("grp.b = %+v, %v; want the stream's refusal", r.ack, r.err)
	}
	if !pending(rest[1]) {
		t.Fatal("grp.c released by another write's refusal")
	}
	st.ack(group[1], 13)
	if r := <-rest[1]; r.err != nil || r.ack.Seq != 13 {
		t.Fatalf("grp.c = %+v, %v; want seq 13", r.ack, r.err)
	}
	for i := range last {
		st.ack(ma[i], uint64(20+i))
		if r := <-a[i]; r.err != nil || r.ack.Seq != uint64(20+i) {
			t.Fatalf("grp.a%d = %+v, %v", i, r.ack, r.err)
		}
	}
	// Nothing in flight: the next write goes at once, by its caller.
	e := startWrite(p, "grp.e", 10*time.Second)
	me := st.next()
	st.ack(me, 15)
	if r := <-e; r.err != nil || r.ack.Seq != 15 {
		t.Fatalf("grp.e = %+v, %v", r.ack, r.err)
	}
}

// A write whose time is up while it waits behind the group in flight is
// taken out of the queue and never sent (ErrNotSent: it cannot have been
// stored); the others of the queue still go when the group is answered.
func TestGroupCommitQueuedWriteOutOfTimeIsNotSent(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	a, ma := fill(t, p, st, 10*time.Second)
	// Shorter than groupStall: it is still queued when its time is up.
	b := startWrite(p, "grp.b", groupStall/5)
	until(t, p, func(g *committer) bool { return len(g.queue) == 1 })
	c := startWrite(p, "grp.c", 10*time.Second)
	r := <-b
	if !errors.Is(r.err, ErrNotSent) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("queued write out of time = %+v, %v; want not sent, deadline exceeded", r.ack, r.err)
	}
	st.ack(ma[0], 1)
	if r := <-a[0]; r.err != nil || r.ack.Seq != 1 {
		t.Fatalf("grp.a0 = %+v, %v", r.ack, r.err)
	}
	mc := st.next()
	if mc.Subject != "grp.c" {
		t.Fatalf("%s reached the server after the write out of time; want grp.c", mc.Subject)
	}
	st.ack(mc, 2)
	if r := <-c; r.err != nil || r.ack.Seq != 2 {
		t.Fatalf("grp.c = %+v, %v", r.ack, r.err)
	}
	if out := nc.Stats().OutMsgs; out != maxGroupsInFlight+1 {
		t.Fatalf("%d messages sent; want the groups in flight and grp.c", out)
	}
}

// A group whose acknowledgement does not come (lost with a connection)
// holds the queue back only groupStall: then the queue is sent, and its
// writes are answered as any others.
func TestGroupCommitStalledGroupDoesNotHoldTheQueue(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	a, _ := fill(t, p, st, 10*time.Second) // never answered
	b := startWrite(p, "grp.b", 10*time.Second)
	mb := st.next()
	if mb.Subject != "grp.b" {
		t.Fatalf("%s sent; want grp.b", mb.Subject)
	}
	st.ack(mb, 2)
	if r := <-b; r.err != nil || r.ack.Seq != 2 {
		t.Fatalf("grp.b = %+v, %v", r.ack, r.err)
	}
	// The oldest lost group was given up for b's: the next write finds
	// room and goes at once.
	c := startWrite(p, "grp.c", 10*time.Second)
	mc := st.next()
	st.ack(mc, 3)
	if r := <-c; r.err != nil || r.ack.Seq != 3 {
		t.Fatalf("grp.c = %+v, %v", r.ack, r.err)
	}
	for i := range a {
		if !pending(a[i]) {
			t.Fatal("an unanswered write's caller was released")
		}
	}
}

// A connection closed fails every write waiting, the one in flight and
// the ones queued, at once, and every later write.
func TestGroupCommitClosedConnectionFailsTheWritesWaiting(t *testing.T) {
	s := testutil.RunJetStream(t)
	nc := testutil.Connect(t, s)
	st := newStand(t, testutil.Connect(t, s))
	p := NewPublisher(nc, "S")

	a, _ := fill(t, p, st, time.Minute)
	b := startWrite(p, "grp.b", time.Minute)
	until(t, p, func(g *committer) bool { return len(g.queue) == 1 })
	nc.Close()
	for _, ch := range append(a, b) {
		if r := <-ch; !errors.Is(r.err, nats.ErrConnectionClosed) {
			t.Fatalf("write on a closed connection = %+v, %v", r.ack, r.err)
		}
	}
	if _, err := p.PublishWithin(time.Minute, "grp.c", nil, "", 0); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("write after the close = %v", err)
	}
}

// Many chains written at once through one Publisher on the embedded
// JetStream server, in groups: every append lands once, each chain's
// events in order at the stream sequences their writers were told.
func TestGroupCommitManyChainsOnTheStream(t *testing.T) {
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
