package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

const testScript = `
name: tester
steps:
  - next_step: {tool: fs.read, arguments: {path: ../x}, goal: peek}
    tokens: {input: 10, output: 2}
  - on_error:
      PERMISSION_DENIED: {next_step: {tool: fs.read, arguments: {path: inside.txt}, goal: read inside}}
    next_step: {tool: fs.list, arguments: {}, goal: list}
  - raw: "not json"
  - done: true
    message: finished
`

func TestScriptIsStateless(t *testing.T) {
	t.Parallel()
	s, err := ParseScript("t.yaml", []byte(testScript))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	denied := string(wire.EncodeResponse(wire.ErrorResponse(wire.Errorf(wire.CodePermissionDenied, "outside"))))
	ok := `{"status":"success","result":{}}`
	turn := func(resp string) *xctv1.Turn { return &xctv1.Turn{Decision: "{}", Response: resp} }

	tests := []struct {
		name    string
		history []*xctv1.Turn
		want    string
	}{
		{"first turn", nil, `"path":"../x"`},
		{"after an error with a matching code", []*xctv1.Turn{turn(denied)}, `"path":"inside.txt"`},
		{"after a success", []*xctv1.Turn{turn(ok)}, `"tool":"fs.list"`},
		{"raw output", []*xctv1.Turn{turn(ok), turn(ok)}, `not json`},
		{"done", []*xctv1.Turn{turn(ok), turn(ok), turn(ok)}, `"done":true`},
		{"past the end", []*xctv1.Turn{turn(ok), turn(ok), turn(ok), turn(ok)}, `script ended`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The same request always gives the same answer: no hidden state.
			for range 2 {
				resp, err := s.Propose(ctx, &xctv1.ProposeRequest{History: tc.history})
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(resp.GetOutput(), tc.want) {
					t.Fatalf("output %s, want it to contain %s", resp.GetOutput(), tc.want)
				}
			}
		})
	}
	resp, _ := s.Propose(ctx, &xctv1.ProposeRequest{})
	if resp.GetUsage().GetInputTokens() != 10 || resp.GetModel() != "tester" {
		t.Fatalf("usage/model = %v", resp)
	}
}

func TestParseScriptErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"unknown field", "steps:\n  - next_stp: {}\n", "line 2"},
		{"empty", "name: x\n", "no steps"},
		{"two kinds", "steps:\n  - done: true\n    raw: x\n", "exactly one"},
		{"nested on_error", "steps:\n  - done: true\n    on_error:\n      X: {done: true, on_error: {Y: {done: true}}}\n", "without on_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScript("s.yaml", []byte(tc.in))
			if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadModel mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLoadScriptStaysInsideScriptsDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "scripts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret.yaml"), []byte(testScript), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadScript(dir, "ok.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := loadScript(dir, filepath.Join(dir, "ok.yaml")); err != nil {
		t.Fatalf("absolute path inside the dir: %v", err)
	}
	for _, bad := range []string{"../secret.yaml", filepath.Join(base, "secret.yaml"), "/etc/passwd"} {
		if _, err := loadScript(dir, bad); !errors.Is(err, ErrBadModel) {
			t.Errorf("%s: err = %v, want ErrBadModel", bad, err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "secret.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := loadScript(dir, "link.yaml"); !errors.Is(err, ErrBadModel) {
		t.Errorf("symlink out of the dir: err = %v", err)
	}
}

func TestTranscriptIsAFoldOverTheChain(t *testing.T) {
	t.Parallel()
	events := []lctl.Event{
		{Seq: 1, Type: lctl.TypeRunStarted, Data: map[string]any{}},
		{Seq: 2, Type: lctl.TypeStepStart, Data: map[string]any{"step": 1.0, "tool": "fs.read", "arguments": map[string]any{"path": "a"}, "intent": "read"}},
		{Seq: 3, Type: lctl.TypeVerdict, Data: map[string]any{"decision": "allow"}},
		{Seq: 4, Type: lctl.TypeToolCall, Data: map[string]any{"output": map[string]any{"content": "hi"}}},
		{Seq: 5, Type: lctl.TypeStepEnd, Data: map[string]any{}},
		{Seq: 6, Type: lctl.TypeStepStart, Data: map[string]any{"step": 2.0, "raw": "oops"}},
		{Seq: 7, Type: lctl.TypeError, Data: errorEvent(2, "", wire.Errorf(wire.CodeGenerationFailed, "not JSON")).Data()},
		{Seq: 8, Type: lctl.TypeStepEnd, Data: map[string]any{}},
	}
	var tr transcript
	for i := range events {
		tr.apply(&events[i])
	}
	h := tr.history()
	if len(h) != 2 {
		t.Fatalf("%d turns", len(h))
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(h[0].GetDecision()), &d); err != nil {
		t.Fatal(err)
	}
	if d["next_step"].(map[string]any)["tool"] != "fs.read" {
		t.Fatalf("turn 1 decision = %s", h[0].GetDecision())
	}
	if h[0].GetResponse() != `{"result":{"content":"hi"},"status":"success"}` {
		t.Fatalf("turn 1 response = %s", h[0].GetResponse())
	}
	if h[1].GetDecision() != "oops" || errorCode(h[1].GetResponse()) != "GENERATION_FAILED" {
		t.Fatalf("turn 2 = %v", h[1])
	}
}

func TestOpenAIProposerSpeaksChatCompletions(t *testing.T) {
	t.Parallel()
	var got chatRequest
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		auth = r.Header.Get("Authorization")
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &got); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_, _ = io.WriteString(w, `{"model":"tiny-1","choices":[{"message":{"role":"assistant","content":"{\"done\":true,\"message\":\"ok\"}"}}],"usage":{"prompt_tokens":123,"completion_tokens":7}}`)
	}))
	defer srv.Close()

	p, err := newOpenAIProposer("tiny", OpenAIConfig{BaseURL: srv.URL + "/v1/", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Propose(context.Background(), &xctv1.ProposeRequest{
		Goal:         "say done",
		Instructions: instructions,
		Tools:        []*xctv1.ToolDescriptor{{Name: "fs.read", InputSchema: `{"type":"object"}`, Effect: xctv1.Effect_EFFECT_READ}},
		History:      []*xctv1.Turn{{Decision: `{"next_step":{}}`, Response: `{"status":"success"}`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutput() != `{"done":true,"message":"ok"}` || resp.GetUsage().GetInputTokens() != 123 || resp.GetUsage().GetOutputTokens() != 7 || resp.GetModel() != "tiny-1" {
		t.Fatalf("resp = %v", resp)
	}
	if auth != "Bearer sk-test" || got.Model != "tiny" || got.ResponseFormat["type"] != "json_object" {
		t.Fatalf("request: auth %q model %q format %v", auth, got.Model, got.ResponseFormat)
	}
	roles := []string{}
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,user" || !strings.Contains(got.Messages[0].Content, `"name":"fs.read"`) || got.Messages[1].Content != "Goal: say done" {
		t.Fatalf("messages = %+v", got.Messages)
	}
}

func TestOpenAIProposerErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/limited/chat/completions":
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"rate limit reached"}}`)
		case "/garbage/chat/completions":
			_, _ = io.WriteString(w, `<html>`)
		case "/empty/chat/completions":
			_, _ = io.WriteString(w, `{"choices":[]}`)
		}
	}))
	defer srv.Close()
	for path, want := range map[string]string{"limited": "HTTP 429: rate limit reached", "garbage": "not a chat completion", "empty": "no choices"} {
		p, _ := newOpenAIProposer("m", OpenAIConfig{BaseURL: srv.URL + "/" + path, APIKey: "sk-secret"})
		_, err := p.Propose(context.Background(), &xctv1.ProposeRequest{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", path, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("%s: the API key leaked into an error", path)
		}
	}
	if _, err := newOpenAIProposer("m", OpenAIConfig{}); !errors.Is(err, ErrBadModel) {
		t.Errorf("no base URL: err = %v", err)
	}
}
