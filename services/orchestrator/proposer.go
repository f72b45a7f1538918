package orchestrator

import (
	"context"
	"fmt"
	"strings"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Proposer is a model: it returns one decision, as raw JSON text, for a
// context the orchestrator rebuilt from the chain. A Proposer holds no state
// about the run between calls.
type Proposer interface {
	// Name is the agent name the model's events are recorded under.
	Name() string
	// Propose asks for the next decision.
	Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error)
	// Close releases the proposer's connections.
	Close() error
}

// newProposer builds the proposer a model reference names:
// "scripted:FILE", "openai:MODEL" or "grpc:ADDR".
func (s *Service) newProposer(ref string) (Proposer, error) {
	kind, arg, ok := strings.Cut(ref, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("%w: %q (want scripted:FILE, openai:MODEL or grpc:ADDR)", ErrBadModel, ref)
	}
	switch kind {
	case "scripted":
		return loadScript(s.cfg.ScriptsDir, arg)
	case "openai":
		return newOpenAIProposer(arg, s.cfg.OpenAI)
	case "grpc":
		if !s.cfg.grpcProposerAllowed(arg) {
			return nil, fmt.Errorf("%w: grpc proposer %q is not in -allow-grpc-proposer", ErrBadModel, arg)
		}
		return dialProposer(arg, s.proposerDial...)
	case "func":
		if p, ok := s.funcs[arg]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown model kind %q in %q", ErrBadModel, kind, ref)
}

// instructions is the protocol prompt every model receives.
const instructions = `You operate inside XCT. You never act yourself: you propose ONE tool call at a time and the system decides whether to run it.
Answer with exactly one JSON object and nothing else, in one of two shapes:
  {"next_step": {"tool": "<tool name>", "arguments": {<arguments object>}, "goal": "<why>"}}
  {"done": true, "message": "<what was achieved>"}
Use only tools from the catalog, with arguments that satisfy the tool's input schema.
The system answers {"status": "success", "result": ...} or {"status": "error", "code": "...", "message": "...", "details": {...}}.
An error is information: read it and propose accordingly. Do not repeat a refused proposal unchanged.`
