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

	"github.com/xct-dev/xct/internal/wire"
)

// Session 17 (ops17): an HTTP MCP server may answer a call with an event
// stream, each event bounded by the SDK (16 MiB) but the stream not at
// all: a server sending progress notifications without end kept the
// executor reading (and decoding) until the call's timeout, however many
// gigabytes that was. The stream now has a total bound
// (mcpMaxStreamBytes); past it the read stops, the connection is closed,
// and the step fails saying the server's event stream was too long.
func TestMCPEventStreamHasATotalBound(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "v1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "work", Description: "Works.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	const total = 4 * mcpMaxStreamBytes
	var written atomic.Int64
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
		// Progress notifications of about 1 MiB each, each one well
		// under the SDK's bound for an event, then the answer.
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
	s := mcpService(t, "name: chatty\nurl: "+ts.URL+"\ntimeout: 120s")
	e := exec(t, s, "mcp.chatty.work", nil).GetError()
	if n := written.Load(); n >= total {
		t.Fatalf("the executor read the whole %d MiB stream (%v): want it to stop past %d MiB", n>>20, e, mcpMaxStreamBytes>>20)
	}
	want := fmt.Sprintf("event stream is over %d bytes", mcpMaxStreamBytes)
	if e.GetCode() != string(wire.CodeToolFailure) || !strings.Contains(e.GetMessage(), want) || e.GetDetails().AsMap()["outcome_unknown"] != true {
		t.Fatalf("a call whose stream was cut: %v; want TOOL_FAILURE saying %q, outcome unknown", e, want)
	}
	t.Logf("server wrote %d MiB; the call: %v", written.Load()>>20, e)
}
