package verdict

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// A policy epoch says which policy a validator installed last, and when:
// the validator signs it with its verdict key and records it in
// PolicyBucket under EpochKey(key id) at start and at every policy change.
// An executor refuses a grant that a newer epoch of its key replaces
// (Epoch.Replaces): an allow given under a policy that was replaced after
// it was signed does not outlive the replacement for the rest of its TTL.

// PolicyBucket is the KV bucket of the policy epochs (internal/provision
// makes it; validators write it, anyone reads it: it holds no secret, and
// each record is signed).
const PolicyBucket = "XCT_POLICY"

// epochDomain separates epoch signatures from verdict signatures.
const epochDomain = "xct.policy-epoch.v1\x00"

// maxEpochBytes bounds the record an executor decodes.
const maxEpochBytes = 1024

// ErrReplaced: the verdict was signed under a policy that a validator
// replaced after signing it.
var ErrReplaced = errors.New("the verdict was given under a policy that was replaced after it was signed")

// ReplacedDetail is the member, true, of the details of the xctv1.Error
// an executor attaches (as a gRPC status detail) to the
// FAILED_PRECONDITION that refuses a grant ErrReplaced: the refusal came
// before the call claimed its step (the call did not run the tool), so
// the caller may ask the validator to judge the step again under the
// policy in force and call again with that verdict (the orchestrator
// does, once).
const ReplacedDetail = "policy_replaced"

// Epoch is a verified policy epoch: under key KeyID, the policy
// PolicyVersion was installed at InstalledAt (the validator's clock).
type Epoch struct {
	KeyID         string
	PolicyVersion string
	InstalledAt   time.Time
}

// epochRecord is an epoch as recorded.
type epochRecord struct {
	KeyID         string `json:"key_id"`
	PolicyVersion string `json:"policy_version"`
	InstalledAt   int64  `json:"installed_at_unix_nano"`
	Signature     []byte `json:"signature"`
}

// epochMessage is what an epoch's signature covers: the domain, then
// each field length-prefixed.
func epochMessage(keyID, version string, at int64) []byte {
	b := []byte(epochDomain)
	for _, f := range []string{keyID, version, strconv.FormatInt(at, 10)} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	return b
}

// EpochKey is the key of PolicyBucket holding the epoch of key id keyID
// ("ed25519:ab12…" → "ed25519.ab12…").
func EpochKey(keyID string) string { return strings.ReplaceAll(keyID, ":", ".") }

// SignEpoch is the record saying that the policy version was installed at
// at, signed with s's key.
func (s *Signer) SignEpoch(version string, at time.Time) ([]byte, error) {
	n := at.UnixNano()
	return json.Marshal(epochRecord{
		KeyID: s.id, PolicyVersion: version, InstalledAt: n,
		Signature: ed25519.Sign(s.key, epochMessage(s.id, version, n)),
	})
}

// VerifyEpoch reads a record of SignEpoch, signed by a trusted key.
func (v *Verifier) VerifyEpoch(raw []byte) (Epoch, error) {
	if v == nil || len(v.keys) == 0 {
		return Epoch{}, ErrNoTrustedKeys
	}
	if len(raw) > maxEpochBytes {
		return Epoch{}, fmt.Errorf("%w: policy epoch of %d bytes", ErrMalformed, len(raw))
	}
	v.epochMu.Lock()
	e, ok := v.epochs[string(raw)]
	v.epochMu.Unlock()
	if ok {
		return e, nil
	}
	e, err := v.verifyEpoch(raw)
	if err != nil {
		return Epoch{}, err
	}
	v.epochMu.Lock()
	if v.epochs == nil || len(v.epochs) >= maxVerifiedEpochs {
		v.epochs = map[string]Epoch{}
	}
	v.epochs[string(raw)] = e
	v.epochMu.Unlock()
	return e, nil
}

// maxVerifiedEpochs bounds the records a Verifier remembers (one per
// trusted key is the usual count; past the bound it starts afresh).
const maxVerifiedEpochs = 64

// verifyEpoch is VerifyEpoch without the memory of records verified.
func (v *Verifier) verifyEpoch(raw []byte) (Epoch, error) {
	var r epochRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return Epoch{}, fmt.Errorf("%w: policy epoch: %w", ErrMalformed, err)
	}
	key, ok := v.keys[r.KeyID]
	if !ok {
		return Epoch{}, fmt.Errorf("%w: policy epoch of %q", ErrUnknownKey, truncate(r.KeyID, 64))
	}
	if !ed25519.Verify(key, epochMessage(r.KeyID, r.PolicyVersion, r.InstalledAt), r.Signature) {
		return Epoch{}, fmt.Errorf("%w (policy epoch)", ErrBadSignature)
	}
	return Epoch{KeyID: r.KeyID, PolicyVersion: r.PolicyVersion, InstalledAt: time.Unix(0, r.InstalledAt)}, nil
}

// Replaces reports whether e replaces the grant g signed under e's key: g
// was given under another policy, and not after e's was installed. (A
// grant signed after a replacement came from a validator still on its
// policy then, a replica not reloaded yet, say: its live decision.)
func (e Epoch) Replaces(keyID string, g *xctv1.VerdictGrant) bool {
	return e.KeyID == keyID && e.PolicyVersion != g.GetPolicyVersion() && !g.GetIssuedAt().AsTime().After(e.InstalledAt)
}

// Epochs keeps the newest epoch seen per key: a record read again that is
// older than one seen before (a replay, a lagging replica's read) does not
// bring back the policy it names. The zero value is ready; safe for
// concurrent use.
type Epochs struct {
	mu     sync.Mutex
	newest map[string]Epoch
	// verified are records already verified, by their bytes (an executor
	// reads the same record at every Execute; its signature is checked
	// once). Few: cleared when it grows past maxVerified.
	verified map[string]Epoch
}

// maxVerified bounds Epochs.verified.
const maxVerified = 16

// Verify is v.VerifyEpoch(raw), from the bytes already verified when raw
// is one of them.
func (t *Epochs) Verify(v *Verifier, raw []byte) (Epoch, error) {
	t.mu.Lock()
	e, ok := t.verified[string(raw)]
	t.mu.Unlock()
	if ok {
		return e, nil
	}
	e, err := v.VerifyEpoch(raw)
	if err != nil {
		return Epoch{}, err
	}
	t.mu.Lock()
	if t.verified == nil || len(t.verified) >= maxVerified {
		t.verified = map[string]Epoch{}
	}
	t.verified[string(raw)] = e
	t.mu.Unlock()
	return e, nil
}

// Observe notes e and returns the newest epoch of its key.
func (t *Epochs) Observe(e Epoch) Epoch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.newest == nil {
		t.newest = map[string]Epoch{}
	}
	if cur, ok := t.newest[e.KeyID]; ok && !e.InstalledAt.After(cur.InstalledAt) {
		return cur
	}
	t.newest[e.KeyID] = e
	return e
}

// Newest is the newest epoch seen of keyID.
func (t *Epochs) Newest(keyID string) (Epoch, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.newest[keyID]
	return e, ok
}
