package e2e

import (
	"context"
	"os"
	"path/filepath"
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
	t.Parallel()
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

// A chain file is what people hand each other to look at a run; lctl reads
// whatever it is given. One event's data nested three million arrays (or
// objects) deep: on main lctl's event reader, and the canonical JSON it
// hashes, recursed once per level, and lctl replay died with "fatal error:
// stack overflow". Now the reader gives up past lctl.MaxJSONDepth (10,000,
// encoding/json's limit) and the careful reader refuses the file, naming
// the event: every command exits with "exceeded max depth" (and no
// goroutine dump: a fatal error's exit code is 2 too).
func TestAttackDeepChainFileKillsLctl(t *testing.T) {
	t.Parallel()
	lctl := lctlBinary(t)
	dir := t.TempDir()
	const n = 3 << 20
	for name, data := range map[string]string{
		"arrays":  strings.Repeat("[", n) + strings.Repeat("]", n),
		"objects": strings.Repeat(`{"a":`, n/2) + "1" + strings.Repeat("}", n/2),
	} {
		file := filepath.Join(dir, name+".lctl.json")
		body := `{"lctl":"4.0","chain":{"id":"deep"},"events":[` +
			`{"seq":1,"type":"note","timestamp":"2026-01-01T00:00:00Z","agent":"a","data":{"x":` + data + `}}]}`
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"replay", file}, {"stats", file}, {"verify", file}, {"bottleneck", file}, {"confidence", file}} {
			p := startProc(t, "lctl "+args[0], lctl, args...)
			code, out := p.wait(t, 120*time.Second)
			if code == 0 || !strings.Contains(out, "exceeded max depth") || strings.Contains(out, "fatal error") {
				t.Fatalf("lctl %s of %s nested %d deep: exit %d, want a refusal saying \"exceeded max depth\":\n%s", args[0], name, n, code, tail(out, 2000))
			}
		}
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
