// Package grpcxtest gives tests real credentials for XCT's gRPC servers: a
// tokens file with the development principals (internal/auth's
// DevCredentials), server options that authenticate with it over plaintext
// loopback, and connections that call as one of the principals.
package grpcxtest

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
)

// Service is the principal of XCT's own services in the credentials.
const Service = auth.DevServicePrincipal

// Creds are the credentials of one test.
type Creds struct {
	// Path is the tokens file.
	Path    string
	Entries []auth.TokenEntry
	Authn   *auth.Authenticator
}

// New writes a credentials file in a temporary directory.
func New(tb testing.TB) *Creds {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "credentials.yaml")
	entries, err := auth.DevCredentials(path)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := auth.New(context.Background(), auth.Config{TokensFile: path}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &Creds{Path: path, Entries: entries, Authn: a}
}

// ServerOptions serve plaintext on loopback and authenticate with the
// credentials.
func (c *Creds) ServerOptions() []grpcx.ServerOption {
	return []grpcx.ServerOption{grpcx.WithSecurity(grpcx.Security{Plaintext: true}), grpcx.WithAuth(c.Authn)}
}

// Token is a principal's token (dev, alice, bob, carol, dave, admin or
// Service).
func (c *Creds) Token(tb testing.TB, principal string) string {
	tb.Helper()
	tok, ok := auth.TokenOf(c.Entries, principal)
	if !ok {
		tb.Fatalf("no token for %q", principal)
	}
	return tok
}

// Dial connects to addr as principal; the connection is closed when the
// test ends.
func (c *Creds) Dial(tb testing.TB, addr, principal string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpcx.Dial(addr, grpcx.WithToken(c.Token(tb, principal)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
