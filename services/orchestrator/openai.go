package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
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
	// MaxResponseBytes bounds the HTTP response read.
	MaxResponseBytes int64
}

type openAIProposer struct {
	model  string
	cfg    OpenAIConfig
	client *http.Client
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
	msgs, err := chatMessages(req)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(chatRequest{
		Model:          p.model,
		Messages:       msgs,
		ResponseFormat: map[string]string{"type": "json_object"},
	})
	if err != nil {
		return nil, fmt.Errorf("openai request: %w", err)
	}
	url := strings.TrimRight(p.cfg.BaseURL, "/") + "/chat/completions"
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("openai request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	if p.cfg.APIKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.client.Do(httpReq)
	if err != nil {
		return nil, fmt.Errorf("openai %s: %w", p.model, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := readLimited(resp.Body, p.cfg.MaxResponseBytes)
	if err != nil {
		return nil, fmt.Errorf("openai %s: read response: %w", p.model, err)
	}
	var cr chatResponse
	decodeErr := json.Unmarshal(raw, &cr)
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(raw))
		if decodeErr == nil && cr.Error != nil {
			msg = cr.Error.Message
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return nil, fmt.Errorf("openai %s: HTTP %d: %s", p.model, resp.StatusCode, msg)
	}
	if decodeErr != nil {
		return nil, fmt.Errorf("openai %s: response is not a chat completion: %w", p.model, decodeErr)
	}
	if len(cr.Choices) == 0 {
		return nil, fmt.Errorf("openai %s: response has no choices", p.model)
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
