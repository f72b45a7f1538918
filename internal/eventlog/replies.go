package eventlog

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replies sends a Publisher's writes as requests with replies of its own:
// one subscription to <inbox>.* made at the first write, each write's
// reply subject <inbox>.<token>, the reply matched back to its write by
// the token in a map, each caller waiting on a pooled call (its message,
// headers, channel and timer kept for the next write). It is the request
// NATS's RequestMsg makes, without that path's per-write costs (a random
// token and a string-keyed map shared with every other request of the
// connection, a channel, the headers' map, a timer from a shared pool):
// measured, session 21 (issue 14): −4 to −11% of a single run's CPU per
// step, 5 of 5 pairs. Every write is still sent at once by its caller, and
// its caller released by its own reply only.
//
// Group commit across writers (session 19's shape d: writes made while
// others are in flight wait and leave together) was built on this and
// measured in the governed step: fewer system calls, no CPU measurably
// saved at 64 runs, fewer steps/s at 256; not kept (docs/performance.md,
// "Session 21 (perf21)").
type replies struct {
	nc *nats.Conn

	start    sync.Once
	startErr error
	prefix   string // a write's reply subject is prefix + its token

	mu      sync.Mutex
	token   uint64           // the last token given
	waiting map[uint64]*call // sent, not answered yet
	stopped error            // set when the replies' subscription closed
}

// call is one write through replies.
type call struct {
	m       nats.Msg
	lastSeq [1]string
	msgID   [1]string

	token uint64
	done  chan struct{} // one answer, buffered
	resp  *nats.Msg
	err   error
	timer *time.Timer
}

var calls = sync.Pool{New: func() any {
	c := &call{m: nats.Msg{Header: make(nats.Header, 2)}, done: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	c.timer.Stop()
	return c
}}

// fill makes c the request for one write.
func (c *call) fill(subject string, data []byte, msgID string, lastSeq uint64) {
	c.lastSeq[0] = strconv.FormatUint(lastSeq, 10)
	c.m.Header[jetstream.ExpectedLastSubjSeqHeader] = c.lastSeq[:]
	if msgID != "" {
		c.msgID[0] = msgID
		c.m.Header[jetstream.MsgIDHeader] = c.msgID[:]
	} else {
		delete(c.m.Header, jetstream.MsgIDHeader)
	}
	c.m.Subject, c.m.Data = subject, data
}

// put returns c to the pool holding nothing of its write; nobody else
// holds it then (a call leaves waiting before its caller is told).
func (c *call) put() {
	c.m.Subject, c.m.Reply, c.m.Data, c.lastSeq[0], c.msgID[0] = "", "", nil, "", ""
	c.resp, c.err, c.token = nil, nil, 0
	calls.Put(c)
}

// begin subscribes to the replies, once.
func (g *replies) begin() error {
	g.start.Do(func() {
		g.prefix = g.nc.NewInbox() + "."
		g.waiting = map[uint64]*call{}
		sub, err := g.nc.Subscribe(g.prefix+"*", g.onReply)
		if err == nil {
			// Replies are never dropped as a slow consumer's: each
			// has a caller waiting.
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			if sub != nil {
				_ = sub.Unsubscribe()
			}
			g.startErr = err
			return
		}
		sub.SetClosedHandler(func(string) { g.stop(nats.ErrConnectionClosed) })
	})
	return g.startErr
}

// request sends one write and waits for its reply: while b's context is
// not done, or when it has none until b's deadline. The errors are
// RequestMsg's: nats.ErrNoResponders, nats.ErrTimeout at the deadline (the
// context's own error when it ends first), the connection's error when
// the write cannot be sent.
func (g *replies) request(b bound, subject string, data []byte, msgID string, lastSeq uint64) (*nats.Msg, error) {
	c := calls.Get().(*call)
	defer c.put()
	c.fill(subject, data, msgID, lastSeq)

	g.mu.Lock()
	if g.stopped != nil {
		g.mu.Unlock()
		return nil, g.stopped
	}
	g.token++
	c.token = g.token
	g.waiting[c.token] = c
	g.mu.Unlock()
	c.m.Reply = g.prefix + strconv.FormatUint(c.token, 10)
	if err := g.nc.PublishMsg(&c.m); err != nil {
		return g.giveUp(c, err)
	}

	if b.ctx != nil {
		select {
		case <-c.done:
			return c.resp, c.err
		case <-b.ctx.Done():
			return g.giveUp(c, b.ctx.Err())
		}
	}
	c.timer.Reset(time.Until(b.deadline))
	select {
	case <-c.done:
		c.timer.Stop()
		return c.resp, c.err
	case <-c.timer.C:
		return g.giveUp(c, nats.ErrTimeout)
	}
}

// onReply is a write's acknowledgement (or the server's "no responders"),
// matched to its write by the reply subject's token.
func (g *replies) onReply(m *nats.Msg) {
	token, err := strconv.ParseUint(m.Subject[min(len(g.prefix), len(m.Subject)):], 10, 64)
	if err != nil {
		return
	}
	var rerr error
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		rerr = nats.ErrNoResponders
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.waiting[token]
	if c == nil {
		return // its caller gave up
	}
	delete(g.waiting, token)
	c.resp, c.err = m, rerr
	c.done <- struct{}{}
}

// giveUp ends c's wait with err unless its reply came in meanwhile.
func (g *replies) giveUp(c *call, err error) (*nats.Msg, error) {
	g.mu.Lock()
	if g.waiting[c.token] != c {
		g.mu.Unlock()
		<-c.done // answered meanwhile
		return c.resp, c.err
	}
	delete(g.waiting, c.token)
	g.mu.Unlock()
	return nil, err
}

// stop fails every write waiting (the connection closed) and every later
// one.
func (g *replies) stop(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = err
	for token, c := range g.waiting {
		delete(g.waiting, token)
		c.resp, c.err = nil, err
		c.done <- struct{}{}
	}
}
