package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamingModel is an OpenAI-compatible endpoint on loopback that streams
// its answers (server-sent events) in small deltas: the first call of the
// run proposes fs.list, the next says done.
type streamingModel struct {
	mu    sync.Mutex
	calls int
	bad   []string // problems with what the adapter sent
}

func (m *streamingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.calls++
	call := m.calls
	if r.URL.Path != "/v1/chat/completions" || json.Unmarshal(body, &req) != nil || !req.Stream || req.Model != "reviewer-large" {
		m.bad = append(m.bad, fmt.Sprintf("%s %s", r.URL.Path, body))
	}
	m.mu.Unlock()
	answer := `{"next_step": {"tool": "fs.list", "arguments": {"path": "."}, "goal": "look at the code before reviewing it"}}`
	if call > 1 {
		answer = `{"done": true, "message": "nothing to review in an empty workspace"}`
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	for i := 0; i < len(answer); i += 7 {
		delta, _ := json.Marshal(answer[i:min(i+7, len(answer))])
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%s}}]}\n\n", delta)
		flusher.Flush()
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":%d}}\n\n", len(answer)/4)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestCrewOnAStreamingModel: xct dev (one process) with its OpenAI adapter
// set to stream, against a streaming endpoint on loopback; xct run --crew
// (another process) runs a one-agent crew on it. The stream is on the
// chain as stream_start, coalesced stream_chunks and stream_end, xct run
// shows it as it comes, and lctl stats counts it.
func TestCrewOnAStreamingModel(t *testing.T) {
	t.Parallel()
	model := &streamingModel{}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	d := startDev(t, "--openai-base-url", srv.URL+"/v1", "--openai-stream")
	crewFile := filepath.Join(t.TempDir(), "reviewer.yaml")
	if err := os.WriteFile(crewFile, []byte(`crew: solo-review
agents:
  - name: reviewer
    profile: {type: reviewer, capabilities: [assessment], model: "openai:reviewer-large", reliability_score: 0.9}
    tools: [fs.list, fs.read]
handoffs: {entry: reviewer}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	r := d.cli(t, "", env, "run", "--crew", crewFile, "--goal", "review the workspace")
	r.want(t, "xct run --crew on a streaming model", 0,
		"model: crew:solo-review", "[stream]   reviewer answering", "[stream]   ok:", "reviewer: fs.list", "done: nothing to review")
	model.mu.Lock()
	defer model.mu.Unlock()
	if model.calls != 2 || len(model.bad) > 0 {
		t.Fatalf("%d model calls; requests the endpoint did not expect: %v", model.calls, model.bad)
	}
	// The chain, exported by lctl from the tracer: the streams are counted.
	runID := strings.Fields(strings.SplitN(r.out, "run ", 2)[1])[0]
	tracer := d.proc.waitFor(t, regexp.MustCompile(`tracer +(127\.0\.0\.1:[0-9]+)`), 10*time.Second)
	lenv := map[string]string{"LCTL_TRACER": tracer, "XCT_AS": "dave", "XCT_CREDENTIALS": filepath.Join(d.dataDir, "dev", "credentials.yaml")}
	path := exportSigned(t, lenv, runID, filepath.Join(t.TempDir(), "solo.lctl.json"))
	var stats struct {
		EventTypes map[string]int `json:"event_types"`
	}
	if code, out := lctlRun(nil, "stats", "--json", path); code != 0 || json.Unmarshal([]byte(out), &stats) != nil {
		t.Fatalf("stats %d: %s", code, out)
	}
	if stats.EventTypes["stream_start"] != 2 || stats.EventTypes["stream_end"] != 2 || stats.EventTypes["stream_chunk"] < 2 {
		t.Fatalf("stream events on the chain: %v", stats.EventTypes)
	}
}
