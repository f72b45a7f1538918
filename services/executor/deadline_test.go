package executor

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/wire"
)

// Issue 12, session 11: a tool that takes longer than its deadline. A
// program killed at its deadline ran until then: it may have done some or
// all of what it was asked. Before the fix that was a definite TIMEOUT
// (the record FAILED), so a model retrying as told ran it again: the
// append below happened twice. Now, for a program that is neither
// read-only nor idempotent, the step is in doubt: the record says so, the
// same step asked again does not run, and a human settles it. A call that
// is read-only or idempotent stays a plain error (running it again is
// safe), as the executor's record of the call says.
func TestKilledAtItsDeadlineIsInDoubt(t *testing.T) {
	sb := newSandbox(t)
	s := shellServiceUnsandboxed(t, sb, time.Second)
	args := map[string]any{"argv": []any{"sh", "-c", "echo charged >> ledger.txt; sleep 1000"}}
	r := execStep(t, s, "append-1", "shell.exec", args)
	e := r.GetResponse().GetError()
	if e.GetCode() != string(wire.CodeTimeout) || e.GetDetails().AsMap()["outcome_unknown"] != true {
		t.Fatalf("a program killed at its deadline: %v", e)
	}
	rec, doubt, err := s.Step(context.Background(), "append-1")
	must(t, err)
	if !doubt || rec.GetState() != stateInDoubt {
		t.Fatalf("record %s (in doubt %v), want in doubt", stateName(rec.GetState()), doubt)
	}
	again := execStep(t, s, "append-1", "shell.exec", args)
	if c := again.GetResponse().GetError().GetCode(); c != string(wire.CodeInDoubt) || !again.GetReplayed() {
		t.Fatalf("asked again: %v", again)
	}
	data, err := os.ReadFile(filepath.Join(sb.ws, "ledger.txt"))
	must(t, err)
	if string(data) != "charged\n" {
		t.Fatalf("ledger %q: the program ran more than once", data)
	}

	// A read-only, idempotent program (cat of a pipe nobody writes to)
	// killed at its deadline: a plain error, to propose again if needed.
	must(t, syscall.Mkfifo(filepath.Join(sb.ws, "pipe"), 0o600))
	r = execStep(t, s, "read-1", "shell.exec", map[string]any{"argv": []any{"cat", "pipe"}})
	e = r.GetResponse().GetError()
	if d := e.GetDetails().AsMap(); e.GetCode() != string(wire.CodeTimeout) || d["outcome_unknown"] != false || d["repeatable"] != true {
		t.Fatalf("a read-only program killed at its deadline: %v", e)
	}
	rec, doubt, err = s.Step(context.Background(), "read-1")
	must(t, err)
	if doubt || rec.GetState() != stateFailed {
		t.Fatalf("record of the read %s (in doubt %v), want failed", stateName(rec.GetState()), doubt)
	}
}

// The same with a real http.request: the server takes the POST (its
// effect happens) and the connection drops before any answer. The step is
// in doubt (http.request is neither read-only nor idempotent), and asked
// again it replays that instead of posting a second time.
func TestHTTPAnswerLostIsInDoubt(t *testing.T) {
	t.Parallel()
	f := newHTTPFixture(t)
	var posts atomic.Int32
	lost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		posts.Add(1)
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close() // acted; the answer is lost
		}
	}))
	t.Cleanup(lost.Close)
	_, f.port, _ = net.SplitHostPort(lost.Listener.Addr().String())
	s := f.service(t, `http:
  allow_hosts: ["api.test:PORT"]
  allow_addresses: [127.0.0.1/32]
  timeout: 5s
`)
	args := map[string]any{"method": "POST", "url": f.url("api.test", "/charge"), "body": `{"amount": 5}`}
	r := execStep(t, s, "post-1", "http.request", args)
	if e := r.GetResponse().GetError(); e.GetDetails().AsMap()["outcome_unknown"] != true {
		t.Fatalf("a POST whose answer was lost: %v", e)
	}
	rec, doubt, err := s.Step(context.Background(), "post-1")
	must(t, err)
	if !doubt || rec.GetState() != stateInDoubt {
		t.Fatalf("record %s (in doubt %v), want in doubt", stateName(rec.GetState()), doubt)
	}
	again := execStep(t, s, "post-1", "http.request", args)
	if c := again.GetResponse().GetError().GetCode(); c != string(wire.CodeInDoubt) || posts.Load() != 1 {
		t.Fatalf("asked again: %v; the server took %d posts", again, posts.Load())
	}
}
