package orchestrator

import (
	"context"

	"google.golang.org/grpc"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
)

// grpcProposer calls an external ProposerService.
type grpcProposer struct {
	addr   string
	conn   *grpc.ClientConn
	client xctv1.ProposerServiceClient
}

func dialProposer(addr string, opts ...grpcx.DialOption) (*grpcProposer, error) {
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &grpcProposer{addr: addr, conn: conn, client: xctv1.NewProposerServiceClient(conn)}, nil
}

func (p *grpcProposer) Name() string { return "grpc:" + p.addr }
func (p *grpcProposer) Close() error { return p.conn.Close() }

func (p *grpcProposer) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	return p.client.Propose(ctx, req)
}
