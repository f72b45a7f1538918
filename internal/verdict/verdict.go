// Package verdict binds execution to the validator's decision: a validator
// signs, with an Ed25519 key, a grant naming exactly the step it allows
// (run, step number, step id, tool, canonical arguments digest, expiry);
// an executor acts only on a step whose grant it verifies with a public key
// it trusts. Keys are named by a key id derived from the public key, so an
// executor may trust several at once (key rotation).
package verdict

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
)

// Defaults and limits.
const (
	// DefaultTTL is how long a grant may be acted on after it was signed.
	DefaultTTL = 5 * time.Minute
	// MaxTTL bounds a configured TTL.
	MaxTTL = time.Hour
	// ClockSkew is how far in the future a grant's issued_at may be: the
	// validator's and the executor's clocks need not agree exactly.
	ClockSkew = time.Minute
	// maxGrantBytes bounds the grant an executor decodes.
	maxGrantBytes = 4096
	// domain separates verdict signatures from anything else signed with
	// the same key.
	domain = "xct.verdict.v1\x00"
)

// Errors of verification. Every one means: do not act.
var (
	ErrNoVerdict     = errors.New("the step carries no signed verdict")
	ErrUnknownKey    = errors.New("the verdict is signed with a key this executor does not trust")
	ErrBadSignature  = errors.New("the verdict's signature does not verify")
	ErrMalformed     = errors.New("the verdict is malformed")
	ErrExpired       = errors.New("the verdict expired")
	ErrNotYetValid   = errors.New("the verdict was issued in the future")
	ErrMismatch      = errors.New("the verdict is for another step")
	ErrNoTrustedKeys = errors.New("this executor trusts no verdict key, so it acts on nothing (configure --verdict-trust)")
	ErrBadKey        = errors.New("verdict key")
)

// KeyID names a public key: "ed25519:" and the first 16 hex digits of the
// SHA-256 of the raw key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// ArgumentsDigest is "sha256:" and the hex SHA-256 of the canonical JSON
// (RFC 8785, lctl.Canonical) of a call's arguments: the same form step ids
// are made from. Absent arguments and {} are the same call.
func ArgumentsDigest(args map[string]any) (string, error) {
	c, err := CanonicalArguments(args)
	if err != nil {
		return "", err
	}
	return DigestOf(c), nil
}

// CanonicalArguments is the canonical JSON (RFC 8785) of a call's
// arguments, nil being {}: encoded once, it gives both the digest
// (DigestOf) and the step id (StepIDOf).
func CanonicalArguments(args map[string]any) ([]byte, error) {
	if args == nil {
		args = map[string]any{}
	}
	return lctl.Canonical(args)
}

// DigestOf is ArgumentsDigest of arguments already in canonical form.
func DigestOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	const prefix = "sha256:"
	var out [len(prefix) + 2*sha256.Size]byte
	copy(out[:], prefix)
	hex.Encode(out[len(prefix):], sum[:])
	return string(out[:])
}

// StepIDOf is wire.StepIDOf from arguments already in canonical form
// (wire.StepIDOfCanonical).
func StepIDOf(runID string, step int, tool string, canonical []byte) (string, error) {
	return wire.StepIDOfCanonical(runID, step, tool, canonical)
}

// ToolDigest is "sha256:" and the hex SHA-256 of the canonical JSON of
// what a tool is judged by: its descriptor's name, input schema, effect
// class, idempotency, source and effect_from. The validator signs the
// digest of the descriptor it judged (VerdictGrant.tool_digest), and the
// executor acts only on a grant whose digest is that of the tool it
// serves: a verdict judged on one effect class or schema is no licence
// for a tool that now has another. The description, timeout and output
// cap are not in it: no policy decides by them.
func ToolDigest(d *xctv1.ToolDescriptor) string {
	c, err := lctl.Canonical(map[string]any{
		"name":         d.GetName(),
		"input_schema": d.GetInputSchema(),
		"effect":       d.GetEffect().String(),
		"idempotent":   d.GetIdempotent(),
		"source":       d.GetSource(),
		"effect_from":  d.GetEffectFrom(),
	})
	if err != nil {
		// Only invalid UTF-8 fails to encode; such a descriptor matches
		// no digest but its own bytes'.
		c = []byte(fmt.Sprintf("%q %v", []string{d.GetName(), d.GetInputSchema(), d.GetEffect().String(), d.GetSource(), d.GetEffectFrom()}, d.GetIdempotent()))
	}
	return DigestOf(c)
}

// ToolDigests remembers ToolDigest per tool name with the fields it was
// made from: a descriptor whose digested fields are those remembered gets
// the remembered digest, any other is digested anew (and remembered), so
// it never answers for a descriptor that changed. A validator digests the
// same few descriptors at every call (~6 µs each: the canonical form of
// the schema, SHA-256). The zero value is ready; safe for concurrent use.
type ToolDigests struct {
	m sync.Map // tool name → *toolDigest
}

// toolDigest is a digest and the descriptor fields it was made from.
type toolDigest struct {
	fields *xctv1.ToolDescriptor // only the digested fields, a copy
	digest string
}

// digestedFields is d's fields that ToolDigest reads, copied.
func digestedFields(d *xctv1.ToolDescriptor) *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name: d.GetName(), InputSchema: d.GetInputSchema(), Effect: d.GetEffect(),
		Idempotent: d.GetIdempotent(), Source: d.GetSource(), EffectFrom: d.GetEffectFrom(),
	}
}

// Of is ToolDigest(d).
func (c *ToolDigests) Of(d *xctv1.ToolDescriptor) string {
	if v, ok := c.m.Load(d.GetName()); ok {
		e := v.(*toolDigest)
		f := e.fields
		if f.GetInputSchema() == d.GetInputSchema() && f.GetEffect() == d.GetEffect() &&
			f.GetIdempotent() == d.GetIdempotent() && f.GetSource() == d.GetSource() && f.GetEffectFrom() == d.GetEffectFrom() {
			return e.digest
		}
	}
	f := digestedFields(d)
	e := &toolDigest{fields: f, digest: ToolDigest(f)}
	c.m.Store(f.GetName(), e)
	return e.digest
}

// StructDigest is ArgumentsDigest of a protobuf Struct.
func StructDigest(args *structpb.Struct) (string, error) {
	if args == nil {
		return ArgumentsDigest(nil)
	}
	return ArgumentsDigest(args.AsMap())
}

// Signer signs grants with one private key.
type Signer struct {
	key ed25519.PrivateKey
	id  string
	ttl time.Duration
}

// NewSigner signs with key; grants live ttl (0: DefaultTTL).
func NewSigner(key ed25519.PrivateKey, ttl time.Duration) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: not an Ed25519 private key", ErrBadKey)
	}
	if ttl < 0 || ttl > MaxTTL {
		return nil, fmt.Errorf("%w: ttl %v is not within 0..%v", ErrBadKey, ttl, MaxTTL)
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return &Signer{key: key, id: KeyID(key.Public().(ed25519.PublicKey)), ttl: ttl}, nil
}

// KeyID names the signer's key.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign fills g's issued_at, expires_at and grant_id, and signs it.
func (s *Signer) Sign(g *xctv1.VerdictGrant, now time.Time) (*xctv1.SignedVerdict, error) {
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	g = proto.CloneOf(g)
	g.IssuedAt = timestamppb.New(now)
	g.ExpiresAt = timestamppb.New(now.Add(s.ttl))
	g.GrantId = hex.EncodeToString(id[:])
	// The signed message is the domain and the grant: the grant is
	// encoded right after the domain, so both are one buffer.
	msg, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(append(make([]byte, 0, len(domain)+proto.Size(g)), domain...), g)
	if err != nil {
		return nil, err
	}
	return &xctv1.SignedVerdict{KeyId: s.id, Grant: msg[len(domain):], Signature: ed25519.Sign(s.key, msg)}, nil
}

func signed(raw []byte) []byte {
	return append([]byte(domain), raw...)
}

// Verifier checks signed verdicts against a set of trusted public keys.
type Verifier struct {
	keys map[string]ed25519.PublicKey

	// epochs remembers the policy epoch records that verified, by their
	// exact bytes (VerifyEpoch): the executor reads its key's record at
	// every Execute and it changes only when a validator reloads its
	// policy, so the same bytes need not be decoded and their signature
	// checked again. The keys never change, so neither does the answer.
	epochMu sync.Mutex
	epochs  map[string]Epoch
}

// NewVerifier trusts keys.
func NewVerifier(keys ...ed25519.PublicKey) (*Verifier, error) {
	v := &Verifier{keys: map[string]ed25519.PublicKey{}}
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: not an Ed25519 public key", ErrBadKey)
		}
		v.keys[KeyID(k)] = k
	}
	return v, nil
}

// KeyIDs lists the trusted keys' ids, sorted.
func (v *Verifier) KeyIDs() []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.keys))
	for id := range v.keys {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Verify checks sv's signature and validity at now and returns its grant.
// It does not compare the grant with a request: see Check.
func (v *Verifier) Verify(sv *xctv1.SignedVerdict, now time.Time) (*xctv1.VerdictGrant, error) {
	if v == nil || len(v.keys) == 0 {
		return nil, ErrNoTrustedKeys
	}
	if sv == nil || len(sv.GetGrant()) == 0 {
		return nil, ErrNoVerdict
	}
	key, ok := v.keys[sv.GetKeyId()]
	if !ok {
		return nil, fmt.Errorf("%w: %q (trusted: %s)", ErrUnknownKey, truncate(sv.GetKeyId(), 64), strings.Join(v.KeyIDs(), ", "))
	}
	if len(sv.GetGrant()) > maxGrantBytes {
		return nil, fmt.Errorf("%w: grant of %d bytes", ErrMalformed, len(sv.GetGrant()))
	}
	if !ed25519.Verify(key, signed(sv.GetGrant()), sv.GetSignature()) {
		return nil, ErrBadSignature
	}
	g := &xctv1.VerdictGrant{}
	if err := proto.Unmarshal(sv.GetGrant(), g); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if g.GetIssuedAt() == nil || g.GetExpiresAt() == nil {
		return nil, fmt.Errorf("%w: no validity period", ErrMalformed)
	}
	if exp := g.GetExpiresAt().AsTime(); !now.Before(exp) {
		return nil, fmt.Errorf("%w at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	if iss := g.GetIssuedAt().AsTime(); iss.After(now.Add(ClockSkew)) {
		return nil, fmt.Errorf("%w (%s)", ErrNotYetValid, iss.UTC().Format(time.RFC3339))
	}
	return g, nil
}

// Step is the step an executor is asked to act on.
type Step struct {
	RunID, StepID, Tool string
	Arguments           map[string]any
	// Canonical, when set, is CanonicalArguments(Arguments), already
	// computed by the caller (which needs it for its own digest): Check
	// then does not encode the arguments again. It must be exactly that.
	Canonical []byte
}

// Check verifies sv and that its grant is for exactly st: the same run,
// step id, tool and canonical arguments, and a step id that is the
// identity of (run, the grant's step number, tool, arguments).
func (v *Verifier) Check(sv *xctv1.SignedVerdict, st Step, now time.Time) (*xctv1.VerdictGrant, error) {
	g, err := v.Verify(sv, now)
	if err != nil {
		return nil, err
	}
	canon := st.Canonical
	if canon == nil {
		if canon, err = CanonicalArguments(st.Arguments); err != nil {
			return nil, fmt.Errorf("%w: arguments: %w", ErrMismatch, err)
		}
	}
	var diff []string
	if g.GetRunId() != st.RunID {
		diff = append(diff, "run")
	}
	if g.GetStepId() != st.StepID {
		diff = append(diff, "step id")
	}
	if g.GetTool() != st.Tool {
		diff = append(diff, "tool")
	}
	if g.GetArgumentsDigest() != DigestOf(canon) {
		diff = append(diff, "arguments")
	}
	if len(diff) == 0 {
		if id, err := StepIDOf(st.RunID, int(g.GetStep()), st.Tool, canon); err != nil || id != st.StepID {
			diff = append(diff, "step number")
		}
	}
	if len(diff) > 0 {
		return nil, fmt.Errorf("%w: its %s differ", ErrMismatch, strings.Join(diff, ", "))
	}
	return g, nil
}

// stepID is wire.StepID over a map (wire imports nothing of this package;
// the two must agree, which a test checks).
func stepID(chainID string, step int, tool string, args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	c, err := lctl.Canonical([]any{chainID, float64(step), tool, args})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:16])
}

func truncate(s string, n int) string { return text.Truncate(s, n) }

// Key files: PEM, PKCS#8 "PRIVATE KEY" and PKIX "PUBLIC KEY".

// GenerateKey makes a new key pair.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	return priv, err
}

// EncodePrivate is key as a PEM PKCS#8 block.
func EncodePrivate(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// EncodePublic is key as a PEM PKIX block.
func EncodePublic(key ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// LoadSigner reads a PEM private key file.
func LoadSigner(path string, ttl time.Duration) (*Signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s: no PEM \"PRIVATE KEY\" block", ErrBadKey, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadKey, path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s: not an Ed25519 key", ErrBadKey, path)
	}
	return NewSigner(ek, ttl)
}

// LoadVerifier trusts the public keys of the given files and directories
// (in a directory: every regular file whose name ends in .pub or .pem,
// e.g. a mounted Kubernetes Secret). A file may hold several PEM blocks.
func LoadVerifier(paths ...string) (*Verifier, error) {
	var keys []ed25519.PublicKey
	for _, p := range paths {
		files := []string{p}
		if fi, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
		} else if fi.IsDir() {
			files = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
			}
			for _, e := range entries {
				n := e.Name()
				if strings.HasPrefix(n, ".") || (!strings.HasSuffix(n, ".pub") && !strings.HasSuffix(n, ".pem")) {
					continue
				}
				files = append(files, filepath.Join(p, n))
			}
		}
		for _, f := range files {
			ks, err := readPublic(f)
			if err != nil {
				return nil, err
			}
			keys = append(keys, ks...)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no public key in %s", ErrBadKey, strings.Join(paths, ", "))
	}
	return NewVerifier(keys...)
}

func readPublic(path string) ([]ed25519.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	var out []ed25519.PublicKey
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("%w: %s: a %q block where a PUBLIC KEY was expected", ErrBadKey, path, b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadKey, path, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%w: %s: not an Ed25519 key", ErrBadKey, path)
		}
		out = append(out, ek)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s: no PEM \"PUBLIC KEY\" block", ErrBadKey, path)
	}
	return out, nil
}

// KeyFiles are the files WriteKeyPair writes.
type KeyFiles struct {
	Private, Public string
}

// WriteKeyPair writes a new key pair into dir as verdict.key (0600) and
// verdict.pub, unless verdict.key exists: then the pair is kept (and
// verdict.pub written again from it).
func WriteKeyPair(dir string) (KeyFiles, error) {
	kf := KeyFiles{Private: filepath.Join(dir, "verdict.key"), Public: filepath.Join(dir, "verdict.pub")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return kf, err
	}
	s, err := LoadSigner(kf.Private, 0)
	if errors.Is(err, os.ErrNotExist) {
		priv, gerr := GenerateKey()
		if gerr != nil {
			return kf, gerr
		}
		pemPriv, perr := EncodePrivate(priv)
		if perr != nil {
			return kf, perr
		}
		if werr := os.WriteFile(kf.Private, pemPriv, 0o600); werr != nil {
			return kf, werr
		}
		s, err = NewSigner(priv, 0)
	}
	if err != nil {
		return kf, err
	}
	pub, err := EncodePublic(s.Public())
	if err != nil {
		return kf, err
	}
	return kf, os.WriteFile(kf.Public, pub, 0o600)
}

// Paths splits a comma-separated list of paths, dropping empty ones.
func Paths(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// NewPair makes a key pair held in memory: a signer and a verifier that
// trusts it (one process serving a validator and an executor; tests).
func NewPair(ttl time.Duration) (*Signer, *Verifier, error) {
	key, err := GenerateKey()
	if err != nil {
		return nil, nil, err
	}
	s, err := NewSigner(key, ttl)
	if err != nil {
		return nil, nil, err
	}
	v, err := NewVerifier(s.Public())
	return s, v, err
}
