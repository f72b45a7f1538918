package orchestrator

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/wire"
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

// Propose calls the endpoint. A call no transport carried (no peer: the
// connection was never made, as the CLI's start proves "not sent") fails
// as NotSent, charged nothing; any other failure may have been read by
// the model and is charged an estimate (failedCallTokens).
func (p *grpcProposer) Propose(ctx context.Context, req *xctv1.ProposeRequest) (*xctv1.ProposeResponse, error) {
	var pr peer.Peer
	resp, err := p.client.Propose(ctx, req, grpc.Peer(&pr))
	if err != nil && pr.Addr == nil {
		code := wire.CodeGenerationFailed
		if status.Code(err) == codes.DeadlineExceeded {
			code = wire.CodeTimeout
		}
		return nil, &ModelError{Model: p.Name(), Code: code, Msg: err.Error(), Err: err, NotSent: true}
	}
	return resp, err
}
