package attack

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/devcerts"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
)

// Session 18 (attack18b): a tool server served with grpcx, called by a
// service that is not the executor.

// ledgerTools is a ToolService with a read (get) and a change (put); it
// counts the puts it carried out.
type ledgerTools struct {
	xctv1.UnimplementedToolServiceServer
	mu   sync.Mutex
	puts []string
}

func (l *ledgerTools) Describe(context.Context, *xctv1.DescribeRequest) (*xctv1.DescribeResponse, error) {
	schema := `{"type":"object","properties":{"entry":{"type":"string"}},"additionalProperties":false}`
	return &xctv1.DescribeResponse{Tools: []*xctv1.ToolDescriptor{
		{Name: "get", Description: "read the ledger", InputSchema: schema, Effect: xctv1.Effect_EFFECT_READ, Idempotent: true},
		{Name: "put", Description: "add an entry", InputSchema: schema, Effect: xctv1.Effect_EFFECT_IRREVERSIBLE},
	}}, nil
}

func (l *ledgerTools) Invoke(_ context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if req.GetTool() == "put" {
		l.puts = append(l.puts, req.GetArguments().GetFields()["entry"].GetStringValue())
	}
	v := structpb.NewNumberValue(float64(len(l.puts)))
	return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}, nil
}

func (l *ledgerTools) done() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.puts...)
}

// issueFiles writes a certificate of ca for leaf under dir as name.crt
// and name.key, with ca.crt, and returns them as grpcx's TLS files.
func issueFiles(t *testing.T, ca *devcerts.CA, dir, name string, leaf devcerts.Leaf) grpcx.TLSFiles {
	t.Helper()
	crt, key, err := ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	f := grpcx.TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	for path, b := range map[string][]byte{f.CA: ca.CertPEM, f.Cert: crt, f.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// A tool server sees no verdict: it acts on whatever Invoke it accepts,
// and the validator's veto is only as good as its caller being the
// executor. A tool server built with grpcx (XCT's server builder, mTLS
// and the tokens file; auth.DefaultTable) accepted ToolService/Invoke
// from any principal with role service and from admin: on main a
// taken-over tracer (its own certificate, spiffe://xct.local/service/tracer),
// the orchestrator's certificate, a person's admin token and the
// development service token each invoked `put` directly, which the policy
// denies every run (4 entries written). Now ToolService's methods name
// their one caller, the executor (service:executor, the identity it
// presents with the tools file's tls), and the others are refused
// PERMISSION_DENIED; the executor's own calls, through the veto, still
// reach the server.
func TestAttackOtherServiceInvokesAToolServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := devcerts.NewCA("attack CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]grpcx.TLSFiles{}
	for _, name := range []string{"ledger", "executor", "orchestrator", "tracer"} {
		files[name] = issueFiles(t, ca, dir, name, devcerts.ServiceLeaf(name))
	}
	files["client"] = issueFiles(t, ca, dir, "client", devcerts.Leaf{CommonName: "a person"})
	creds := grpcxtest.New(t)

	ledger := &ledgerTools{}
	srv := grpcx.NewServer("ledger", slog.New(slog.NewTextHandler(io.Discard, nil)),
		grpcx.WithSecurity(grpcx.Security{TLS: files["ledger"]}), grpcx.WithAuth(creds.Authn))
	xctv1.RegisterToolServiceServer(srv.GRPC, ledger)
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	_, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	addr := "localhost:" + port

	exe := files["executor"]
	tools := "servers:\n  - name: ledger\n    address: " + addr + "\n    tls: {ca: " + exe.CA + ", cert: " + exe.Cert + ", key: " + exe.Key + "}\n"
	c := startBindCluster(t, withTools(t, tools, "rules:\n  - {id: allow-reads, effect: allow, effects: [read]}\n"))
	c.writeScript(t, "a.yaml", script(step("ledger.get", `{}`), step("ledger.put", `{entry: "through the model"}`)))
	run := c.runToEnd(t, "dev", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := strings.Join(stepErrors(run), ","); got != ",POLICY_DENIED" {
		t.Fatalf("the run's steps: %q, want the read served through the executor and the put denied", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := &xctv1.InvokeRequest{Tool: "put", Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{"entry": structpb.NewStringValue("direct")}}}
	for _, caller := range []struct {
		name  string
		files grpcx.TLSFiles
		token string
	}{
		{"the tracer's certificate", files["tracer"], ""},
		{"the orchestrator's certificate", files["orchestrator"], ""},
		{"an admin token", files["client"], creds.Token(t, "admin")},
		{"the development service token", files["client"], creds.Token(t, grpcxtest.Service)},
	} {
		opts := []grpcx.DialOption{grpcx.WithTLS(caller.files)}
		if caller.token != "" {
			opts = append(opts, grpcx.WithToken(caller.token))
		}
		conn, err := grpcx.Dial(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		client := xctv1.NewToolServiceClient(conn)
		if _, err := client.Invoke(ctx, put); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s invoking put directly: %v, want PERMISSION_DENIED", caller.name, err)
		}
		if _, err := client.Describe(ctx, &xctv1.DescribeRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s describing the tools: %v, want PERMISSION_DENIED", caller.name, err)
		}
		_ = conn.Close()
	}
	if got := ledger.done(); len(got) != 0 {
		t.Errorf("the ledger's puts: %q, want none (the policy denies put)", got)
	}
}
