package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
)

// Every service reports SERVING, and NOT_SERVING once NATS is gone: a
// service that cannot record anything must not receive work.
func TestHealthFollowsNATS(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := map[string]healthpb.HealthClient{}
	for _, target := range app.StartOrder {
		clients[target] = healthpb.NewHealthClient(dial(t, c.app.Addr(target)))
	}
	for target, hc := range clients {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%s: %v %v", target, resp.GetStatus(), err)
		}
	}
	c.nats.Shutdown()
	c.nats.WaitForShutdown()
	for target, hc := range clients {
		testutil.Eventually(t, time.Minute, func() error {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "grpc.health.v1.Health"})
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				return fmt.Errorf("%s is %s", target, resp.GetStatus())
			}
			return nil
		})
	}
}
