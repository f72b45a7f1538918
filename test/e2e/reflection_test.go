package e2e

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// listServices lists a server's services through gRPC reflection, as
// grpcurl list does, with an optional bearer token.
func listServices(ctx context.Context, conn *grpc.ClientConn, token string) ([]string, error) {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	// A server that refuses the stream may end it before the request is
	// sent: Send then says io.EOF, and Recv gives the real status.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// The decided behaviour for grpcurl (README "Calling the API with
// grpcurl"): health is open (probes), reflection needs a token like every
// other method, and with one it describes the API.
func TestReflectionNeedsATokenHealthDoesNot(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	addrs := d.addrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for svc, want := range map[string]string{
		"orchestrator": "xct.v1.OrchestratorService", "validator": "xct.v1.ValidatorService",
		"executor": "xct.v1.ExecutorService", "tracer": "lctl.v1.TracerService",
	} {
		conn, err := grpc.NewClient(addrs[svc], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%s health without a token: %v %v", svc, hr, err)
		}
		if _, err := listServices(ctx, conn, ""); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s reflection without a token: %v", svc, err)
		}
		names, err := listServices(ctx, conn, d.token(t, "dave"))
		if err != nil || !slices.Contains(names, want) || !slices.Contains(names, "grpc.health.v1.Health") {
			t.Fatalf("%s reflection as dave: %v %v", svc, names, err)
		}
	}
}
