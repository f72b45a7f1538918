package validator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/verdict"
)

// epochTimeout bounds one write of the policy epoch.
const epochTimeout = 10 * time.Second

// A validator that signs verdicts records, at start and at every policy
// change, which policy it installed and when (a signed verdict.Epoch in
// verdict.PolicyBucket, under its key's id): an executor refuses an allow
// signed under another policy before that (verdict.Epoch.Replaces), so a
// reload that now denies a step stops its verdicts in flight too. A write
// that fails is logged and tried again at the next look at the policy
// files; meanwhile executors act on the replaced policy's verdicts until
// they expire, as they did before epochs.

// bindEpochs binds the policy epoch bucket, which the admin made
// (internal/provision), and records the policy in force.
func (s *Service) bindEpochs(ctx context.Context, js jetstream.JetStream) error {
	if s.signer == nil {
		return nil
	}
	kv, err := js.KeyValue(ctx, verdict.PolicyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("policy epochs bucket: %w", jsguard.Missing("bucket", verdict.PolicyBucket))
	}
	if err != nil {
		return fmt.Errorf("policy epochs bucket: %w", err)
	}
	s.epochMu.Lock()
	s.epochKV = kv
	s.epochMu.Unlock()
	return s.publishEpoch(ctx, s.policy.Load())
}

// publishEpoch records inst, the policy in force, as this validator's
// newest epoch, and then lets its verdicts be answered (awaitEpoch): a
// caller that sees the new policy's decision finds the epoch written, so
// an old verdict it holds is refused from then on. The time is read after
// the policy was installed, so every verdict signed under the previous
// one was signed before it (sign refuses to sign a verdict judged by a
// policy no longer in force). Writes are one at a time, so the bucket
// keeps the newest.
func (s *Service) publishEpoch(ctx context.Context, inst *installedPolicy) error {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	defer inst.epochRecorded()
	if s.epochKV == nil || s.signer == nil || s.policy.Load() != inst {
		// No epochs; or a newer policy was installed meanwhile, whose
		// own write follows (this one's would come after it, older).
		return nil
	}
	version := inst.version
	rec, err := s.signer.SignEpoch(version, s.now())
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, epochTimeout)
		_, err = s.epochKV.Put(ctx, verdict.EpochKey(s.signer.KeyID()), rec)
		cancel()
	}
	if err != nil {
		s.epochPending = true
		s.log.Error("policy epoch not recorded: executors still act on verdicts signed under the previous policy until they expire; tried again at the next policy look",
			"version", version, "bucket", verdict.PolicyBucket, "err", err)
		return fmt.Errorf("policy epoch: %w", err)
	}
	if s.epochPending {
		s.log.Info("policy epoch recorded", "version", version)
	}
	s.epochPending = false
	return nil
}

// retryEpoch writes the epoch again if the last write failed.
func (s *Service) retryEpoch() {
	s.epochMu.Lock()
	pending := s.epochPending
	s.epochMu.Unlock()
	if pending {
		_ = s.publishEpoch(context.Background(), s.policy.Load())
	}
}
