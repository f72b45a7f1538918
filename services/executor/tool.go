package executor

import (
	"context"
	"sync"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Tool is one action the executor can run. A tool is deterministic: the same
// arguments against the same world give the same result.
type Tool interface {
	// Descriptor says what the tool is: its catalog name, description, input
	// schema (JSON Schema draft 2020-12, as JSON text), effect class,
	// idempotency, timeout and output cap. A zero timeout or cap means the
	// executor's defaults.
	Descriptor() *xctv1.ToolDescriptor
	// Invoke runs the tool once. args has already been validated against the
	// input schema, but a tool still checks what it relies on and answers
	// INVALID_ARGUMENT instead of misbehaving. result must encode as JSON.
	// Invoke must honour ctx, and a tool with side effects calls Commit (or,
	// when reversible, CommitCompensated) right before the effect, so an
	// effect never lands after the step was reported as timed out.
	Invoke(ctx context.Context, args map[string]any) (result any, err *xctv1.Error)
}

// CompensatedFirst is a Tool that records its compensation
// (CommitCompensated) before every effect it makes, on every path, and
// makes no effect when that record cannot be written. A step of such a
// tool whose attempt never recorded a compensation has not acted: when
// its executor stopped mid-step (its record pending past its deadline),
// the step is recorded as not executed instead of in doubt, with a
// conditional update of the very record revision the compensation would
// have to replace (so a stalled executor that wakes cannot record its
// compensation, and so cannot act, after that). The built-in fs.delete
// and fs.move are.
type CompensatedFirst interface {
	Tool
	// CompensatesFirst marks the promise; it is never called.
	CompensatesFirst()
}

// Previewer is a Tool that can show what a call would do without doing it
// (a dry run), for the human who approves the step.
type Previewer interface {
	Preview(ctx context.Context, args map[string]any) (*xctv1.Preview, *xctv1.Error)
}

// callClassifier is implemented by tools whose effect class and
// idempotency depend on the arguments (shell.exec: on the binary). The
// descriptor then declares the worst case, for the validator; the step
// record keeps the call's own class, which decides whether a step in doubt
// may be re-run.
type callClassifier interface {
	classify(args map[string]any) (xctv1.Effect, bool)
}

// StepID returns the id of the step being executed, its idempotency key;
// "" when the tool is not called by the executor. Tools that call other
// systems pass it on (ToolService's idempotency_key, MCP's _meta).
func StepID(ctx context.Context) string {
	if g, ok := ctx.Value(gateKey{}).(*gate); ok {
		return g.stepID
	}
	return ""
}

// Commit marks the point of no return of one invocation: a tool calls it
// right before it changes the world (a rename, a remote call) and stops if
// it returns an error. Once Commit returned nil the executor waits for the
// tool's own outcome instead of reporting TIMEOUT, so the step's reported
// outcome is always the true one; the tool must then finish promptly.
//
// Outside the executor (a tool called directly) Commit only checks ctx.
func Commit(ctx context.Context) *xctv1.Error {
	if ctx.Err() != nil {
		return errNotCommitted()
	}
	if g, ok := ctx.Value(gateKey{}).(*gate); ok && !g.commit() {
		return errNotCommitted()
	}
	return nil
}

// CommitCompensated is Commit for a reversible tool: after committing it
// stores c, how to undo the effect, with the step's record, before the
// tool makes the effect. If c cannot be stored it returns an error and the
// tool must stop without acting, so every effect of a reversible tool has
// its compensation on record, even if the executor dies right after.
//
// Outside the executor it is Commit.
func CommitCompensated(ctx context.Context, c *Compensation) *xctv1.Error {
	if e := Commit(ctx); e != nil {
		return e
	}
	g, ok := ctx.Value(gateKey{}).(*gate)
	if !ok || g.compensate == nil {
		return nil
	}
	if err := g.compensate(c); err != nil {
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure,
			"the step's compensation could not be recorded, so nothing was changed: %v", err),
			map[string]any{"changed": false})
	}
	return nil
}

func errNotCommitted() *xctv1.Error {
	return wire.Errorf(wire.CodeTimeout, "the step's deadline passed before its effect was committed; nothing was changed")
}

// gate decides, exactly once, between a tool committing its effect and the
// executor giving up on the tool at its deadline. It also carries what a
// tool may need to know about its step.
type gate struct {
	mu        sync.Mutex
	committed bool
	abandoned bool

	// stepID is the step's idempotency key ("" outside a recorded step).
	stepID string
	// runID is the run the step belongs to ("" outside a recorded step).
	runID string
	// compensate stores a compensation with the step's record; nil when
	// the step is not recorded.
	compensate func(*Compensation) error
}

type gateKey struct{}

// commit reports whether the tool may go ahead; false once abandoned.
func (g *gate) commit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return false
	}
	g.committed = true
	return true
}

// abandon reports whether the executor may report TIMEOUT; false once the
// tool committed.
func (g *gate) abandon() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.committed {
		return false
	}
	g.abandoned = true
	return true
}
