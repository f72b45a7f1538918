package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
)

// TestAttackMCPAnswerTakesTheExecutorsMemory (session 16, attack16c): an
// MCP server over HTTP that relays what the model asks for (a fetch, a
// search) answers a call with a JSON-RPC response of 128 MiB, as any page
// the model points it at could be. The go SDK reads such a body whole
// (io.ReadAll) before decoding it; it bounds only event streams (16 MiB an
// event) and stdio lines. On main the executor read all 128 MiB into its
// memory (a gigabyte answer takes the process, and in xct dev the whole
// cluster, before max_output_bytes is looked at). Now an answer that is
// not an event stream is read up to mcpMaxResponseBytes (16 MiB) and the
// connection closed: the server could not write more than that and the
// sockets' buffers, and the step fails.
func TestAttackMCPAnswerTakesTheExecutorsMemory(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "relay", Version: "v1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "fetch", Description: "Fetches a page.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "small"}}}, nil
		})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	const total = 128 << 20
	var written atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if r.Method == http.MethodPost && json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
			w.Header().Set("Content-Type", "application/json")
			if _, err := io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":{"content":[{"type":"text","text":"`); err != nil {
				return
			}
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range total / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				written.Add(int64(len(chunk)))
			}
			_, _ = io.WriteString(w, `"}]}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	c := startBindCluster(t, withTools(t, "mcp:\n  - {name: relay, url: \""+ts.URL+"\", timeout: 120s}\n",
		"rules:\n  - {id: allow-all, effect: allow, tools: [\"*\"]}\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vreq, ereq := proposal(t, "relay-run", 1, "mcp.relay.fetch", map[string]any{"url": "https://example.org/big"})
	// The catalog reaches the validator asynchronously.
	var v *xctv1.ValidateResponse
	testutil.Eventually(t, 20*time.Second, func() error {
		var err error
		if v, err = c.validatorAs(t, "service:dev").Validate(ctx, vreq); err != nil {
			return err
		}
		if v.GetVerdict().GetSigned() == nil {
			return fmt.Errorf("no signed allow yet: %v", v.GetVerdict())
		}
		return nil
	})
	ereq.Verdict = v.GetVerdict().GetSigned()
	resp, err := c.executorAs(t, "service:dev").Execute(ctx, ereq)
	if n := written.Load(); n >= 64<<20 {
		t.Fatalf("the executor read %d MiB of the server's answer (%v, %v): want it to stop past 16 MiB", n>>20, resp.GetResponse().GetError(), err)
	}
	if err == nil && resp.GetResponse().GetError() == nil {
		t.Fatalf("a call whose answer was not read succeeded: %v", resp.GetResponse())
	}
	t.Logf("server wrote %d MiB; the call: %v %v", written.Load()>>20, resp.GetResponse().GetError(), err)
}

// TestAttackOTLPJSONPathsTakeTheTracersMemory (session 16, attack16c): a
// submitter (alice, who may export traces) posts 512 KiB of OTLP/JSON whose
// one unknown member nests 2000 objects deep, each under a 256-byte key.
// The decoder rewrote hex ids anywhere in the tree and built, for every
// member it walked, the path to it ("$.x.kkk….kkk…"), each level's path
// alive while the levels below were walked: 2000²/2 × 256 bytes, half a
// gigabyte for half a megabyte posted (the 16 MiB the endpoint takes, at
// the 10,000 levels encoding/json allows, would be some 80 GB: the
// tracer, and xct dev with it, gone). Now the path is made only for the
// error that names it; the request costs about its size. Serial: the
// allocations counted are the whole process's.
func TestAttackOTLPJSONPathsTakeTheTracersMemory(t *testing.T) {
	c := startBindCluster(t, func(cfg *app.Config, _ *app.Options) { cfg.Tracer.HTTPListen = "127.0.0.1:0" })
	const depth, keyLen = 2000, 256
	key := strings.Repeat("k", keyLen)
	var b strings.Builder
	b.WriteString(`{"resourceSpans":[],"x":`)
	for range depth {
		b.WriteString(`{"` + key + `":`)
	}
	b.WriteString("1")
	b.WriteString(strings.Repeat("}", depth))
	b.WriteString("}")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	post := func(body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.app.Tracer.HTTPAddr()+"/v1/traces", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.creds.Token(t, "alice"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, out := post(b.String())
	runtime.ReadMemStats(&after)
	if code != http.StatusOK {
		t.Fatalf("the deep export: %d %s", code, out)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 128<<20 {
		t.Fatalf("a %d KiB export made the process allocate %d MiB", b.Len()>>10, grew>>20)
	}
	// A bad id is still named by its path.
	code, out = post(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`)
	if code != http.StatusBadRequest || !strings.Contains(out, `$.resourceSpans[0].scopeSpans[0].spans[0].traceId: \"zz\" is not a hex id`) {
		t.Fatalf("a bad id: %d %s", code, out)
	}
}

// TestAttackDiffPathsTakeTheTracersMemory (session 16, attack16c): a
// model proposes arguments whose one member nests 30 objects under
// 1000-byte keys and ends in 5000 leaves (180 KiB, a valid decision; the
// step is refused, its proposal recorded on step_start all the same); two
// runs of it differ in the leaves. Any reader's DiffChains compared the
// two step_starts and built, for every leaf it walked, the path to it
// (30 KB), though it reports at most 50 changes an event: 161 MiB
// allocated for two 6-event chains on main (a 256 KiB decision shaped so:
// about 4 GB). Now the path is made only for a change reported, each cut
// past 512 bytes, and the walk stops at the 50th. Serial: the
// allocations counted are the whole process's.
func TestAttackDiffPathsTakeTheTracersMemory(t *testing.T) {
	c := startBindCluster(t)
	const depth, keyLen, leaves = 30, 1000, 5000
	args := func(leaf int) string {
		var b strings.Builder
		b.WriteString(`{"path": "x", "deep": `)
		for i := range depth {
			fmt.Fprintf(&b, `{"%s%d": `, strings.Repeat("k", keyLen), i)
		}
		b.WriteString("{")
		for i := range leaves {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `"l%d": %d`, i, leaf)
		}
		b.WriteString(strings.Repeat("}", depth+2))
		return b.String()
	}
	var ids []string
	var lastSeq []uint64
	for i, leaf := range []int{1, 2} {
		name := fmt.Sprintf("deep%d.yaml", i)
		c.writeScript(t, name, script(step("fs.list", args(leaf))))
		r := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "deep", Model: "scripted:" + name})
		ids, lastSeq = append(ids, r.GetRunId()), append(lastSeq, r.GetLastSeq())
	}
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dave"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, id := range ids {
		testutil.Eventually(t, 30*time.Second, func() error {
			s, err := tracer.ChainStats(ctx, &lctlv1.ChainStatsRequest{ChainId: id})
			if err != nil {
				return err
			}
			if s.GetEvents() < lastSeq[i] {
				return fmt.Errorf("chain %s: %d of %d events at the tracer", id, s.GetEvents(), lastSeq[i])
			}
			return nil
		})
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := tracer.DiffChains(ctx, &lctlv1.DiffChainsRequest{ChainIdA: ids[0], ChainIdB: ids[1]})
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("DiffChains of two %d-event chains made the process allocate %d MiB (%v)", lastSeq[0], grew>>20, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var fields int
	for _, d := range resp.GetDifferences() {
		fields += len(d.GetFields())
		for _, f := range d.GetFields() {
			if len(f.GetPath()) > 600 {
				t.Fatalf("a path of %d bytes", len(f.GetPath()))
			}
		}
	}
	if fields == 0 || fields > 200 {
		t.Fatalf("%d field changes reported, want the leaves' first ones", fields)
	}
}
