package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
)

// epochReadTimeout bounds the read of a verdict key's policy epoch.
const epochReadTimeout = 5 * time.Second

// errEpochUnread: the policy epoch of the verdict's key could not be read,
// so whether its policy was replaced is unknown: not acted on.
var errEpochUnread = errors.New("the validator's policy in force could not be read")

// bindEpochs binds the validators' policy epochs bucket (the admin made
// it: internal/provision).
func (s *Service) bindEpochs(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, verdict.PolicyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("policy epochs bucket: %w", jsguard.Missing("bucket", verdict.PolicyBucket))
	}
	if err != nil {
		return fmt.Errorf("policy epochs bucket: %w", err)
	}
	s.epochDirect.Store(newEpochGet(ctx, s.nc, kv))
	s.epochKV.Store(&kv)
	return nil
}

// startRefusal is why the verdict of this call may not start an attempt
// of the step (nil: it may): its validator replaced the policy it was
// signed under after signing it (verdict.Epoch.Replaces). The epoch of the
// grant's key is read at every Execute, so a step allowed under a policy
// that was reloaded since starts no attempt, however long its verdict
// would still live; a step that already has a record is answered from it
// as before (claim asks only when it would start an attempt). The newest
// epoch seen is kept, so an older record read later (a replica's lagging
// view) brings no replaced policy back. Without NATS (no bucket), or for
// a call no verdict let in, nothing is checked. A record that is missing
// (a validator from before epochs) replaces nothing.
func (s *Service) startRefusal(ctx context.Context, stepID string) error {
	g, _ := ctx.Value(grantKey{}).(grantSeen)
	if g.grant == nil {
		return nil
	}
	err := s.checkEpoch(ctx, g.keyID, g.grant)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, verdict.ErrReplaced):
		s.log.WarnContext(ctx, "execute refused: the verdict's policy was replaced", "step_id", stepID, "grant", g.id, "error", err)
		return policyReplaced(stepID, err)
	}
	return status.Errorf(codes.Unavailable, "step %s: %v; this call did not run the tool", stepID, err)
}

func (s *Service) checkEpoch(ctx context.Context, keyID string, g *xctv1.VerdictGrant) error {
	kvp := s.epochKV.Load()
	if kvp == nil {
		return nil
	}
	raw, err := s.readEpoch(ctx, *kvp, keyID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
	case err != nil:
		return fmt.Errorf("%w: %w", errEpochUnread, err)
	default:
		e, err := s.epochs.Verify(s.verifier, raw)
		if err != nil {
			return fmt.Errorf("%w: %w", errEpochUnread, err)
		}
		s.epochs.Observe(e)
	}
	if e, ok := s.epochs.Newest(keyID); ok && e.Replaces(keyID, g) {
		return fmt.Errorf("%w: it was signed at %s under policy %s, and policy %s has been in force since %s "+
			"(the step must be judged again)", verdict.ErrReplaced, lctl.FormatTime(g.GetIssuedAt().AsTime()),
			g.GetPolicyVersion(), e.PolicyVersion, lctl.FormatTime(e.InstalledAt))
	}
	return nil
}

// policyReplaced is the refusal of a verdict whose policy was replaced
// (err says which, since when), with its machine-readable detail: an
// xctv1.Error whose details hold verdict.ReplacedDetail.
func policyReplaced(stepID string, err error) error {
	st := status.Newf(codes.FailedPrecondition, "step %s: %v; this call did not run the tool", stepID, err)
	e := wire.WithDetails(wire.Errorf(wire.CodePolicyDenied, "%v", err), map[string]any{verdict.ReplacedDetail: true, "step_id": stepID})
	if withDetail, derr := st.WithDetails(e); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// readEpoch reads the record of keyID's policy epoch from kv: by a direct
// get built by hand when kv allows it (epochGet), else by the generic
// client. Both ask the stream at every call.
func (s *Service) readEpoch(ctx context.Context, kv jetstream.KeyValue, keyID string) ([]byte, error) {
	if g := s.epochDirect.Load(); g != nil {
		return g.get(ctx, keyID)
	}
	ctx, cancel := context.WithTimeout(ctx, epochReadTimeout)
	defer cancel()
	entry, err := kv.Get(ctx, verdict.EpochKey(keyID))
	if err != nil {
		return nil, err
	}
	return entry.Value(), nil
}
