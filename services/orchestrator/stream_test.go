package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// sse is a streaming chat completions server on loopback: each request is
// answered by the handler the test gives.
func sse(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, flush func(string))) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || !req.Stream || !req.StreamOptions["include_usage"] || r.Header.Get("Accept") != "text/event-stream" {
			http.Error(w, "want a streaming request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		f := w.(http.Flusher)
		handle(w, r, func(s string) { _, _ = io.WriteString(w, s); f.Flush() })
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// delta is one SSE event with a content delta.
func delta(s string) string {
	raw, _ := json.Marshal(map[string]any{"model": "tiny-1", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": s}}}})
	return "data: " + string(raw) + "\n\n"
}

const usageEvent = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":77}}\n\n"

// recorder is a StreamSink that keeps the events, and a chain of them.
type recorder struct {
	mu     sync.Mutex
	events []xctevent.Event
	fail   error // returned from the Nth call, when set
	failAt int
}

func (r *recorder) sink(ev xctevent.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	if r.fail != nil && len(r.events) == r.failAt {
		return r.fail
	}
	return nil
}

// expiring is a context whose deadline passes when expire is called.
type expiring struct {
	context.Context // Background: no deadline of its own, no values
	done            chan struct{}
	once            sync.Once
}

func (e *expiring) Done() <-chan struct{} { return e.done }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (e *expiring) expire() { e.once.Do(func() { close(e.done) }) }

func (r *recorder) types() string {
	var out []string
	for _, e := range r.events {
		out = append(out, e.Type())
	}
	return strings.Join(out, " ")
}

func (r *recorder) last() map[string]any { return r.events[len(r.events)-1].Data() }

// chain is the events sealed on a chain, as the loop would append them.
func (r *recorder) chain(t *testing.T) []lctl.Event {
	t.Helper()
	var out []lctl.Event
	prev := ""
	for i, ev := range r.events {
		raw, _ := json.Marshal(ev.Data())
		e := lctl.Event{ChainID: "run-s", Seq: uint64(i + 1), Type: ev.Type(), Agent: "tiny", Timestamp: lctl.FormatTime(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC))}
		if err := json.Unmarshal(raw, &e.Data); err != nil {
			t.Fatal(err)
		}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		out = append(out, e)
	}
	return out
}

func streamer(t *testing.T, url string, now func() time.Time) *openAIProposer {
	t.Helper()
	p, err := newOpenAIProposer("tiny", OpenAIConfig{BaseURL: url, Stream: true, MaxResponseBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if now == nil {
		fixed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		now = func() time.Time { return fixed } // only the byte bound closes chunks
	}
	p.now = now
	var _ StreamingProposer = p
	return p
}

// TestStreamCoalesces: a decision streamed one token at a time is
// recorded as a few chunks of at least 256 bytes, between stream_start
// and stream_end, and read by lctl as one stream with its tokens.
func TestStreamCoalesces(t *testing.T) {
	t.Parallel()
	answer := `{"next_step": {"tool": "fs.write", "arguments": {"path": "UserController.py", "content": "` + strings.Repeat("cursor.execute(query, (user_id,)) ", 40) + `"}, "goal": "fix F1"}}`
	url := sse(t, func(w http.ResponseWriter, r *http.Request, flush func(string)) {
		flush(": keep-alive comment\n\n")
		for i := 0; i < len(answer); i += 4 {
			flush(delta(answer[i:min(i+4, len(answer))]))
		}
		flush("event: ignored-field\nid: 7\n" + usageEvent)
		flush("data: [DONE]\n\n")
	})
	rec := &recorder{}
	resp, err := streamer(t, url, nil).ProposeStream(context.Background(), &xctv1.ProposeRequest{Goal: "fix"}, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutput() != answer || resp.GetModel() != "tiny-1" || resp.GetUsage().GetOutputTokens() != 77 || resp.GetUsage().GetInputTokens() != 50 {
		t.Fatalf("response %v", resp)
	}
	if _, err := wire.ParseDecision([]byte(resp.GetOutput())); err != nil {
		t.Fatalf("the streamed answer is no decision: %v", err)
	}
	deltas := (len(answer) + 3) / 4
	var text strings.Builder
	chunks := 0
	for i, e := range rec.events[1 : len(rec.events)-1] {
		d := e.Data()
		if e.Type() != lctl.TypeStreamChunk || d["index"] != i {
			t.Fatalf("event %d: %s %v", i+1, e.Type(), d)
		}
		c := d["content"].(string)
		if i < len(rec.events)-3 && len(c) < StreamChunkMinBytes {
			t.Fatalf("chunk %d has %d bytes: fewer than %d before the last", i, len(c), StreamChunkMinBytes)
		}
		text.WriteString(c)
		chunks++
	}
	end := rec.last()
	if rec.events[0].Type() != lctl.TypeStreamStart || text.String() != answer || chunks > len(answer)/StreamChunkMinBytes+1 ||
		end["total_chunks"] != chunks || end["total_tokens"] != int64(77) || end["deltas"] != deltas || end["status"] != "ok" || end["finish_reason"] != "stop" {
		t.Fatalf("%d chunks for %d bytes in %d deltas; end %v", chunks, len(answer), deltas, end)
	}
	st := lctl.Replay("run-s", rec.chain(t), 0)
	if st.Stream.Streams != 1 || st.Stream.Active || st.Stream.Chunks != int64(chunks) || st.Stream.ReportedChunks != int64(chunks) ||
		st.Stream.Tokens != int64(deltas) || st.Stream.ReportedTokens != 77 {
		t.Fatalf("lctl reads %+v", st.Stream)
	}
}

// TestStreamBounds: at most StreamMaxChunks chunks, whatever the server
// sends; past StreamMaxRecordBytes the text is not recorded (the answer
// is still whole); a slow stream closes chunks by time.
func TestStreamBounds(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 300)
	n := 100 << 10 / len(big)
	url := sse(t, func(w http.ResponseWriter, r *http.Request, flush func(string)) {
		for i := 0; i < n; i++ {
			flush(delta(big))
		}
		flush("data: [DONE]\n\n")
	})
	rec := &recorder{}
	resp, err := streamer(t, url, nil).ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, e := range rec.events {
		if e.Type() == lctl.TypeStreamChunk {
			recorded += len(e.Data()["content"].(string))
		}
	}
	end := rec.last()
	if len(resp.GetOutput()) != n*len(big) || len(rec.events) != StreamMaxChunks+2 || end["total_chunks"] != StreamMaxChunks || end["truncated"] != true ||
		recorded != StreamMaxRecordBytes || end["bytes"] != n*len(big) || end["total_tokens"] != int64(n) {
		t.Fatalf("%d events, %d bytes recorded; end %v", len(rec.events), recorded, end)
	}

	// Time: a clock that moves 300 ms per reading closes every chunk at
	// its second delta.
	url = sse(t, func(w http.ResponseWriter, r *http.Request, flush func(string)) {
		for i := 0; i < 6; i++ {
			flush(delta("ab"))
		}
		flush("data: [DONE]")
	})
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(300 * time.Millisecond)
		return clock
	}
	rec = &recorder{}
	if _, err := streamer(t, url, tick).ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink); err != nil {
		t.Fatal(err)
	}
	if got := rec.types(); got != "stream_start stream_chunk stream_chunk stream_chunk stream_end" || rec.events[1].Data()["content"] != "abab" {
		t.Fatalf("slow stream: %s (first chunk %v)", got, rec.events[1].Data())
	}
}

// TestStreamFailures: each broken stream is a clear error with the code
// routing falls back on, and its stream_end says how it ended.
func TestStreamFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request, flush func(string))
		code   wire.Code
		status string // the stream_end's; "" when the stream never started
		want   string
	}{
		{"malformed event", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush(delta("{\"done\""))
			flush("data: {not json\n\n")
		}, wire.CodeGenerationFailed, "error", "the event ending at line 4 is not a JSON chunk"},
		{"cut before [DONE]", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush(delta("{\"done\": tr"))
		}, wire.CodeGenerationFailed, "cut", "the stream ended before [DONE]"},
		{"connection dropped mid-chunk", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush(delta("{\"done\": tr"))
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			// Half of a chunked-encoding frame, then the connection goes.
			_, _ = buf.WriteString("40\r\ndata: {\"choi")
			_ = buf.Flush()
			_ = conn.Close()
		}, wire.CodeGenerationFailed, "error", "the stream broke"},
		{"error mid-stream", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush(delta("{\"done\""))
			flush(`data: {"error": {"message": "Rate limit reached for requests", "type": "rate_limit_exceeded", "code": 429}}` + "\n\n")
		}, wire.CodeRateLimited, "error", "error in the stream: Rate limit reached"},
		{"server error mid-stream", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush(`data: {"error": {"message": "the model crashed", "type": "server_error"}}` + "\n\n")
		}, wire.CodeGenerationFailed, "error", "error in the stream: the model crashed"},
		{"a line over 1 MiB", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush("data: " + strings.Repeat("x", maxSSELineBytes+1) + "\n\n")
		}, wire.CodeGenerationFailed, "error", "line 1 is longer than"},
		{"not UTF-8", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			flush("data: \xff\xfe\n\n")
		}, wire.CodeGenerationFailed, "error", "line 1 is not UTF-8"},
		{"rate limited before the stream", func(w http.ResponseWriter, r *http.Request, flush func(string)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down"}}`)
		}, wire.CodeRateLimited, "", "HTTP 429: slow down"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			_, err := streamer(t, sse(t, tc.handle), nil).ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink)
			if err == nil || !strings.Contains(err.Error(), tc.want) || FailureCode(err) != string(tc.code) {
				t.Fatalf("err = %v (code %s), want %s %q", err, FailureCode(err), tc.code, tc.want)
			}
			if tc.status == "" {
				if len(rec.events) != 0 {
					t.Fatalf("events before any stream: %s", rec.types())
				}
				return
			}
			end := rec.last()
			if rec.events[0].Type() != lctl.TypeStreamStart || rec.events[len(rec.events)-1].Type() != lctl.TypeStreamEnd ||
				end["status"] != tc.status || end["code"] != string(tc.code) || !strings.Contains(end["error"].(string), tc.want) {
				t.Fatalf("events %s; end %v", rec.types(), end)
			}
			if st := lctl.Replay("run-s", rec.chain(t), 0); st.Stream.Active || st.Stream.Streams != 1 {
				t.Fatalf("lctl sees %+v", st.Stream)
			}
		})
	}
	if errors.Is(errors.New("x"), errMalformedSSE) || FailureCode(fmt.Errorf("w: %w", context.DeadlineExceeded)) != "TIMEOUT" {
		t.Fatal("FailureCode")
	}
}

// TestStreamDeadlineAndSink: a deadline mid-stream is TIMEOUT with the
// stream cut; a sink that fails stops the stream at once; a server that
// does not stream is read as a whole answer, with no stream events.
func TestStreamDeadlineAndSink(t *testing.T) {
	t.Parallel()
	url := sse(t, func(w http.ResponseWriter, r *http.Request, flush func(string)) {
		flush(delta("{\"done\""))
		<-r.Context().Done()
	})
	// The deadline passes once the stream has started: a fixed 200ms one
	// could pass before the answer's headers arrived (a loaded machine),
	// leaving no stream to cut.
	ctx := &expiring{Context: context.Background(), done: make(chan struct{})}
	rec := &recorder{}
	_, err := streamer(t, url, nil).ProposeStream(ctx, &xctv1.ProposeRequest{}, func(ev xctevent.Event) error {
		defer ctx.expire()
		return rec.sink(ev)
	})
	if FailureCode(err) != "TIMEOUT" || len(rec.events) == 0 || rec.last()["status"] != "cut" {
		t.Fatalf("deadline: %v; events %s %v", err, rec.types(), rec.last())
	}

	lost := errors.New("event log unavailable")
	url = sse(t, func(w http.ResponseWriter, r *http.Request, flush func(string)) {
		for i := 0; i < 10; i++ {
			flush(delta(strings.Repeat("y", 300)))
		}
		flush("data: [DONE]\n\n")
	})
	rec = &recorder{fail: lost, failAt: 2}
	if _, err := streamer(t, url, nil).ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink); !errors.Is(err, lost) || rec.types() != "stream_start stream_chunk" {
		t.Fatalf("sink failure: %v; events %s", err, rec.types())
	}

	// An answer over MaxResponseBytes stops the stream.
	p := streamer(t, url, nil)
	p.cfg.MaxResponseBytes = 1000
	rec = &recorder{}
	if _, err := p.ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink); FailureCode(err) != "GENERATION_FAILED" ||
		!strings.Contains(err.Error(), "larger than 1000 bytes") || rec.last()["status"] != "error" {
		t.Fatalf("too large: %v; end %v", err, rec.last())
	}

	whole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"tiny-1","choices":[{"message":{"content":"{\"done\":true,\"message\":\"ok\"}"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
	}))
	defer whole.Close()
	rec = &recorder{}
	resp, err := streamer(t, whole.URL, nil).ProposeStream(context.Background(), &xctv1.ProposeRequest{}, rec.sink)
	if err != nil || resp.GetOutput() != `{"done":true,"message":"ok"}` || resp.GetUsage().GetOutputTokens() != 2 || len(rec.events) != 0 {
		t.Fatalf("a whole answer: %v %v; events %s", resp, err, rec.types())
	}
}

// FuzzReadSSE: any bytes are read without a panic, as chunks or as
// errMalformedSSE; nothing after [DONE] is read.
func FuzzReadSSE(f *testing.F) {
	f.Add([]byte(delta("a") + usageEvent + "data: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[]}\ndata: x\n\n"))
	f.Add([]byte(": c\nevent: e\nid\n\ndata: [DONE]\n\ndata: {bad"))
	f.Add([]byte("data: \xff\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		n := 0
		done, err := readSSE(strings.NewReader(string(in)), func(*sseChunk) error { n++; return nil })
		if err != nil && !errors.Is(err, errMalformedSSE) {
			t.Fatalf("error %v is not errMalformedSSE", err)
		}
		if done && err != nil {
			t.Fatal("done with an error")
		}
	})
}
