package cli

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/xct-dev/xct/lctl"
)

// Live is what lctl's live commands (--chain, export, replay --chain, tail)
// need of the system that writes the chains: a connection to its tracer and
// a read of its event stream. lctl knows neither how a connection is
// secured nor where events are stored; the composition root (cmd/lctl)
// wires XCT's implementation (internal/lctllive). Without one, the live
// commands say so and the file commands work as ever.
type Live interface {
	// DialTracer connects to the tracer API (lctl.v1.TracerService) at
	// addr with the caller's credentials.
	DialTracer(addr string, cred Credentials) (grpc.ClientConnInterface, io.Closer, error)
	// Follow delivers a chain's events (every chain's for chainID "") in
	// order to fn from the stream at natsURL, then new ones as they are
	// appended, until ctx ends, fn returns an error (ErrStop ends cleanly)
	// or, with stopAtEnd, the events stored at the start were delivered.
	// It only reads: a stream that does not exist is ErrNoStream and is
	// not created; a chain without events is ErrNoChain. natsCreds is a
	// file with the NATS credentials of the read-only user ("" connects
	// without).
	Follow(ctx context.Context, natsURL, natsCreds, chainID string, stopAtEnd bool, fn func(lctl.Event) error) error
}

// Credentials are the flags that say who calls the tracer and how the
// connection is secured (mTLS when TLSCA is set, else plaintext).
type Credentials struct {
	// Token is a bearer token; As names a principal whose token is read
	// from the credentials file File (the implementation's default when
	// empty).
	Token, As, File string
	// TLSCert, TLSKey and TLSCA are PEM files.
	TLSCert, TLSKey, TLSCA string
}

// Errors a Live implementation returns (wrapped) for the CLI to explain.
var (
	// ErrStop, returned by a Follow callback, ends following cleanly.
	ErrStop = errors.New("stop following")
	// ErrNoStream means the server has no event stream: nothing was ever
	// written there (or it is another server).
	ErrNoStream = errors.New("no event stream")
	// ErrNoChain means the stream holds no event of the chain.
	ErrNoChain = errors.New("chain has no events")
	// errNoLive means this lctl was built without a live source.
	errNoLive = errors.New("this lctl has no live source wired (cmd/lctl wires XCT's): read chain files instead")
)
