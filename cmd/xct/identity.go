package main

import (
	"errors"
	"flag"
	"fmt"

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
	dataDir, cluster       string
	addrs                  []addrSlot
	tls                    grpcx.TLSFiles
	plaintextAny           bool
}

// register adds the identity flags; asFlag names the flag that picks a
// principal from the credentials file ("as", or "by" where --as means
// something else).
func (id *identity) register(fs *flag.FlagSet, asFlag string) {
	fs.StringVar(&id.token, "token", "", "bearer token to call with (prefer XCT_TOKEN: the command line is visible to other users)")
	fs.StringVar(&id.as, asFlag, "", "call as this principal, with its token from the credentials file (default: dev)")
	fs.StringVar(&id.credentials, "credentials", "", "credentials file to pick the token from (default DATA_DIR/dev/credentials.yaml, written by xct dev)")
	fs.StringVar(&id.dataDir, "data-dir", "", "the data directory of the xct dev to call (default "+defaultDataDir+"): its dev/credentials.yaml and dev/addresses.yaml")
	fs.StringVar(&id.cluster, "cluster", "", "addresses file naming the services' addresses (default DATA_DIR/dev/addresses.yaml, written by xct dev while it runs)")
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
	path := id.credentialsPath()
	tok, err := auth.ClientToken(id.token, id.as, path)
	switch {
	case errors.Is(err, auth.ErrNoCredentials) && id.as == "":
		credentialsTried = path
	case errors.Is(err, auth.ErrNoCredentials):
		return nil, fmt.Errorf("no credentials for --as %s: %s does not exist (run xct dev with that data directory, or pass --data-dir / XCT_DATA_DIR, --credentials, or --token)", id.as, path)
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

// credentialsTried is the credentials file a command looked for and did
// not find (it then called without a token).
var credentialsTried string

// rpcHint is a hint for an authentication or authorization error.
func rpcHint(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		tried := ""
		if credentialsTried != "" {
			tried = "no token was sent: " + credentialsTried + " does not exist; "
		}
		return " (hint: " + tried + "pass --token or XCT_TOKEN, or --data-dir / XCT_DATA_DIR for the data directory of the xct dev to call (its dev/credentials.yaml), or --credentials FILE; --as NAME picks NAME's token)"
	case codes.PermissionDenied:
		return " (hint: call as a principal with the role, e.g. --as NAME)"
	}
	return ""
}
