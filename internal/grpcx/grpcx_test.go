package grpcx

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/devcerts"
	"github.com/xct-dev/xct/internal/testutil"
)

// A tiny service of the test's own: Ping answers with the caller's
// principal, Panic panics, Count counts handler runs.
type pingServer struct{ calls atomic.Int64 }

func pingHandler(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := &emptypb.Empty{}
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			srv.(*pingServer).calls.Add(1)
			if method == "Panic" {
				panic("boom")
			}
			p, _ := auth.FromContext(ctx)
			return wrapperspb.String(p.Name), nil
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Ping/" + method}, h)
	}
}

var pingDesc = grpc.ServiceDesc{
	ServiceName: "test.Ping",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Ping", Handler: pingHandler("Ping")},
		{MethodName: "Panic", Handler: pingHandler("Panic")},
	},
}

func testTable() auth.Table {
	t := auth.DefaultTable()
	t["/test.Ping/Ping"] = auth.Rule{Roles: []string{auth.RoleService, auth.RoleSubmitter}}
	t["/test.Ping/Panic"] = auth.Rule{AnyRole: true}
	return t
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve starts a server on 127.0.0.1 and returns it with its ping service.
func serve(t *testing.T, opts ...ServerOption) (*Server, *pingServer) {
	t.Helper()
	return serveLogged(t, quietLog(), opts...)
}

// serveLogged is serve with the server logging to log.
func serveLogged(t *testing.T, log *slog.Logger, opts ...ServerOption) (*Server, *pingServer) {
	t.Helper()
	srv := NewServer("test", log, append([]ServerOption{WithTable(testTable())}, opts...)...)
	ps := &pingServer{}
	srv.GRPC.RegisterService(&pingDesc, ps)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, ps
}

func ping(t *testing.T, addr string, opts ...DialOption) (string, error) {
	t.Helper()
	conn, err := Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := &wrapperspb.StringValue{}
	err = conn.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, out)
	return out.GetValue(), err
}

// pki writes a CA and certificates into a directory.
type pki struct {
	dir string
	ca  *devcerts.CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := devcerts.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca}
	p.write(t, "ca.crt", ca.CertPEM)
	return p
}

func (p *pki) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	// Write and rename, as a rotation does.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *pki) issue(t *testing.T, name string, leaf devcerts.Leaf) TLSFiles {
	t.Helper()
	c, k, err := p.ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	return TLSFiles{Cert: p.write(t, name+".crt", c), Key: p.write(t, name+".key", k), CA: filepath.Join(p.dir, "ca.crt")}
}

func TestMTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serverFiles := p.issue(t, "validator", devcerts.ServiceLeaf("validator"))
	srv, ps := serve(t, WithSecurity(Security{TLS: serverFiles}))
	orch := p.issue(t, "orchestrator", devcerts.ServiceLeaf("orchestrator"))

	got, err := ping(t, srv.Addr(), WithTLS(orch))
	if err != nil || got != "service:orchestrator" {
		t.Fatalf("service certificate: %q %v", got, err)
	}

	// A client certificate without a service identity secures the
	// connection but names nobody.
	client := p.issue(t, "client", devcerts.Leaf{CommonName: "someone"})
	if _, err := ping(t, srv.Addr(), WithTLS(client)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("client certificate without a token: %v", err)
	}

	// A certificate from another CA, even with a service identity, fails
	// the handshake; so does no certificate.
	other := newPKI(t)
	stranger := other.issue(t, "orchestrator", devcerts.ServiceLeaf("orchestrator"))
	stranger.CA = serverFiles.CA // it trusts our server, we do not trust it
	before := ps.calls.Load()
	if _, err := ping(t, srv.Addr(), WithTLS(stranger)); status.Code(err) != codes.Unavailable {
		t.Fatalf("certificate of another CA: %v", err)
	}
	if _, err := ping(t, srv.Addr(), WithTLS(TLSFiles{CA: serverFiles.CA})); status.Code(err) != codes.Unavailable {
		t.Fatalf("no client certificate: %v", err)
	}
	// And a client does not trust a server of another CA.
	if _, err := ping(t, srv.Addr(), WithTLS(TLSFiles{Cert: orch.Cert, Key: orch.Key, CA: filepath.Join(other.dir, "ca.crt")})); status.Code(err) != codes.Unavailable {
		t.Fatalf("server of another CA: %v", err)
	}
	// Plaintext to a TLS server fails too.
	if _, err := ping(t, srv.Addr(), WithToken("whatever-token-123")); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext to TLS: %v", err)
	}
	if ps.calls.Load() != before {
		t.Fatal("a refused connection reached the handler")
	}
	// Health is served without credentials but still over mTLS.
	conn, err := Dial(srv.Addr(), WithTLS(TLSFiles{Cert: client.Cert, Key: client.Key, CA: client.CA}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
}

// serverSerial dials with a fresh connection and returns the serial number
// of the certificate the server presented.
func serverSerial(t *testing.T, addr string, files TLSFiles) (string, error) {
	t.Helper()
	conn, err := Dial(addr, WithTLS(files))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pr peer.Peer
	if err := conn.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, &wrapperspb.StringValue{}, grpc.Peer(&pr)); err != nil {
		return "", err
	}
	info := pr.AuthInfo.(credentials.TLSInfo)
	return info.State.PeerCertificates[0].SerialNumber.String(), nil
}

func TestCertificateRotationWithoutRestart(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	serverFiles := p.issue(t, "validator", devcerts.ServiceLeaf("validator"))
	logs := &testutil.Buffer{}
	srv, _ := serveLogged(t, slog.New(slog.NewTextHandler(logs, nil)), WithSecurity(Security{TLS: serverFiles}))
	orch := p.issue(t, "orchestrator", devcerts.ServiceLeaf("orchestrator"))
	first, err := serverSerial(t, srv.Addr(), orch)
	if err != nil {
		t.Fatal(err)
	}

	// The server's certificate is renewed in place.
	p.issue(t, "validator", devcerts.ServiceLeaf("validator"))
	testutil.Eventually(t, 30*time.Second, func() error {
		s, err := serverSerial(t, srv.Addr(), orch)
		if err != nil {
			return err
		}
		if s == first {
			return errors.New("the server still presents its old certificate")
		}
		return nil
	})

	// The CA is rotated: the bundle now holds only a new CA. Certificates
	// of the old one stop working; the new one's work.
	next, err := devcerts.NewCA("next CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nextPKI := &pki{dir: t.TempDir(), ca: next}
	nextPKI.write(t, "ca.crt", next.CertPEM)
	newServer := nextPKI.issue(t, "validator", devcerts.ServiceLeaf("validator"))
	newOrch := nextPKI.issue(t, "orchestrator", devcerts.ServiceLeaf("orchestrator"))
	for _, f := range []struct{ from, to string }{{newServer.Cert, serverFiles.Cert}, {newServer.Key, serverFiles.Key}, {newServer.CA, serverFiles.CA}} {
		b, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		p.write(t, filepath.Base(f.to), b)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := ping(t, srv.Addr(), WithTLS(newOrch))
		return err
	})
	if _, err := ping(t, srv.Addr(), WithTLS(orch)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a certificate of the retired CA: %v", err)
	}

	// A broken rotation (a key that does not match) keeps the last good
	// pair in force.
	other, _, err := next.Issue(devcerts.ServiceLeaf("validator"))
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, "validator.crt", other)
	// Until the server has looked at the broken files (it logs that it
	// keeps the last good ones), and after, the good pair serves.
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, err := ping(t, srv.Addr(), WithTLS(newOrch)); err != nil {
			t.Fatalf("after a broken rotation: %v", err)
		}
		if !strings.Contains(logs.String(), "TLS files changed but cannot be used") {
			return errors.New("the server has not looked at the broken files yet")
		}
		return nil
	})
	if _, err := ping(t, srv.Addr(), WithTLS(newOrch)); err != nil {
		t.Fatalf("after a broken rotation: %v", err)
	}
}

func TestPlaintextOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sec  Security
		addr string
		ok   bool
	}{
		{"nothing configured", Security{}, "127.0.0.1:0", false},
		{"plaintext on loopback", Security{Plaintext: true}, "127.0.0.1:0", true},
		{"plaintext on localhost", Security{Plaintext: true}, "localhost:0", true},
		{"plaintext on every address", Security{Plaintext: true}, ":0", false},
		{"plaintext on 0.0.0.0", Security{Plaintext: true}, "0.0.0.0:0", false},
		{"tls and plaintext", Security{Plaintext: true, TLS: TLSFiles{CA: "x"}}, "127.0.0.1:0", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.sec.checkTransport(tc.addr); (err == nil) != tc.ok {
				t.Fatalf("err = %v", err)
			}
		})
	}
	// --plaintext-any is checked, not bound: binding every interface is not
	// done in tests.
	if err := (Security{Plaintext: true, PlaintextAny: true}).checkTransport(":7701"); err != nil {
		t.Fatal(err)
	}
	srv := NewServer("t", quietLog(), WithSecurity(Security{TLS: TLSFiles{Cert: "/nonexistent.crt", Key: "/nonexistent.key", CA: "/nonexistent.ca"}}))
	if err := srv.Listen("127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("missing TLS files: %v", err)
	}
	if _, err := Dial("validator:7702", WithToken("a-token-of-sixteen")); err == nil {
		t.Fatal("a token would go in plaintext to a non-loopback host")
	}
}

func tokensFile(t *testing.T) (*auth.Authenticator, []auth.TokenEntry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials.yaml")
	entries, err := auth.DevCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(context.Background(), auth.Config{TokensFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, entries
}

func TestAuthenticationAndAuthorization(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	srv, ps := serve(t, WithSecurity(Security{Plaintext: true}), WithAuth(a))
	tok := func(name string) string { v, _ := auth.TokenOf(creds, name); return v }

	if got, err := ping(t, srv.Addr(), WithToken(tok("alice"))); err != nil || got != "alice" {
		t.Fatalf("alice: %q %v", got, err)
	}
	if got, err := ping(t, srv.Addr(), WithToken(tok(auth.DevServicePrincipal))); err != nil || got != auth.DevServicePrincipal {
		t.Fatalf("service: %q %v", got, err)
	}
	before := ps.calls.Load()
	tests := []struct {
		name string
		opts []DialOption
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"unknown token", []DialOption{WithToken("not-a-token-of-anyone")}, codes.Unauthenticated},
		{"no role", []DialOption{WithToken(tok("bob"))}, codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ping(t, srv.Addr(), tc.opts...); status.Code(err) != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
	if ps.calls.Load() != before {
		t.Fatal("a refused call reached the handler")
	}
}

func TestDeadlineRequired(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	srv, ps := serve(t, WithSecurity(Security{Plaintext: true}), WithAuth(a))
	tok, _ := auth.TokenOf(creds, "alice")
	// A raw client, without grpcx's default deadline.
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(newBearerCreds(tok, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	err = conn.Invoke(context.Background(), "/test.Ping/Ping", &emptypb.Empty{}, &wrapperspb.StringValue{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("no deadline: %v", err)
	}
	if ps.calls.Load() != 0 {
		t.Fatal("a call without a deadline reached the handler")
	}
	// Health needs none.
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a deadline: %v", err)
	}
	// grpcx.Dial adds one.
	if _, err := ping(t, srv.Addr(), WithToken(tok)); err != nil {
		t.Fatal(err)
	}
	// And the handler sees it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl, _ := ctx.Deadline()
	var got time.Time
	probe := NewServer("probe", quietLog(), WithSecurity(Security{Plaintext: true}), WithAuth(a), WithTable(testTable()))
	probe.GRPC.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Ping", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Ping",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
			_ = dec(&emptypb.Empty{})
			return icp(ctx, &emptypb.Empty{}, &grpc.UnaryServerInfo{FullMethod: "/test.Ping/Ping"}, func(ctx context.Context, _ any) (any, error) {
				got, _ = ctx.Deadline()
				return wrapperspb.String(""), nil
			})
		},
	}}}, struct{}{})
	if err := probe.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = probe.Serve() }()
	defer probe.Stop(context.Background())
	pc, err := Dial(probe.Addr(), WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	if err := pc.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, &wrapperspb.StringValue{}); err != nil {
		t.Fatal(err)
	}
	if d := got.Sub(dl); d > time.Second || d < -time.Second {
		t.Fatalf("handler deadline %v, caller's %v", got, dl)
	}
}

func TestRateLimitPerPrincipal(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	srv, _ := serve(t, WithSecurity(Security{Plaintext: true, RateLimit: 0.01, RateBurst: 3}), WithAuth(a))
	tok := func(name string) string { v, _ := auth.TokenOf(creds, name); return v }
	conn, err := Dial(srv.Addr(), WithToken(tok("alice")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	call := func(c *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, &wrapperspb.StringValue{})
	}
	for i := range 3 {
		if err := call(conn); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	if err := call(conn); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call past the burst: %v", err)
	}
	// Another principal has its own bucket; the services are not limited.
	if _, err := ping(t, srv.Addr(), WithToken(tok("dev"))); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	for range 10 {
		if _, err := ping(t, srv.Addr(), WithToken(tok(auth.DevServicePrincipal))); err != nil {
			t.Fatalf("service: %v", err)
		}
	}
}

func TestPanicIsInternalAndTheServerKeepsServing(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	srv, ps := serve(t, WithSecurity(Security{Plaintext: true}), WithAuth(a))
	tok, _ := auth.TokenOf(creds, "alice")
	conn, err := Dial(srv.Addr(), WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		err := conn.Invoke(ctx, "/test.Ping/Panic", &emptypb.Empty{}, &wrapperspb.StringValue{})
		if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "boom") {
			t.Fatalf("panic: %v", err)
		}
	}
	out := &wrapperspb.StringValue{}
	if err := conn.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, out); err != nil || out.GetValue() != "alice" {
		t.Fatalf("after the panics: %q %v", out.GetValue(), err)
	}
	if ps.calls.Load() != 4 {
		t.Fatalf("%d handler runs", ps.calls.Load())
	}
}

func TestServeRefusesAMethodWithoutARule(t *testing.T) {
	t.Parallel()
	srv := NewServer("t", quietLog(), WithSecurity(Security{Plaintext: true})) // the default table has no test.Ping
	srv.GRPC.RegisterService(&pingDesc, &pingServer{})
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	err := srv.Serve()
	if err == nil || !strings.Contains(err.Error(), "/test.Ping/Ping") {
		t.Fatalf("serve: %v", err)
	}
	srv.Stop(context.Background())
}

func TestDevCertsAreUsable(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := devcerts.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := devcerts.Write(dir); err == nil {
		t.Fatal("existing certificates were overwritten")
	}
	files := func(name string) TLSFiles {
		return TLSFiles{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	}
	srv, _ := serve(t, WithSecurity(Security{TLS: files("executor")}))
	// Dialled by name, as in a laptop's config.
	addr := strings.Replace(srv.Addr(), "127.0.0.1", "localhost", 1)
	if got, err := ping(t, addr, WithTLS(files("orchestrator"))); err != nil || got != "service:orchestrator" {
		t.Fatalf("%q %v", got, err)
	}
	raw, err := os.ReadFile(files("validator").Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://xct.local/service/validator" || !strings.Contains(strings.Join(cert.DNSNames, ","), "validator.xct.svc") {
		t.Fatalf("SANs %v %v", cert.URIs, cert.DNSNames)
	}
	if fi, err := os.Stat(files("validator").Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v %v", fi.Mode(), err)
	}
}

// TestBearerMetadataKept: the bearer token's metadata is made once and
// handed to gRPC at every call, which is only right while gRPC copies it
// and changes nothing in it. Calls, each authenticated by it, leave it as
// it was.
func TestBearerMetadataKept(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	srv, ps := serve(t, WithSecurity(Security{Plaintext: true}), WithAuth(a))
	tok, _ := auth.TokenOf(creds, "alice")
	b := newBearerCreds(tok, false)
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(b))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out := &wrapperspb.StringValue{}
		err := conn.Invoke(ctx, "/test.Ping/Ping", &emptypb.Empty{}, out)
		cancel()
		if err != nil || out.GetValue() != "alice" {
			t.Fatalf("call %d: %q, %v", i, out.GetValue(), err)
		}
	}
	if ps.calls.Load() != 3 {
		t.Fatalf("%d calls reached the handler, want 3", ps.calls.Load())
	}
	md, err := b.GetRequestMetadata(context.Background())
	if err != nil || len(md) != 1 || md["authorization"] != "Bearer "+tok {
		t.Fatalf("the metadata changed: %v, %v", md, err)
	}
}

// A peer that was down for minutes is tried again within ReconnectMaxDelay,
// not gRPC's default of up to 120 s; the first attempts keep gRPC's pace.
func TestReconnectBackoffIsBounded(t *testing.T) {
	p := connectParams()
	if p.Backoff.MaxDelay != ReconnectMaxDelay || ReconnectMaxDelay > 10*time.Second {
		t.Fatalf("reconnect max delay %v (ReconnectMaxDelay %v): want at most 10s", p.Backoff.MaxDelay, ReconnectMaxDelay)
	}
	if p.Backoff.BaseDelay != backoff.DefaultConfig.BaseDelay || p.Backoff.Multiplier != backoff.DefaultConfig.Multiplier || p.Backoff.Jitter != backoff.DefaultConfig.Jitter {
		t.Fatalf("reconnect backoff %+v: want gRPC's default base, multiplier and jitter", p.Backoff)
	}
	if p.MinConnectTimeout < 10*time.Second {
		t.Fatalf("min connect timeout %v: a slow handshake must not be cut short", p.MinConnectTimeout)
	}
}
