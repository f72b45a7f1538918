package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// OpenAIConfig configures the OpenAI-compatible Chat Completions adapter. It
// works with any server that speaks that API (OpenAI, vLLM, Ollama,
// llama.cpp server).
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:11434/v1.
	BaseURL string
	// APIKey is sent as a bearer token when set. It is never logged or
	// recorded on a chain.
	APIKey string
	// Timeout bounds one completion request.
	Timeout time.Duration
	// MaxResponseBytes bounds the HTTP response read (a streamed answer's
	// text too).
	MaxResponseBytes int64
	// Stream asks for streamed completions ("stream": true): the loop
	// records them as stream_start / stream_chunk / stream_end
	// (stream.go).
	Stream bool
}

type openAIProposer struct {
	model  string
	cfg    OpenAIConfig
	client *http.Client
	now    func() time.Time // the streaming events' clock; nil: time.Now
}

func newOpenAIProposer(model string, cfg OpenAIConfig) (*openAIProposer, error) {
	if cfg.BaseURL == "" {
		return nil, fmt.Errorf("%w: openai:%s needs a base URL (-openai-base-url or OPENAI_BASE_URL)", ErrBadModel, model)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = 4 << 20
	}
	return &openAIProposer{model: model, cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}}, nil
}

func (p *openAIProposer) Name() string { return p.model }
func (p *openAIProposer) Close() error { p.client.CloseIdleConnections(); return nil }

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model          string            `json:"model"`
	Messages       []chatMessage     `json:"messages"`
	ResponseFormat map[string]string `json:"response_format"`
	Temperature    float64           `json:"temperature"`
	Stream         bool              `json:"stream,omitempty"`
	StreamOptions  map[string]bool   `json:"stream_options,omitempty"`
}

type chatResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// messages renders the stateless context as a chat: the protocol and the
// catalog, the goal, then each earlier turn as the model's answer and the
// system's response.
func chatMessages(req *xctv1.ProposeRequest) ([]chatMessage, error) {
	type toolView struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Effect      string          `json:"effect"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	tools := make([]toolView, 0, len(req.GetTools()))
	for _, t := range req.GetTools() {
		schema := json.RawMessage(t.GetInputSchema())
		if !json.Valid(schema) {
			schema = json.RawMessage(`{}`)
		}
		effect := strings.ToLower(strings.TrimPrefix(t.GetEffect().String(), "EFFECT_"))
		tools = append(tools, toolView{t.GetName(), t.GetDescription(), effect, schema})
	}
	catalog, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("render tool catalog: %w", err)
	}
	msgs := []chatMessage{
		{Role: "system", Content: req.GetInstructions() + "\n\nTool catalog (JSON):\n" + string(catalog)},
		{Role: "user", Content: "Goal: " + req.GetGoal()},
	}
	for _, t := range req.GetHistory() {
		msgs = append(msgs,
			chatMessage{Role: "assistant", Content: t.GetDecision()},
			chatMessage{Role: "user", Content: t.GetResponse()},
		)
	}
	return msgs, nil
}

func (p *openAIProposer) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	resp, err := p.post(ctx, req, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, p.failure(resp)
	}
	return p.completion(resp)
}

// post sends the chat completion request (streamed or not).
func (p *openAIProposer) post(ctx context.Context, req *xctv1.ProposeRequest, stream bool) (*http.Response, error) {
	msgs, err := chatMessages(req)
	if err != nil {
		return nil, err
	}
	cr := chatRequest{
		Model:          p.model,
		Messages:       msgs,
		ResponseFormat: map[string]string{"type": "json_object"},
	}
	if stream {
		cr.Stream, cr.StreamOptions = true, map[string]bool{"include_usage": true}
	}
	body, err := json.Marshal(cr)
	if err != nil {
		return nil, fmt.Errorf("openai request: %w", err)
	}
	url := strings.TrimRight(p.cfg.BaseURL, "/") + "/chat/completions"
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("openai request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	if stream {
		httpReq.Header.Set("Accept", "text/event-stream")
	}
	if p.cfg.APIKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.client.Do(httpReq)
	if err != nil {
		code := wire.CodeGenerationFailed
		if errors.Is(err, context.DeadlineExceeded) {
			code = wire.CodeTimeout
		}
		return nil, &ModelError{Model: p.model, Code: code, Msg: err.Error(), Err: err}
	}
	return resp, nil
}

// failure is the ModelError of a response that is not 200.
func (p *openAIProposer) failure(resp *http.Response) error {
	raw, err := readLimited(resp.Body, 64<<10)
	if err != nil && len(raw) == 0 {
		return httpFailure(p.model, resp.StatusCode, "(unreadable body)")
	}
	msg := strings.TrimSpace(string(raw))
	var cr chatResponse
	if json.Unmarshal(raw, &cr) == nil && cr.Error != nil {
		msg = cr.Error.Message
	}
	return httpFailure(p.model, resp.StatusCode, msg)
}

// completion reads a whole (not streamed) chat completion.
func (p *openAIProposer) completion(resp *http.Response) (*xctv1.ProposeResponse, error) {
	raw, err := readLimited(resp.Body, p.cfg.MaxResponseBytes)
	if err != nil {
		return nil, &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: "read response: " + err.Error(), Err: err}
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return nil, &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: "response is not a chat completion: " + err.Error(), Err: err}
	}
	if len(cr.Choices) == 0 {
		return nil, &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: "response has no choices",
			Usage: &xctv1.Usage{InputTokens: cr.Usage.PromptTokens, OutputTokens: cr.Usage.CompletionTokens}}
	}
	model := cr.Model
	if model == "" {
		model = p.model
	}
	return &xctv1.ProposeResponse{
		Output: cr.Choices[0].Message.Content,
		Model:  model,
		Usage:  &xctv1.Usage{InputTokens: cr.Usage.PromptTokens, OutputTokens: cr.Usage.CompletionTokens},
	}, nil
}

// readLimited reads at most limit bytes and fails if there is more.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return raw, nil
}
