package executor

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
)

// Issue 12, session 15 (chaos15): the executor's client of a tool server
// took the service config the server's name publishes in DNS (a TXT record
// _grpc_config.NAME, read by gRPC by default), retry policy included. A
// tool server is not XCT's: whoever runs its DNS could publish one, and a
// call whose effect happened and whose answer was UNAVAILABLE (a proxy in
// front of the server that lost the upstream after it acted, say) was then
// invoked again by gRPC, with the same idempotency key, under one attempt
// of the step: a non-idempotent tool acted up to maxAttempts times (on
// main: 5). The executor's client now takes no service config from the
// resolver and never retries a call that reached the server: one attempt
// of a step is one invocation, and its unknown outcome is the record's
// (IN_DOUBT for a tool that is not idempotent).
//
// The tool server's address is host:port, resolved by gRPC's own DNS
// resolver as in production; the test points that resolver at its DNS
// server on loopback (viaDNS) instead of the machine's, so it does not
// run in parallel with the package's other tests.
func TestToolServerDNSRetryPolicyIsNotFollowed(t *testing.T) {
	var effects atomic.Int64
	ts := &toolServer{
		tools: []*xctv1.ToolDescriptor{toolDesc("charge", xctv1.Effect_EFFECT_IRREVERSIBLE, false)},
		invoke: func(context.Context, *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
			effects.Add(1) // it acted; its answer is lost on the way
			return nil, status.Error(codes.Unavailable, "upstream reset after the request was sent")
		},
	}
	addr, _ := serveTools(t, ts)
	_, port, _ := net.SplitHostPort(addr)
	const host = "tools.xct.test"
	retry := `grpc_config=[{"serviceConfig":{"methodConfig":[{"name":[{"service":"xct.v1.ToolService"}],` +
		`"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}}]`
	orig := resolver.Get("dns")
	resolver.Register(viaDNS{Builder: orig, server: testutil.ServeDNS(t, host, retry)})
	t.Cleanup(func() { resolver.Register(orig) })
	cfg, err := ParseToolsConfig("tools.yaml", []byte("servers:\n  - name: ext\n    address: "+host+":"+port+"\n"))
	must(t, err)
	nc := testutil.Connect(t, testutil.RunJetStream(t))
	s, err := New(Config{Workspace: t.TempDir(), Tools: cfg}, nc, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, s.Start(ctx))

	id := newStepID()
	resp := execStep(t, s, id, "ext.charge", map[string]any{"amount": 5})
	if n := effects.Load(); n != 1 {
		t.Fatalf("one attempt of the step invoked the tool server %d time(s): %v", n, resp.GetResponse())
	}
	if e := resp.GetResponse().GetError(); e.GetCode() != string(wire.CodeInDoubt) && !toolUnsure(e) {
		t.Fatalf("the lost answer was told %v, want an unknown outcome", e)
	}
	rec, doubt, err := s.Step(ctx, id)
	must(t, err)
	if !doubt || rec.GetState() != stateInDoubt {
		t.Fatalf("the step's record is %s (in doubt %v), want in doubt", rec.GetState(), doubt)
	}
}

// viaDNS is gRPC's DNS resolver asking the DNS server at server instead of
// the machine's.
type viaDNS struct {
	resolver.Builder
	server string
}

func (b viaDNS) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	t.URL.Host = b.server
	return b.Builder.Build(t, cc, o)
}
