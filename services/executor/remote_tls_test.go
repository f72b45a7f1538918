package executor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/devcerts"
)

// writePEM issues a certificate from ca and writes it and its key under
// dir as name.crt and name.key.
func writePEM(t *testing.T, ca *devcerts.CA, dir, name string, leaf devcerts.Leaf) (crt, key string) {
	t.Helper()
	c, k, err := ca.Issue(leaf)
	must(t, err)
	crt, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	must(t, os.WriteFile(crt, c, 0o600))
	must(t, os.WriteFile(key, k, 0o600))
	return crt, key
}

// TestExternalToolsOverTLS: a tool server configured with tls is dialled
// over mutual TLS — the executor verifies the server against the CA and
// presents its client certificate, which the server requires. A server
// whose certificate comes from another CA is refused at the handshake and
// none of its tools is served; a client without the right certificate is
// refused by the server.
func TestExternalToolsOverTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := devcerts.NewCA("tools CA", time.Hour)
	must(t, err)
	other, err := devcerts.NewCA("another CA", time.Hour)
	must(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	must(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	local := devcerts.Leaf{CommonName: "tools", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	srvCrt, srvKey := writePEM(t, ca, dir, "server", local)
	badCrt, badKey := writePEM(t, other, dir, "impostor", local)
	cliCrt, cliKey := writePEM(t, ca, dir, "executor", devcerts.Leaf{CommonName: "executor"})
	strangerCrt, strangerKey := writePEM(t, other, dir, "stranger", devcerts.Leaf{CommonName: "stranger"})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	serve := func(crt, key string) string {
		pair, err := tls.LoadX509KeyPair(crt, key)
		must(t, err)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{pair}, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
		})))
		xctv1.RegisterToolServiceServer(g, &toolServer{
			tools: []*xctv1.ToolDescriptor{toolDesc("echo", xctv1.Effect_EFFECT_READ, true)},
			invoke: func(_ context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
				v, _ := structpb.NewValue(req.GetArguments().AsMap())
				return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}, nil
			},
		})
		go func() { _ = g.Serve(lis) }()
		t.Cleanup(g.Stop)
		return lis.Addr().String()
	}
	good, impostor, picky := serve(srvCrt, srvKey), serve(badCrt, badKey), serve(srvCrt, srvKey)
	yaml := `servers:
  - name: secure
    address: ` + good + `
    tls: {ca: ` + caFile + `, cert: ` + cliCrt + `, key: ` + cliKey + `}
  - name: impostor
    address: ` + impostor + `
    tls: {ca: ` + caFile + `, cert: ` + cliCrt + `, key: ` + cliKey + `}
  - name: picky
    address: ` + picky + `
    tls: {ca: ` + caFile + `, cert: ` + strangerCrt + `, key: ` + strangerKey + `}
`
	cfg, err := ParseToolsConfig("tools.yaml", []byte(yaml))
	must(t, err)
	s, err := New(Config{Workspace: t.TempDir(), Tools: cfg}, nil, testLogger(t))
	must(t, err)
	defer func() { _ = s.Stop(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, s.Start(ctx))
	served := map[string]bool{}
	for _, d := range s.Tools() {
		served[d.GetName()] = true
	}
	if !served["secure.echo"] || served["impostor.echo"] || served["picky.echo"] {
		t.Fatalf("served %v: want secure.echo only", served)
	}
	r := exec(t, s, "secure.echo", map[string]any{"x": "over tls"})
	if got := resultAs[map[string]any](t, r); got["x"] != "over tls" {
		t.Fatalf("secure.echo = %v", got)
	}
}

func TestRemoteTLSConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, tls, want string }{
		{"no CA", `{cert: c.crt, key: c.key}`, "a CA file is required"},
		{"cert without key", `{ca: ca.crt, cert: c.crt}`, "cert and key go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseToolsConfig("tools.yaml", []byte("servers:\n  - name: s\n    address: 127.0.0.1:1\n    tls: "+tc.tls+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
