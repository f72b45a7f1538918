// Package lctllive is XCT's side of lctl's live commands: it implements
// cli.Live with XCT's transport (grpcx: TLS, tokens from the credentials
// file) and XCT's event stream (internal/eventlog). lctl itself imports
// nothing of XCT; cmd/lctl wires this in.
package lctllive

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/natsauth/natscred"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/cli"
)

// Live reaches a running XCT: its tracer over gRPC and its LCTL stream on
// NATS JetStream, read only.
type Live struct{}

var _ cli.Live = Live{}

// DialTracer connects with grpcx: mTLS when the CA is set, the bearer
// token given or read from the credentials file for the principal named.
func (Live) DialTracer(addr string, c cli.Credentials) (grpc.ClientConnInterface, io.Closer, error) {
	opts := []grpcx.DialOption{grpcx.WithTLS(grpcx.TLSFiles{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA})}
	tok, err := auth.ClientToken(c.Token, c.As, c.File)
	switch {
	case errors.Is(err, auth.ErrNoCredentials) && c.As == "":
		// The tracer will say UNAUTHENTICATED; lctl says what to do.
	case err != nil:
		return nil, nil, err
	default:
		opts = append(opts, grpcx.WithToken(tok))
	}
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		return nil, nil, err
	}
	return conn, conn, nil
}

// Follow reads the LCTL stream at natsURL. It binds to the stream and
// never creates or changes it (eventlog.Bind): a server without the
// stream is cli.ErrNoStream.
func (Live) Follow(ctx context.Context, natsURL, natsCreds, chainID string, stopAtEnd bool, fn func(lctl.Event) error) error {
	var cred natscred.Credentials
	if natsCreds != "" {
		f, err := natscred.Load(natsCreds)
		if err != nil {
			return err
		}
		// The read-only user: tail never needs more.
		if cred, err = f.For(natscred.Reader); err != nil {
			return fmt.Errorf("%s: %w", natsCreds, err)
		}
	}
	nc, err := nats.Connect(natsURL, nats.Name("lctl tail"), cred.Option())
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w (--nats or NATS_URL)", natsURL, err)
	}
	defer nc.Close()
	log, err := eventlog.Bind(ctx, nc)
	if errors.Is(err, eventlog.ErrNoStream) {
		return fmt.Errorf("%w: %w", cli.ErrNoStream, err)
	}
	if err != nil {
		return err
	}
	err = log.Follow(ctx, chainID, eventlog.FollowOptions{StopAtEnd: stopAtEnd}, func(e lctl.Event) error {
		if err := fn(e); errors.Is(err, cli.ErrStop) {
			return eventlog.ErrStop
		} else if err != nil {
			return err
		}
		return nil
	})
	if errors.Is(err, eventlog.ErrChainNotFound) {
		return fmt.Errorf("%w: %w", cli.ErrNoChain, err)
	}
	return err
}
