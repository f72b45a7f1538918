package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Script is a scripted model: a list of decisions, one per turn. It is
// stateless like any model: the turn it answers is the number of earlier
// turns in the context, and an entry's on_error alternative is chosen from the
// previous response in the context. So a scripted run shows that the context
// really is rebuilt from the chain.
//
//	name: demo
//	steps:
//	  - next_step: {tool: fs.read, arguments: {path: ../secret}, goal: peek}
//	  - on_error:                 # used when the previous response was an error with this code
//	      PERMISSION_DENIED: {next_step: {tool: fs.read, arguments: {path: notes.txt}, goal: read inside}}
//	    next_step: {tool: fs.list, arguments: {}, goal: look around}
//	  - raw: "not json"           # sent as is: shows a malformed output being repaired
//	  - fail: RATE_LIMITED        # the call fails with this code (only for the model labelled large)
//	    model: large
//	    next_step: {tool: fs.list, arguments: {}, goal: look again}   # what the other models answer
//	  - done: true
//	    message: finished
//
// A reference scripted:FILE#LABEL plays FILE as the model LABEL: a crew's
// model and its fallback can play one script, and a fail entry names the
// label it fails for.
type Script struct {
	AgentName string        `yaml:"name" json:"name"`
	Steps     []ScriptEntry `yaml:"steps" json:"steps"`
	label     string        // the model this script plays (scripted:FILE#LABEL)
}

// ScriptEntry is one scripted turn.
type ScriptEntry struct {
	NextStep map[string]any          `yaml:"next_step,omitempty" json:"next_step,omitempty"`
	Done     bool                    `yaml:"done,omitempty" json:"done,omitempty"`
	Message  string                  `yaml:"message,omitempty" json:"message,omitempty"`
	Raw      *string                 `yaml:"raw,omitempty" json:"raw,omitempty"`
	OnError  map[string]*ScriptEntry `yaml:"on_error,omitempty" json:"on_error,omitempty"`
	Tokens   *ScriptTokens           `yaml:"tokens,omitempty" json:"tokens,omitempty"`
	// Fail makes the call fail with this code (RATE_LIMITED, TIMEOUT,
	// GENERATION_FAILED), as a model endpoint would, for the model whose
	// label is Model (every model when Model is empty); the others answer
	// the entry's decision.
	Fail  string `yaml:"fail,omitempty" json:"fail,omitempty"`
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
}

// ScriptTokens is the token usage a scripted turn reports.
type ScriptTokens struct {
	Input  int64 `yaml:"input" json:"input"`
	Output int64 `yaml:"output" json:"output"`
}

// MaxScriptBytes bounds a script file.
const MaxScriptBytes = 4 << 20

// loadScript reads a script from dir/name. The file must stay inside dir:
// a caller of StartRun cannot make the orchestrator read other files.
func loadScript(dir, name string) (*Script, error) {
	name, label, _ := strings.Cut(name, "#")
	s, err := loadScriptFile(dir, name)
	if err != nil {
		return nil, err
	}
	s.label = label
	return s, nil
}

func loadScriptFile(dir, name string) (*Script, error) {
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: scripts directory: %w", ErrBadModel, err)
	}
	defer func() { _ = root.Close() }()
	if filepath.IsAbs(name) {
		if rel, err := filepath.Rel(mustAbs(dir), name); err == nil {
			name = rel
		}
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: script %q: %w", ErrBadModel, name, err)
	}
	defer func() { _ = f.Close() }()
	raw, err := readLimited(f, MaxScriptBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: script %q: %w", ErrBadModel, name, err)
	}
	return ParseScript(name, raw)
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// ParseScript parses a YAML or JSON script strictly: unknown fields are
// errors, with the line they are on.
func ParseScript(name string, raw []byte) (*Script, error) {
	var s Script
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: script %q: %w", ErrBadModel, name, err)
	}
	if len(s.Steps) == 0 {
		return nil, fmt.Errorf("%w: script %q has no steps", ErrBadModel, name)
	}
	for i, e := range s.Steps {
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("%w: script %q step %d: %w", ErrBadModel, name, i+1, err)
		}
	}
	if s.AgentName == "" {
		s.AgentName = "scripted"
	}
	return &s, nil
}

func (e *ScriptEntry) check() error {
	n := 0
	if e.Fail != "" && e.Model == "" {
		n++ // fails for every model: no decision
	}
	if e.Model != "" && e.Fail == "" {
		return fmt.Errorf("model names the model a fail entry fails for; this entry has no fail")
	}
	if e.NextStep != nil {
		n++
	}
	if e.Done {
		n++
	}
	if e.Raw != nil {
		n++
	}
	if n != 1 {
		return fmt.Errorf("exactly one of next_step, done, raw or fail (without model) is required")
	}
	for code, alt := range e.OnError {
		if alt == nil || alt.OnError != nil {
			return fmt.Errorf("on_error %s: an alternative is one decision without on_error", code)
		}
		if err := alt.check(); err != nil {
			return fmt.Errorf("on_error %s: %w", code, err)
		}
	}
	return nil
}

// output renders the entry as the model's raw output.
func (e *ScriptEntry) output() string {
	switch {
	case e.Raw != nil:
		return *e.Raw
	case e.Done:
		b, _ := json.Marshal(map[string]any{"done": true, "message": e.Message})
		return string(b)
	default:
		b, _ := json.Marshal(map[string]any{"next_step": e.NextStep})
		return string(b)
	}
}

// Name implements Proposer: the script's name is its agent name.
func (s *Script) Name() string { return s.AgentName }

// Propose implements Proposer: the turn is len(history); past the end of
// the script the model says done.
func (s *Script) Propose(_ context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	turn := len(req.GetHistory())
	if turn >= len(s.Steps) {
		return &xctv1.ProposeResponse{Output: `{"done": true, "message": "script ended"}`, Model: s.AgentName}, nil
	}
	entry := &s.Steps[turn]
	if turn > 0 && len(entry.OnError) > 0 {
		if code := errorCode(req.GetHistory()[turn-1].GetResponse()); code != "" {
			if alt, ok := entry.OnError[code]; ok {
				entry = alt
			}
		}
	}
	name := s.AgentName
	if s.label != "" {
		name += "#" + s.label
	}
	if entry.Fail != "" && (entry.Model == "" || entry.Model == s.label) {
		return nil, &ModelError{Model: name, Code: wire.Code(entry.Fail), Msg: fmt.Sprintf("scripted failure (%s) at turn %d", entry.Fail, turn+1), NotSent: true}
	}
	resp := &xctv1.ProposeResponse{Output: entry.output(), Model: name}
	if entry.Tokens != nil {
		resp.Usage = &xctv1.Usage{InputTokens: entry.Tokens.Input, OutputTokens: entry.Tokens.Output}
	}
	return resp, nil
}

// Close implements Proposer.
func (s *Script) Close() error { return nil }

// errorCode returns the code of a model-facing error response, "" otherwise.
func errorCode(response string) string {
	var r struct {
		Status string `json:"status"`
		Code   string `json:"code"`
	}
	if json.Unmarshal([]byte(response), &r) != nil || r.Status != "error" {
		return ""
	}
	return r.Code
}
