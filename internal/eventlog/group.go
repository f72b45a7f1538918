package eventlog

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Group commit (issue 14, session 19's shape d): a Publisher's writes
// leave in groups. While a group of writes is in flight (sent, not every
// one acknowledged), the writes that come in wait in a queue; when the
// group's last acknowledgement is in, the whole queue is sent as the next
// group, its messages one after the other on the connection, so that they
// leave in few socket writes and the server reads, stores and acknowledges
// them in few passes (its acknowledgements come back together too). Each
// write is still its own request: its own subject, message id, expected
// last subject sequence and reply subject, its own acknowledgement matched
// by the reply's token, and its caller released when that acknowledgement
// (or its own failure) is in, never before, and never by another write's.
// A caller has at most one write in flight per subject (a ChainWriter
// holds its lock across an append; a step record's writes follow each
// other), and the queue keeps the order writes came in, so a subject's
// writes are sent in the order they were made, as before.
//
// When nothing is in flight a write is sent at once by its caller: one run
// alone waits for nothing more than before. A group whose
// acknowledgements do not all come (a connection lost and made again)
// holds the queue back at most groupStall; then the queue is sent
// anyway, and the lost writes fail at their callers' deadlines as before.
type committer struct {
	nc *nats.Conn

	start    sync.Once
	startErr error
	prefix   string // a write's reply subject is prefix + its token
	sub      *nats.Subscription

	mu       sync.Mutex
	token    uint64           // the last token given
	waiting  map[uint64]*call // sent or queued, not answered yet
	queue    []*call          // waiting for the group in flight
	gen      uint64           // the last group sent (its calls carry it)
	left     map[uint64]int   // groups in flight: their calls not answered yet
	oldest   uint64           // the oldest group that may be in flight
	stopped  error            // set when the replies' subscription closed
	spare    []*call          // the queue's last backing array, reused
}

// maxGroupsInFlight is how many groups may be in flight at once: a
// write finding fewer goes at once (so that writes wait only when
// others are already waiting for the server), the rest queue.
const maxGroupsInFlight = 2

// groupStall is how long a queued write waits for the group in flight
// before it sends the queue itself: far above a group's round trip on a
// working connection, so that only lost acknowledgements reach it.
const groupStall = 50 * time.Millisecond

// call is one write through the committer.
type call struct {
	m       nats.Msg
	lastSeq [1]string
	msgID   [1]string

	token uint64
	gen   uint64 // the group it was sent in (0: queued)
	done  chan struct{}
	resp  *nats.Msg
	err   error
	// refs: the caller's, and, while a sender other than the caller has
	// it to publish, the sender's; the last one out returns the call to
	// calls.
	refs  atomic.Int32
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

// release drops one reference; the last returns c to the pool holding
// nothing of its write.
func (c *call) release() {
	if c.refs.Add(-1) != 0 {
		return
	}
	c.m.Subject, c.m.Reply, c.m.Data, c.lastSeq[0], c.msgID[0] = "", "", nil, "", ""
	c.resp, c.err, c.gen, c.token = nil, nil, 0, 0
	calls.Put(c)
}

// begin subscribes to the replies, once.
func (g *committer) begin() error {
	g.start.Do(func() {
		g.prefix = g.nc.NewInbox() + "."
		g.waiting = map[uint64]*call{}
		g.left = map[uint64]int{}
		sub, err := g.nc.Subscribe(g.prefix+"*", g.onReply)
		if err == nil {
			// Acknowledgements are never dropped as a slow consumer's:
			// each has a caller waiting.
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
		g.sub = sub
	})
	return g.startErr
}

// request sends one write and waits for its reply: while b's context
// is not done, or when it has none until b's deadline. The errors are RequestMsg's:
// nats.ErrNoResponders, nats.ErrTimeout at the deadline (ctx's own error
// when ctx ends first), the connection's error when it cannot be sent;
// one never sent (still queued) is ErrNotSent wrapping the timeout's.
func (g *committer) request(b bound, subject string, data []byte, msgID string, lastSeq uint64) (*nats.Msg, error) {
	c := calls.Get().(*call)
	c.fill(subject, data, msgID, lastSeq)
	c.refs.Store(1)
	defer c.release()

	g.mu.Lock()
	if g.stopped != nil {
		g.mu.Unlock()
		return nil, g.stopped
	}
	g.token++
	c.token = g.token
	g.waiting[c.token] = c
	var group []*call
	if len(g.left) < maxGroupsInFlight {
		// Room for a group: this write is one, sent by its caller.
		group = g.takeLocked(c)
	} else {
		g.queue = append(g.queue, c)
	}
	g.mu.Unlock()
	if group != nil {
		g.send(group, c)
	}

	var ctxDone <-chan struct{}
	if b.ctx != nil {
		ctxDone = b.ctx.Done()
	}
	left := func() time.Duration {
		if b.ctx != nil {
			return time.Duration(1<<63 - 1)
		}
		return time.Until(b.deadline)
	}
	wait := left()
	// Queued, with time left past groupStall: wait that long first.
	stallCheck := group == nil && wait > groupStall
	if stallCheck {
		wait = groupStall
	}
	for {
		c.timer.Reset(wait)
		select {
		case <-c.done:
			c.timer.Stop()
			return c.resp, c.err
		case <-ctxDone:
			c.timer.Stop()
			return g.giveUp(c, b.ctx.Err())
		case <-c.timer.C:
		}
		if stallCheck {
			// The group in flight has not all come back in groupStall:
			// if this write is still queued, the queue goes now.
			stallCheck = false
			g.mu.Lock()
			var group []*call
			if c.gen == 0 && g.waiting[c.token] == c {
				// The oldest group in flight is taken for lost.
				for ; g.oldest <= g.gen; g.oldest++ {
					if _, ok := g.left[g.oldest]; ok {
						delete(g.left, g.oldest)
						break
					}
				}
				group = g.takeLocked(nil)
			}
			g.mu.Unlock()
			if group != nil {
				g.send(group, nil)
			}
			if wait = left(); wait > 0 {
				continue
			}
		}
		return g.giveUp(c, nats.ErrTimeout)
	}
}

// takeLocked makes the queue (and first, when not nil, before it) the
// group in flight and returns it for sending; g.mu is held. Calls other
// than self get a reference for their sender.
func (g *committer) takeLocked(self *call) []*call {
	group := g.queue
	if self != nil {
		group = append(group, self)
	}
	g.queue = g.spare[:0]
	g.spare = nil
	g.gen++
	if len(group) > 0 {
		g.left[g.gen] = len(group)
	}
	for _, c := range group {
		c.gen = g.gen
		if c != self {
			c.refs.Add(1)
		}
	}
	return group
}

// send publishes group's writes in order; self is the caller's own call
// (nil: the caller has none in it). A write that cannot be published is
// answered with the connection's error at once.
func (g *committer) send(group []*call, self *call) {
	for len(group) > 0 {
		var next []*call
		for _, c := range group {
			c.m.Reply = g.prefix + strconv.FormatUint(c.token, 10)
			if err := g.nc.PublishMsg(&c.m); err != nil {
				if n := g.answer(c.token, nil, err); n != nil {
					next = n
				}
			}
			if c != self {
				c.release()
			}
		}
		g.mu.Lock()
		if g.spare == nil {
			g.spare = group[:0]
		}
		g.mu.Unlock()
		group, self = next, nil
	}
}

// onReply is a write's acknowledgement (or the server's "no responders"),
// matched to its write by the reply subject's token.
func (g *committer) onReply(m *nats.Msg) {
	token, err := strconv.ParseUint(m.Subject[min(len(g.prefix), len(m.Subject)):], 10, 64)
	if err != nil {
		return
	}
	var rerr error
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		rerr = nats.ErrNoResponders
	}
	if group := g.answer(token, m, rerr); group != nil {
		g.send(group, nil)
	}
}

// answer gives the write of token its reply (or error) and releases its
// caller; when that was the last write of the group in flight, the
// queue becomes the next group and is returned to be sent.
func (g *committer) answer(token uint64, resp *nats.Msg, err error) []*call {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.waiting[token]
	if c == nil {
		return nil // its caller gave up
	}
	delete(g.waiting, token)
	next := g.doneLocked(c)
	// c is its caller's once told: nothing of it is read after.
	c.resp, c.err = resp, err
	c.done <- struct{}{}
	return next
}

// doneLocked counts c's write as answered in its group; g.mu is held.
// It returns the next group to send when c was the last of the group in
// flight and writes are queued.
func (g *committer) doneLocked(c *call) []*call {
	left, ok := g.left[c.gen]
	if !ok {
		return nil
	}
	if left--; left > 0 {
		g.left[c.gen] = left
		return nil
	}
	delete(g.left, c.gen)
	if len(g.queue) == 0 {
		return nil
	}
	return g.takeLocked(nil)
}

// giveUp ends c's wait with err unless its reply came in meanwhile. A
// write still queued is taken out and never sent (ErrNotSent).
func (g *committer) giveUp(c *call, err error) (*nats.Msg, error) {
	g.mu.Lock()
	if g.waiting[c.token] != c {
		g.mu.Unlock()
		<-c.done // answered meanwhile
		return c.resp, c.err
	}
	delete(g.waiting, c.token)
	var group []*call
	if c.gen == 0 {
		for i, q := range g.queue {
			if q == c {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
		err = notSentErr(err)
	} else {
		group = g.doneLocked(c)
	}
	g.mu.Unlock()
	if group != nil {
		g.send(group, nil)
	}
	return nil, err
}

// notSentErr marks a timeout of a write that was never sent.
func notSentErr(err error) error { return &notSent{err} }

type notSent struct{ err error }

func (e *notSent) Error() string { return ErrNotSent.Error() + ": " + e.err.Error() }
func (e *notSent) Unwrap() []error {
	return []error{ErrNotSent, e.err}
}

// stop fails every write waiting (the connection closed) and every later
// one.
func (g *committer) stop(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = err
	for token, c := range g.waiting {
		delete(g.waiting, token)
		c.resp, c.err = nil, err
		c.done <- struct{}{}
	}
	g.queue = nil
	clear(g.left)
}
