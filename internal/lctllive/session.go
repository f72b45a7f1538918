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
// chain on XCT's LCTL stream (creating the stream if needed: it writes)
// before returning. The chain must not exist yet: the session is its single
// writer.
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
