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
	// Invoke must honour ctx, and a tool with side effects calls Commit
	// right before the effect, so an effect never lands after the step was
	// reported as timed out.
	Invoke(ctx context.Context, args map[string]any) (result any, err *xctv1.Error)
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

func errNotCommitted() *xctv1.Error {
	return wire.Errorf(wire.CodeTimeout, "the step's deadline passed before its effect was committed; nothing was changed")
}

// gate decides, exactly once, between a tool committing its effect and the
// executor giving up on the tool at its deadline.
type gate struct {
	mu        sync.Mutex
	committed bool
	abandoned bool
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
