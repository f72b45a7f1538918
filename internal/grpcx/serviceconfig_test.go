package grpcx

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/testutil"
)

// unavailableHealth answers every Check UNAVAILABLE, as an executor does
// that acted and could not record the outcome yet, and counts the calls.
type unavailableHealth struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func (h *unavailableHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	return nil, status.Error(codes.Unavailable, "acted, but its outcome could not be recorded yet")
}

// Issue 12, session 15 (chaos15): the service config a name's DNS serves
// (a TXT record _grpc_config.NAME, which gRPC reads by default) was
// applied to XCT's clients, retry policies and load balancing included:
// whoever could publish a record for the executor's or the validator's
// name made every Execute or Validate answered UNAVAILABLE run again at
// the server, up to the policy's attempts (on main: 5 runs of the handler
// for one call). The step records make a retried Execute replay rather
// than act (and gRPC keeps the peer of the last attempt that reached the
// server, so "never sent" stays proven), but the calls XCT counts per
// call (a verdict's rate windows) and the honest-outcome rules are
// written for one attempt per call. XCT's clients now take no service
// config but their own, which has no retry policy: gRPC retries only what
// never reached the server's handlers.
func TestServiceConfigFromDNSDoesNotRetry(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &unavailableHealth{}
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	const host = "executor.xct.test"
	retry := `grpc_config=[{"serviceConfig":{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],` +
		`"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}}]`
	dns := testutil.ServeDNS(t, host, retry)
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	conn, err := Dial("dns://" + dns + "/" + host + ":" + port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var p peer.Peer
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "could not be recorded yet") {
		t.Fatalf("the call answered %v, want the server's UNAVAILABLE", err)
	}
	if n := h.calls.Load(); n != 1 || p.Addr == nil {
		t.Fatalf("the server's handler ran %d time(s) for one call (peer %v)", n, p.Addr)
	}
}
