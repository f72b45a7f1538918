package debugger_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/debugger"
)

// growingSource is one live chain in memory that a test appends to and
// removes.
type growingSource struct {
	mu      sync.Mutex
	events  []lctl.Event
	gone    bool
	changed chan struct{}
}

func newGrowingSource(events []lctl.Event) *growingSource {
	return &growingSource{events: events, changed: make(chan struct{})}
}

func (g *growingSource) Mode() string { return "cluster" }

func (g *growingSource) Chains(ctx context.Context) ([]debugger.ChainInfo, error) {
	c, err := g.Chain(ctx, "grow")
	if errors.Is(err, debugger.ErrChainNotFound) {
		return []debugger.ChainInfo{}, nil
	}
	if err != nil {
		return nil, err
	}
	return []debugger.ChainInfo{c.ChainInfo}, nil
}

func (g *growingSource) Chain(_ context.Context, id string) (*debugger.Chain, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id != "grow" || g.gone {
		return nil, debugger.ErrChainNotFound
	}
	t := lctl.NewTimeline(id, 10)
	for _, e := range g.events {
		t.Append(e)
	}
	return &debugger.Chain{ChainInfo: debugger.ChainInfo{ID: id, Events: len(g.events), Live: true}, Events: t.Events(), Timeline: t, Sorted: true}, nil
}

func (g *growingSource) Watch(string) (uint64, <-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return uint64(len(g.events)), g.changed, false
}

func (g *growingSource) change(f func()) {
	g.mu.Lock()
	f()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

func TestLiveHeartbeatGoneAndClose(t *testing.T) {
	t.Parallel()
	events := runChain("grow")
	src := newGrowingSource(events[:2])
	h, err := debugger.New(debugger.Options{Source: src, PingEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	read := func(path string) (<-chan string, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("live: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
		lines := make(chan string, 1000)
		go func() {
			defer close(lines)
			defer func() { _ = resp.Body.Close() }()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return lines, cancel
	}
	waitLine := func(lines <-chan string, want string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended before %q", want)
				}
				if l == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %q in time", want)
			}
		}
	}
	waitEnd := func(lines <-chan string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case _, ok := <-lines:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatal("stream did not end")
			}
		}
	}

	lines, cancel := read("/api/chains/grow/live")
	defer cancel()
	waitLine(lines, "id: 1")
	waitLine(lines, "id: 2")
	waitLine(lines, "event: ping")
	src.change(func() { src.events = events[:3] })
	waitLine(lines, "id: 3")
	// The chain goes away: "gone", and the stream ends.
	src.change(func() { src.gone = true })
	waitLine(lines, "event: gone")
	waitEnd(lines)

	// Close (server shutdown) ends open streams and refuses new ones.
	src.change(func() { src.gone = false })
	lines2, cancel2 := read("/api/chains/grow/live?from=2")
	defer cancel2()
	waitLine(lines2, "id: 3")
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	waitEnd(lines2)
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	if h.ActiveStreams() != 0 {
		t.Fatalf("%d streams after Close", h.ActiveStreams())
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/api/chains/grow/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("live after Close: %d", resp.StatusCode)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("live after Close: %s", resp.Header.Get("Content-Type"))
	}
}

// TestFlowOfAChainThatChangesUnderConcurrentReads: readers ask for a
// chain's flowchart while the chain grows and is cut back. The flow
// cached per chain is built under its own lock; every page must be the
// page of the chain as that request saw it (the one a fresh handler
// draws for that many events), never a flow built from another version
// of the chain or one that applied events twice. The race detector
// checks the cache's own fields.
func TestFlowOfAChainThatChangesUnderConcurrentReads(t *testing.T) {
	t.Parallel()
	events := runChain("grow")
	lengths := []int{len(events), 9, len(events) - 4, 3, len(events)}
	want := map[int]string{}
	for _, n := range lengths {
		h, err := debugger.New(debugger.Options{Source: newGrowingSource(events[:n])})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		want[n] = string(get(t, srv.URL+"/api/chains/grow/flow").body)
		srv.Close()
		h.Close()
	}
	src := newGrowingSource(events)
	h, err := debugger.New(debugger.Options{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()

	const readers, reads = 4, 60
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reads {
				resp, err := http.Get(srv.URL + "/api/chains/grow/flow")
				if err != nil {
					errs <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				var p debugger.FlowPage
				if err := json.Unmarshal(body, &p); err != nil {
					errs <- fmt.Errorf("%w: %s", err, body)
					return
				}
				if w, ok := want[p.TotalEvents]; !ok || string(body) != w {
					var wp debugger.FlowPage
					_ = json.Unmarshal([]byte(w), &wp)
					errs <- fmt.Errorf("a flow of %d events has %d nodes, edges %v; a fresh handler's: %d nodes, edges %v",
						p.TotalEvents, p.TotalNodes, p.Edges, wp.TotalNodes, wp.Edges)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			return
		default:
		}
		n := lengths[i%len(lengths)]
		src.change(func() { src.events = events[:n] })
		runtime.Gosched()
	}
}
