package tracer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/debugger"
	"github.com/xct-dev/xct/services/tracer"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event, data string
}

// sseStream reads a live stream into a channel; it is closed when the
// stream ends.
type sseStream struct {
	events <-chan sseEvent
	cancel context.CancelFunc
	status int
}

func openLive(t *testing.T, url string, hdr map[string]string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == 200 && !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("live: Content-Type %q", ct)
	}
	if resp.Header.Get("Content-Security-Policy") != debugger.ContentSecurityPolicy {
		t.Fatalf("live: no CSP")
	}
	ch := make(chan sseEvent, 100)
	go func() {
		defer close(ch)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					ch <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	s := &sseStream{events: ch, cancel: cancel, status: resp.StatusCode}
	t.Cleanup(cancel)
	return s
}

// next waits for the next lctl event of the stream.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatal("the live stream ended")
			}
			if e.event == "ping" {
				continue
			}
			return e
		case <-deadline:
			t.Fatal("no live event in time")
		}
	}
}

// ended waits for the stream to end.
func (s *sseStream) ended(t *testing.T) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the live stream did not end")
		}
	}
}

func httpJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %s: %v", url, raw, err)
	}
	return resp.StatusCode
}

func TestDebuggerOverLiveChains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.startTracerWith(t, tracer.Config{HTTPListen: "127.0.0.1:0"})
	base := "http://" + r.svc.HTTPAddr()
	w := writeRun(t, e.log, "live-1", 1) // 6 events
	r.waitFor(t, "live-1", 6)

	var info struct {
		Mode      string
		Chains    int
		Approvals bool
		Live      bool
	}
	if code := httpJSON(t, base+"/api/info", &info); code != 200 || info.Mode != "cluster" || info.Chains != 1 || info.Approvals || !info.Live {
		t.Fatalf("info %d %+v", code, info)
	}
	var list struct {
		Chains []struct {
			ID, Status string
			Events     int
		}
	}
	httpJSON(t, base+"/api/chains", &list)
	if len(list.Chains) != 1 || list.Chains[0].ID != "live-1" || list.Chains[0].Status != "completed" || list.Chains[0].Events != 6 {
		t.Fatalf("chains %+v", list)
	}
	var detail struct {
		Live   bool
		Verify struct{ OK bool }
	}
	httpJSON(t, base+"/api/chains/live-1", &detail)
	if !detail.Live || !detail.Verify.OK {
		t.Fatalf("detail %+v", detail)
	}
	var state struct {
		Seq          uint64
		SnapshotFrom uint64 `json:"snapshot_from"`
		Step         *struct{ Decision string }
	}
	httpJSON(t, base+"/api/chains/live-1/state?seq=4", &state)
	if state.Seq != 4 || state.Step == nil || state.Step.Decision != "allow" {
		t.Fatalf("state %+v", state)
	}
	var apiErr struct{ Error struct{ Code string } }
	if code := httpJSON(t, base+"/api/chains/nope", &apiErr); code != 404 || apiErr.Error.Code != "NOT_FOUND" {
		t.Fatalf("unknown chain: %d %+v", code, apiErr)
	}
	if code := httpJSON(t, base+"/api/approvals", &apiErr); code != 404 {
		t.Fatalf("approvals without a validator: %d", code)
	}

	// Live: everything after ?from=, then each event as it is stored.
	s := openLive(t, base+"/api/chains/live-1/live?from=4", nil)
	for _, want := range []string{"5", "6"} {
		if ev := s.next(t); ev.event != "lctl" || ev.id != want {
			t.Fatalf("got %+v, want event %s", ev, want)
		}
	}
	appendEvents(t, w, []ev{
		{"rollback_started", "orchestrator", map[string]any{"steps": []any{1.0}, "note": "<b>not markup</b>"}},
		{"rollback_finished", "orchestrator", map[string]any{"status": "done"}},
	})
	for _, want := range []string{"7", "8"} {
		ev := s.next(t)
		if ev.event != "lctl" || ev.id != want {
			t.Fatalf("got %+v, want event %s", ev, want)
		}
		var got struct {
			Seq  uint64
			Type string
			Hash string
		}
		if err := json.Unmarshal([]byte(ev.data), &got); err != nil || strconv.FormatUint(got.Seq, 10) != want || got.Hash == "" {
			t.Fatalf("event data %s: %v", ev.data, err)
		}
		if strings.Contains(ev.data, "<b>") {
			t.Fatalf("markup in the stream: %s", ev.data)
		}
	}

	// A client that reconnects with Last-Event-ID resumes after it.
	s2 := openLive(t, base+"/api/chains/live-1/live?from=0", map[string]string{"Last-Event-ID": "7"})
	if ev := s2.next(t); ev.id != "8" {
		t.Fatalf("resumed at %+v, want 8", ev)
	}

	// A client that goes away ends its stream on the server.
	testutil.Eventually(t, waitTimeout, func() error {
		if n := tracer.DebuggerStreams(r.svc); n != 2 {
			return fmt.Errorf("%d streams open, want 2", n)
		}
		return nil
	})
	s.cancel()
	s.ended(t)
	testutil.Eventually(t, waitTimeout, func() error {
		if n := tracer.DebuggerStreams(r.svc); n != 1 {
			return fmt.Errorf("%d streams open after a disconnect, want 1", n)
		}
		return nil
	})

	// Unknown chain and bad Last-Event-ID are refused before streaming.
	if code := httpJSON(t, base+"/api/chains/nope/live", &apiErr); code != 404 {
		t.Fatalf("live on an unknown chain: %d", code)
	}
	if code := httpJSONHeader(t, base+"/api/chains/live-1/live", "Last-Event-ID", "x", &apiErr); code != 400 {
		t.Fatalf("bad Last-Event-ID: %d", code)
	}

	// Stopping the tracer ends the open stream, and Stop does not wait out
	// its deadline for it.
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		stopped <- r.svc.Stop(ctx)
	}()
	s2.ended(t)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the tracer did not stop")
	}
	if n := tracer.DebuggerStreams(r.svc); n != 0 {
		t.Fatalf("%d streams open after stop", n)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/api/info", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("the HTTP listener still answers after stop")
	}
}

func httpJSONHeader(t *testing.T, url, k, v string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(k, v)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %s: %v", url, raw, err)
	}
	return resp.StatusCode
}

func TestDebuggerApprovalsNeedAReachableValidator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.startTracerWith(t, tracer.Config{HTTPListen: "127.0.0.1:0", ValidatorAddr: "127.0.0.1:1"})
	base := "http://" + r.svc.HTTPAddr()
	var info struct{ Approvals bool }
	httpJSON(t, base+"/api/info", &info)
	if !info.Approvals {
		t.Fatal("approvals off with a validator address")
	}
	var apiErr struct {
		Error struct{ Code, Message string }
	}
	if code := httpJSON(t, base+"/api/approvals", &apiErr); code != 503 || apiErr.Error.Code != "UNAVAILABLE" {
		t.Fatalf("validator down: %d %+v", code, apiErr)
	}
	// The chain list still answers without the pending counts.
	var list struct{ Chains []any }
	if code := httpJSON(t, base+"/api/chains", &list); code != 200 {
		t.Fatalf("chains with the validator down: %d", code)
	}
}

func TestDebuggerWithAuthentication(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(`
- {principal: alice, roles: [auditor], token: alice-secret-token}
- {principal: bob, roles: [approver], token: bob-secret-token}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(context.Background(), auth.Config{TokensFile: tokens}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	r := e.startTracerWith(t, tracer.Config{HTTPListen: "127.0.0.1:0", ValidatorAddr: "127.0.0.1:1", UIAuthorize: tracer.DebuggerAuthorizer(a)})
	base := "http://" + r.svc.HTTPAddr()
	writeRun(t, e.log, "authed", 1)
	r.waitFor(t, "authed", 6)

	call := func(method, path, token string, hdr map[string]string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"run_id":"authed","step":1,"approve":true}`)
		}
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var e struct{ Error struct{ Code string } }
		if resp.Header.Get("Content-Type") == "application/json; charset=utf-8" {
			_ = json.NewDecoder(resp.Body).Decode(&e)
		}
		return resp.StatusCode, e.Error.Code
	}
	csrf := map[string]string{"X-XCT-CSRF": "1", "Content-Type": "application/json"}
	for _, tc := range []struct {
		method, path, token string
		hdr                 map[string]string
		status              int
		code                string
	}{
		{"GET", "/api/chains", "", nil, 401, "UNAUTHENTICATED"},
		{"GET", "/api/chains", "not-a-token", nil, 401, "UNAUTHENTICATED"},
		{"GET", "/api/chains", "alice-secret-token", nil, 200, ""},
		{"GET", "/api/chains/authed/state?seq=3", "bob-secret-token", nil, 200, ""},
		{"GET", "/api/info", "", nil, 401, "UNAUTHENTICATED"},
		{"POST", "/api/approvals/decide", "alice-secret-token", csrf, 403, "PERMISSION_DENIED"},
		{"POST", "/api/approvals/decide", "", csrf, 401, "UNAUTHENTICATED"},
		// bob may approve: the call reaches the validator, which is down.
		{"POST", "/api/approvals/decide", "bob-secret-token", csrf, 503, "UNAVAILABLE"},
	} {
		status, code := call(tc.method, tc.path, tc.token, tc.hdr)
		if status != tc.status || code != tc.code {
			t.Errorf("%s %s as %q: %d %s, want %d %s", tc.method, tc.path, tc.token, status, code, tc.status, tc.code)
		}
	}
	// The page is static and loads without a token (it asks for one).
	if status, _ := call("GET", "/", "", nil); status != 200 {
		t.Errorf("page: %d", status)
	}
	// EventSource cannot send headers: the live stream takes the token in
	// the query.
	s := openLive(t, base+"/api/chains/authed/live?from=5&access_token=alice-secret-token", nil)
	if s.status != 200 {
		t.Fatalf("live with access_token: %d", s.status)
	}
	if ev := s.next(t); ev.id != "6" {
		t.Fatalf("live: %+v", ev)
	}
	if status, _ := call("GET", "/api/chains/authed/live?access_token=wrong", "", nil); status != 401 {
		t.Fatalf("live with a wrong token: %d", status)
	}
}
