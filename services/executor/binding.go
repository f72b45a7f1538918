package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
func (s *Service) checkVerdict(ctx context.Context, req *xctv1.ExecuteRequest, c call) (context.Context, error) {
	g, err := s.verifier.Check(req.GetVerdict(), verdict.Step{
		RunID: req.GetRunId(), StepID: req.GetStepId(), Tool: req.GetTool(), Arguments: c.args, Canonical: c.canonical,
	}, time.Now())
	if err == nil && wire.IsSystemTool(req.GetTool()) && !g.GetSystemStep() {
		err = fmt.Errorf("%w: %s is a system tool and the verdict is not for a system step", verdict.ErrMismatch, req.GetTool())
	}
	if err == nil {
		// The validator judged the tool by its descriptor (effect class,
		// schema): the tool served here must be the one it judged. (An
		// unknown tool acts on nothing; executeCall says so.)
		if st, ok := s.tool(req.GetTool()); ok && g.GetToolDigest() != st.digest {
			err = fmt.Errorf("%w: the verdict judged tool %s as described by %s, and this executor serves it as described by %s "+
				"(its effect class, schema or origin changed: the validator must judge it again)",
				verdict.ErrMismatch, req.GetTool(), orNone(g.GetToolDigest()), st.digest)
		}
	}
	if err == nil {
		// Checked first: the arguments of a call are boxed before the
		// logger can say it is off, four allocations per step for nothing.
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.DebugContext(ctx, "verdict verified", "run_id", req.GetRunId(), "step_id", req.GetStepId(), "grant", g.GetGrantId(), "key", req.GetVerdict().GetKeyId())
		}
		return context.WithValue(ctx, grantKey{}, grantSeen{id: g.GetGrantId(), keyID: req.GetVerdict().GetKeyId(), grant: g}), nil
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
	return ctx, status.Errorf(code, "%v; nothing was executed", err)
}

// grantKey carries the verified grant's id from checkVerdict to the step
// record: a verdict starts at most one attempt.
type grantKey struct{}

type grantSeen struct {
	id string
	// keyID and grant are the verified verdict's: whether a new attempt
	// may start on it depends on its policy still being in force when the
	// attempt would start (epoch.go), not when it was verified.
	keyID string
	grant *xctv1.VerdictGrant
}

// grantOf is the id of the verdict that let this call in ("" for calls
// made inside the executor, which no verdict checked).
func grantOf(ctx context.Context) string {
	g, _ := ctx.Value(grantKey{}).(grantSeen)
	return g.id
}

// grantUsed reports whether the verdict of this call already started an
// attempt of the step: then it may not start another.
func grantUsed(rec *xctv1.StepRecord, grant string) bool {
	return grant != "" && slices.Contains(rec.GetVerdictGrants(), grant)
}

// withGrant records that grant started the attempt of rec.
func withGrant(rec *xctv1.StepRecord, grant string) *xctv1.StepRecord {
	if grant != "" {
		rec.VerdictGrants = append(slices.Clip(rec.VerdictGrants), grant)
	}
	return rec
}

// grantSpent is the refusal of a verdict that already started an attempt.
func grantSpent(rec *xctv1.StepRecord) error {
	return status.Errorf(codes.FailedPrecondition,
		"step %s: this verdict already started attempt %d; another attempt needs a new verdict from the validator; nothing was executed",
		rec.GetStepId(), rec.GetAttempt())
}

func orNone(s string) string {
	if s == "" {
		return "nothing (a verdict that names no tool digest)"
	}
	return s
}
