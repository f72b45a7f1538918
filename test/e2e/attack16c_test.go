package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// A reader (dave, the auditor: the least a principal can be) asks the
// tracer's QueryFacts a query nested four million parentheses deep, as
// one gRPC message well under the 16 MiB the servers take. On main the
// query parser recursed once per parenthesis until Go's 1 GB stack limit,
// a fatal error no recover catches: the xct dev process, and with it the
// orchestrator, validator and executor sharing it, died. Now a query
// longer than analysis.MaxQueryBytes or nested deeper than
// analysis.MaxQueryDepth is INVALID_ARGUMENT, and the cluster still
// serves.
func TestAttackDeepQueryKillsTheCluster(t *testing.T) {
	d := startDev(t)
	addrs := d.addrs(t)
	conn, err := grpc.NewClient(addrs["tracer"], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+d.token(t, "dave"))
	tracer := lctlv1.NewTracerServiceClient(conn)

	for _, q := range []string{
		"SELECT * WHERE " + strings.Repeat("(", 4<<20) + "id = 'a'" + strings.Repeat(")", 4<<20),
		"SELECT * WHERE " + strings.Repeat("NOT ", 1<<20) + "id = 'a'",
		// Short enough to be read, deep enough to be refused.
		"SELECT * WHERE " + strings.Repeat("(", 5000) + "id = 'a'" + strings.Repeat(")", 5000),
	} {
		_, err := tracer.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "no-such-run", Query: q})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("QueryFacts of a %d-byte query: %v, want InvalidArgument", len(q), err)
		}
		select {
		case <-d.proc.done:
			t.Fatalf("xct dev exited after a %d-byte query:\n%s", len(q), tail(d.proc.output(), 2000))
		default:
		}
	}
	// Everything still serves: the orchestrator shares the process.
	orch, err := grpc.NewClient(addrs["orchestrator"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer orch.Close()
	if _, err := xctv1.NewOrchestratorServiceClient(orch).ListRuns(ctx, &xctv1.ListRunsRequest{Limit: 1}); err != nil {
		t.Fatalf("ListRuns after the queries: %v", err)
	}
	// A plain query still runs (the chain is unknown: NotFound, not a
	// refusal of the query).
	if _, err := tracer.QueryFacts(ctx, &lctlv1.QueryFactsRequest{ChainId: "no-such-run", Query: "SELECT * WHERE ((id = 'a') OR NOT (confidence < 0.5))"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a plain query: %v, want NotFound", err)
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
