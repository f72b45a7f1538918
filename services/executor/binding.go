package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
)

// verifier is the configured verdict verifier: the given one, or one over
// the VerdictTrust keys; nil when neither is configured (then every
// Execute is refused).
func (c *Config) verifier() (*verdict.Verifier, error) {
	switch {
	case c.Verifier != nil:
		return c.Verifier, nil
	case c.VerdictTrust != "":
		return verdict.LoadVerifier(verdict.Paths(c.VerdictTrust)...)
	}
	return nil, nil
}

// TrustedVerdictKeys lists the ids of the validator keys this executor
// acts on, sorted.
func (s *Service) TrustedVerdictKeys() []string { return s.verifier.KeyIDs() }

// checkVerdict refuses an Execute that does not carry the validator's
// signed allow for exactly this step: same run, step id, tool and
// canonical arguments, signed by a trusted key, unexpired. No caller,
// admin included, can make the executor act without one. A refusal is a
// gRPC error (nothing was executed, nothing recorded): PERMISSION_DENIED
// for a missing, forged, foreign or mismatched verdict, FAILED_PRECONDITION
// for an expired one or an executor that trusts no key.
//
// Acting at most once is the step record's job: a step id names one call,
// so a verdict replayed for the same step gets the recorded outcome, and a
// verdict for another step id does not verify.
func (s *Service) checkVerdict(ctx context.Context, req *xctv1.ExecuteRequest) error {
	args := map[string]any{}
	if req.GetArguments() != nil {
		args = req.GetArguments().AsMap()
	}
	g, err := s.verifier.Check(req.GetVerdict(), verdict.Step{
		RunID: req.GetRunId(), StepID: req.GetStepId(), Tool: req.GetTool(), Arguments: args,
	}, time.Now())
	if err == nil && wire.IsSystemTool(req.GetTool()) && !g.GetSystemStep() {
		err = fmt.Errorf("%w: %s is a system tool and the verdict is not for a system step", verdict.ErrMismatch, req.GetTool())
	}
	if err == nil {
		s.log.DebugContext(ctx, "verdict verified", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "grant", g.GetGrantId(), "key", req.GetVerdict().GetKeyId())
		return nil
	}
	who := "unknown"
	if p, ok := auth.FromContext(ctx); ok {
		who = p.Name
	}
	s.log.WarnContext(ctx, "execute refused: no valid verdict for the step", "caller", who,
		"run_id", req.GetRunId(), "step_id", req.GetStepId(), "tool", req.GetTool(), "error", err)
	code := codes.PermissionDenied
	if errors.Is(err, verdict.ErrExpired) || errors.Is(err, verdict.ErrNotYetValid) || errors.Is(err, verdict.ErrNoTrustedKeys) {
		code = codes.FailedPrecondition
	}
	return status.Errorf(code, "%v; nothing was executed", err)
}
