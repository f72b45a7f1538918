package lctllive

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/session"
)

// NewSession starts an lctl session that appends each event durably to the
// chain on XCT's LCTL stream before returning. The stream must exist (the
// admin makes it: xct nats provision); the chain must not exist yet: the
// session is its single writer.
//
// nc must be a NATS user that may publish to lctl.chain.<chainID>: in XCT
// that is only the orchestrator's user and the admin, and either may write
// every run's chain (NATS permissions match whole subject tokens, and the
// run's chain id is a token under lctl.chain.). So this is for tools that
// already hold one of those (tests, an operator's own tooling), never for
// an application agent: giving an agent those credentials gives it every
// run's record. A least-privilege session writer needs a subject space and
// stream of its own (e.g. lctl.session.<writer>.<chain> on a stream the
// tracer also consumes, ids that cannot be a run's) and a NATS user per
// writer; XCT has neither yet (docs/status.md, issue 11).
func NewSession(ctx context.Context, nc *nats.Conn, chainID string, opts session.Options) (*session.Session, error) {
	if err := lctl.ValidateChainID(chainID); err != nil {
		return nil, err
	}
	log, err := eventlog.Open(ctx, nc)
	if err != nil {
		return nil, fmt.Errorf("lctl session: %w", err)
	}
	w, err := log.NewChainWriter(chainID)
	if err != nil {
		return nil, fmt.Errorf("lctl session: %w", err)
	}
	return session.NewSink(chainID, w, opts)
}
