package testutil

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// AckLoser forwards NATS client connections to a server and reads the
// protocol as it passes, so that it can lose the answer to one publish: a
// write JetStream stored (a record created, an event appended) whose
// acknowledgement never reaches its writer, which times out. That is what
// a write "timed out but stored" looks like to a client (a stream leader
// change, a connection dropped after the write), made deterministic.
//
// Only plaintext connections are read (the test servers'); the server's
// INFO is passed on unchanged.
type AckLoser struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	match func(subject string, body []byte) bool // the publish whose answer to lose; nil: none
	lost  map[string]bool                        // reply subjects whose answer is to be lost
	hold  func(subject string, body []byte) bool // the publish to hold back; nil: none
	held  chan struct{}                          // closed when the held publish arrived
	let   chan struct{}                          // closed to let it (and what follows) through
	letFn func()                                 // closes let once
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	// Lost receives the subject of each publish whose answer was lost.
	Lost chan string
}

// NewAckLoser listens on 127.0.0.1 (a free port) and forwards to target
// (host:port of a NATS server); it is closed when the test ends.
func NewAckLoser(tb testing.TB, target string) *AckLoser {
	tb.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("NATS proxy listen: %v", err)
	}
	p := &AckLoser{ln: ln, target: target, lost: map[string]bool{}, conns: map[net.Conn]struct{}{}, Lost: make(chan string, 16)}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// URL is the proxy's NATS URL.
func (p *AckLoser) URL() string { return "nats://" + p.ln.Addr().String() }

// LoseNext makes the proxy lose the answer to the next publish (with a
// reply subject) whose subject and body match: the publish itself goes
// through. Once one answer was lost the proxy forwards everything again.
func (p *AckLoser) LoseNext(match func(subject string, body []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
}

// HoldNext holds back the next publish whose subject and body match, and
// everything its client sends after it, until let is called: the client
// as a paused process sees it (its writes go nowhere, it hears what the
// server sends). held is closed once the publish arrived.
func (p *AckLoser) HoldNext(match func(subject string, body []byte) bool) (held <-chan struct{}, let func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold, p.held, p.let = match, make(chan struct{}), make(chan struct{})
	var once sync.Once
	letCh := p.let
	p.letFn = func() { once.Do(func() { close(letCh) }) }
	return p.held, p.letFn
}

// holding returns the channel to wait on before forwarding a publish that
// matches the hold (nil when it does not).
func (p *AckLoser) holding(subject string, body []byte) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil || !p.hold(subject, body) {
		return nil
	}
	p.hold = nil
	close(p.held)
	return p.let
}

func (p *AckLoser) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	if p.letFn != nil {
		p.letFn()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *AckLoser) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		out, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		done := func() {
			p.mu.Lock()
			delete(p.conns, in)
			delete(p.conns, out)
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			p.wg.Done()
		}
		go func() { defer done(); _ = p.clientToServer(out, in) }()
		go func() { defer done(); _ = p.serverToClient(in, out) }()
	}
}

// clientToServer forwards the client's protocol, noting the reply subject
// of the publish whose answer is to be lost.
func (p *AckLoser) clientToServer(dst io.Writer, src io.Reader) error {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		f := bytes.Fields(line)
		var payload []byte
		if len(f) > 0 {
			switch op := string(bytes.ToUpper(f[0])); op {
			case "PUB", "HPUB":
				// PUB subject [reply] size; HPUB subject [reply] hdrsize size.
				args := f[1:]
				size, hdr, err := sizes(args, op == "HPUB")
				if err != nil {
					return err
				}
				if payload, err = readPayload(r, size); err != nil {
					return err
				}
				nameless := 2
				if op == "HPUB" {
					nameless = 3
				}
				if len(args) == nameless+1 {
					p.watch(string(args[0]), string(args[1]), payload[hdr:size])
				}
				if wait := p.holding(string(args[0]), payload[hdr:size]); wait != nil {
					<-wait
				}
			}
		}
		if _, err := dst.Write(line); err != nil {
			return err
		}
		if payload != nil {
			if _, err := dst.Write(payload); err != nil {
				return err
			}
		}
	}
}

// watch notes reply as an answer to lose if the publish matches.
func (p *AckLoser) watch(subject, reply string, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.match != nil && p.match(subject, body) {
		p.match = nil
		p.lost[reply] = true
		select {
		case p.Lost <- subject:
		default:
		}
	}
}

// serverToClient forwards the server's protocol, but for the message
// answering the publish whose answer is to be lost.
func (p *AckLoser) serverToClient(dst io.Writer, src io.Reader) error {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		f := bytes.Fields(line)
		var payload []byte
		drop := false
		if len(f) > 0 {
			switch op := string(bytes.ToUpper(f[0])); op {
			case "MSG", "HMSG":
				// MSG subject sid [reply] size; HMSG subject sid [reply] hdrsize size.
				size, _, err := sizes(f[2:], op == "HMSG")
				if err != nil {
					return err
				}
				if payload, err = readPayload(r, size); err != nil {
					return err
				}
				p.mu.Lock()
				if drop = p.lost[string(f[1])]; drop {
					delete(p.lost, string(f[1]))
				}
				p.mu.Unlock()
			}
		}
		if drop {
			continue
		}
		if _, err := dst.Write(line); err != nil {
			return err
		}
		if payload != nil {
			if _, err := dst.Write(payload); err != nil {
				return err
			}
		}
	}
}

// sizes reads the trailing size fields of a PUB/MSG (one: the total) or an
// HPUB/HMSG (two: the headers' and the total) and returns the total and
// the headers' size.
func sizes(args [][]byte, headers bool) (total, hdr int, err error) {
	need := 1
	if headers {
		need = 2
	}
	if len(args) < need {
		return 0, 0, fmt.Errorf("NATS proxy: short operation %q", bytes.Join(args, []byte(" ")))
	}
	total, err = strconv.Atoi(string(args[len(args)-1]))
	if err == nil && headers {
		hdr, err = strconv.Atoi(string(args[len(args)-2]))
	}
	if err != nil || total < 0 || hdr < 0 || hdr > total {
		return 0, 0, fmt.Errorf("NATS proxy: bad sizes in %q", bytes.Join(args, []byte(" ")))
	}
	return total, hdr, nil
}

// readPayload reads a payload of size bytes and its CRLF.
func readPayload(r *bufio.Reader, size int) ([]byte, error) {
	buf := make([]byte, size+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
