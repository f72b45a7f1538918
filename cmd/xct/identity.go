package main

import (
	"errors"
	"flag"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
)

// identity is who a client command calls as and how it connects: a bearer
// token (--token, else --as NAME's token from the credentials file, else
// the file's "dev"), and mTLS when --tls-ca is set.
type identity struct {
	token, as, credentials string
	tls                    grpcx.TLSFiles
	plaintextAny           bool
}

// register adds the identity flags; asFlag names the flag that picks a
// principal from the credentials file ("as", or "by" where --as means
// something else).
func (id *identity) register(fs *flag.FlagSet, asFlag string) {
	fs.StringVar(&id.token, "token", "", "bearer token to call with (prefer XCT_TOKEN: the command line is visible to other users)")
	fs.StringVar(&id.as, asFlag, "", "call as this principal, with its token from the credentials file (default: dev)")
	fs.StringVar(&id.credentials, "credentials", "", "credentials file to pick the token from (default "+auth.DefaultCredentialsPath+", written by xct dev)")
	fs.StringVar(&id.tls.Cert, "tls-cert", "", "client certificate (PEM) for mTLS")
	fs.StringVar(&id.tls.Key, "tls-key", "", "the client certificate's key (PEM)")
	fs.StringVar(&id.tls.CA, "tls-ca", "", "CA bundle (PEM) to verify the server with; without it the connection is plaintext")
	fs.BoolVar(&id.plaintextAny, "plaintext-any", false, "allow sending the token without TLS to a non-loopback address")
}

// dial connects to addr with the command's identity. Without any
// credential it still dials: the server answers UNAUTHENTICATED and
// rpcHint says what to do.
func (id *identity) dial(addr string) (*grpc.ClientConn, error) {
	opts := []grpcx.DialOption{grpcx.WithTLS(id.tls)}
	tok, err := auth.ClientToken(id.token, id.as, id.credentials)
	switch {
	case errors.Is(err, auth.ErrNoCredentials) && id.as == "":
	case err != nil:
		return nil, err
	default:
		opts = append(opts, grpcx.WithToken(tok))
	}
	if id.plaintextAny {
		opts = append(opts, grpcx.WithPlaintextAny())
	}
	return grpcx.Dial(addr, opts...)
}

// rpcHint is a hint for an authentication or authorization error.
func rpcHint(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return " (hint: pass --token or XCT_TOKEN, or --as NAME to use NAME's token from " + auth.DefaultCredentialsPath + ", which xct dev writes; --credentials names another file)"
	case codes.PermissionDenied:
		return " (hint: call as a principal with the role, e.g. --as NAME)"
	}
	return ""
}

// noEnv marks a flag that is never set from the environment (xct resolve's
// --as is a decision, not XCT_AS).
type noEnv struct{ flag.Value }

func (noEnv) NoEnv() {}

// stringValue is a string flag.Value.
type stringValue struct{ p *string }

func (v stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v stringValue) Set(s string) error { *v.p = s; return nil }
