package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Session 17 (ops17): an HTTP MCP server may answer a call with an event
// stream, each event bounded by the SDK (16 MiB) but the stream not at
// all: a server sending progress notifications without end kept the
// executor reading (and decoding) until the call's timeout, however many
// gigabytes that was. The stream now has a total bound
// (DefaultMCPMaxStreamBytes); past it the read stops, the connection is
// closed, and the step fails saying the server's event stream was too
// long.
func TestMCPEventStreamHasATotalBound(t *testing.T) {
	t.Parallel()
	const total = 4 * DefaultMCPMaxStreamBytes
	url, written := chattyMCPServer(t, total)
	s := mcpService(t, "name: chatty\nurl: "+url+"\ntimeout: 120s")
	e := exec(t, s, "mcp.chatty.work", nil).GetError()
	if n := written.Load(); n >= total {
		t.Fatalf("the executor read the whole %d MiB stream (%v): want it to stop past %d MiB", n>>20, e, DefaultMCPMaxStreamBytes>>20)
	}
	streamCut(t, e, DefaultMCPMaxStreamBytes)
	t.Logf("server wrote %d MiB; the call: %v", written.Load()>>20, e)
}

// Session 18 (ops18): the bound was fixed at 64 MiB. It is now each HTTP
// server's max_stream_bytes: a stream of 32 MiB is cut by a server's
// 2 MiB (not read to its end: what the kernel buffers between the two
// sockets is far less than the rest), one of 6 MiB read whole under
// another's 8 MiB (the call succeeds).
func TestMCPEventStreamBoundIsTheServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max, total int64
		cut        bool
	}{{2 << 20, 32 << 20, true}, {8 << 20, 6 << 20, false}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			t.Parallel()
			total := tc.total
			url, written := chattyMCPServer(t, total)
			s := mcpService(t, fmt.Sprintf("name: chatty\nurl: %s\ntimeout: 120s\nmax_stream_bytes: %d", url, tc.max))
			r := exec(t, s, "mcp.chatty.work", nil)
			if !tc.cut {
				if r.GetError() != nil || written.Load() < total {
					t.Fatalf("a %d-byte stream under max_stream_bytes %d: %v (server wrote %d)", total, tc.max, r.GetError(), written.Load())
				}
				return
			}
			if n := written.Load(); n >= total {
				t.Fatalf("the executor read the whole stream (%d bytes): want it to stop past %d", n, tc.max)
			}
			streamCut(t, r.GetError(), tc.max)
		})
	}
}

// streamCut fails the test unless e is the failure of a call whose event
// stream went past limit bytes.
func streamCut(t *testing.T, e *xctv1.Error, limit int64) {
	t.Helper()
	want := fmt.Sprintf("event stream is over %d bytes (max_stream_bytes)", limit)
	if e.GetCode() != string(wire.CodeToolFailure) || !strings.Contains(e.GetMessage(), want) || e.GetDetails().AsMap()["outcome_unknown"] != true {
		t.Fatalf("a call whose stream was cut: %v; want TOOL_FAILURE saying %q, outcome unknown", e, want)
	}
}

// chattyMCPServer is an HTTP MCP server whose tool "work" answers with an
// event stream: progress notifications of about 1 MiB each until total
// bytes are written, then the answer. written counts what it wrote.
func chattyMCPServer(t *testing.T, total int64) (url string, written *atomic.Int64) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "v1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "work", Description: "Works.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	written = new(atomic.Int64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method != http.MethodPost || json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
			r.Body = io.NopCloser(bytes.NewReader(body))
			sdk.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// Each notification well under the SDK's bound for an event.
		text := strings.Repeat("a", 1<<20)
		for i := 0; written.Load() < total; i++ {
			n, err := fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"%d %s\"}}\n\n", i, text)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		_, _ = fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", msg.ID)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, written
}
