package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// verdictKeys writes a validator key pair for a cluster of processes:
// the flags of the validator (--verdict-key) and of the executor
// (--verdict-trust).
func verdictKeys(t testing.TB) (kf verdict.KeyFiles, validatorFlags, executorFlags []string) {
	t.Helper()
	kf, err := verdict.WriteKeyPair(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kf, []string{"--verdict-key", kf.Private}, []string{"--verdict-trust", kf.Public}
}

// signedRequest is the ExecuteRequest the orchestrator would send for
// step n of runID, with a verdict signed by the validator's key.
// toolDigest is the digest of the tool as the executor serves it, as the
// validator signs it (verdict.ToolDigest of the catalog's descriptor).
func signedRequest(t testing.TB, kf verdict.KeyFiles, runID string, n int, tool string, args *structpb.Struct, toolDigest string) *xctv1.ExecuteRequest {
	t.Helper()
	s, err := verdict.LoadSigner(kf.Private, 0)
	if err != nil {
		t.Fatal(err)
	}
	if args == nil {
		args = &structpb.Struct{}
	}
	id := wire.StepID(runID, n, tool, args)
	digest, err := verdict.StructDigest(args)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := s.Sign(&xctv1.VerdictGrant{RunId: runID, Step: int32(n), StepId: id, Tool: tool, ArgumentsDigest: digest, ToolDigest: toolDigest}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &xctv1.ExecuteRequest{RunId: runID, StepId: id, Tool: tool, Arguments: args, Verdict: sv}
}

// servedDigest is verdict.ToolDigest of tool as c's executor serves it.
func servedDigest(ctx context.Context, t testing.TB, c xctv1.ExecutorServiceClient, tool string) string {
	t.Helper()
	resp, err := c.ListTools(ctx, &xctv1.ListToolsRequest{})
	if err != nil {
		t.Error(err)
		return ""
	}
	for _, d := range resp.GetTools() {
		if d.GetName() == tool {
			return verdict.ToolDigest(d)
		}
	}
	t.Errorf("the executor serves no %s", tool)
	return ""
}
