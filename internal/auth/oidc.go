package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/xct-dev/xct/internal/reload"
)

// signingAlgs are the JWT signature algorithms accepted (never "none" or
// HMAC: a verifier holding a shared secret could mint tokens).
var signingAlgs = []string{
	string(jose.RS256), string(jose.RS384), string(jose.RS512),
	string(jose.PS256), string(jose.PS384), string(jose.PS512),
	string(jose.ES256), string(jose.ES384), string(jose.ES512),
	string(jose.EdDSA),
}

// errExpired marks an expired JWT, so the caller can be told.
var errExpired = errors.New("token expired")

// jwtVerifier checks JWTs from an OIDC provider: signature against the
// configured JWKS, issuer, audience, expiry and not-before.
type jwtVerifier struct {
	verifier       *oidc.IDTokenVerifier
	rolesClaim     string
	principalClaim string
}

func newJWTVerifier(ctx context.Context, cfg Config, onReloadError func(error)) (*jwtVerifier, error) {
	if cfg.OIDCIssuer == "" || cfg.OIDCAudience == "" || cfg.OIDCJWKS == "" {
		return nil, errors.New("OIDC needs --oidc-issuer, --oidc-audience and --oidc-jwks together")
	}
	var keys oidc.KeySet
	if strings.Contains(cfg.OIDCJWKS, "://") {
		u, err := url.Parse(cfg.OIDCJWKS)
		if err != nil {
			return nil, fmt.Errorf("--oidc-jwks: %w", err)
		}
		if secure := u.Scheme == "https" || (u.Scheme == "http" && isLoopbackHost(u.Hostname())); !secure {
			return nil, fmt.Errorf("--oidc-jwks %s: an https URL is required (http only on loopback)", cfg.OIDCJWKS)
		}
		keys = oidc.NewRemoteKeySet(ctx, cfg.OIDCJWKS)
	} else {
		fk, err := newFileKeySet(cfg.OIDCJWKS, onReloadError)
		if err != nil {
			return nil, err
		}
		keys = fk
	}
	rolesClaim, principalClaim := cfg.OIDCRolesClaim, cfg.OIDCPrincipalClaim
	if rolesClaim == "" {
		rolesClaim = "roles"
	}
	if principalClaim == "" {
		principalClaim = "sub"
	}
	v := oidc.NewVerifier(cfg.OIDCIssuer, keys, &oidc.Config{
		ClientID:             cfg.OIDCAudience,
		SupportedSigningAlgs: signingAlgs,
	})
	return &jwtVerifier{verifier: v, rolesClaim: rolesClaim, principalClaim: principalClaim}, nil
}

// verify turns a JWT into a principal.
func (v *jwtVerifier) verify(ctx context.Context, raw string) (Principal, error) {
	tok, err := v.verifier.Verify(ctx, raw)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			if exp.Expiry.IsZero() {
				return Principal{}, errors.New("token has no expiry (exp)")
			}
			return Principal{}, fmt.Errorf("%w at %s", errExpired, exp.Expiry.UTC().Format(time.RFC3339))
		}
		return Principal{}, err
	}
	if tok.Expiry.IsZero() {
		return Principal{}, errors.New("token has no expiry (exp)")
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Principal{}, fmt.Errorf("claims: %w", err)
	}
	name, _ := claims[v.principalClaim].(string)
	if strings.TrimSpace(name) == "" {
		return Principal{}, fmt.Errorf("token has no %q claim", v.principalClaim)
	}
	var roles []string
	switch rs := claims[v.rolesClaim].(type) {
	case string:
		roles = strings.Fields(rs)
	case []any:
		for _, r := range rs {
			if s, ok := r.(string); ok {
				roles = append(roles, s)
			}
		}
	}
	// A token can never make its holder one of XCT's services: that
	// identity comes only from a service certificate or the tokens file.
	var kept []string
	for _, r := range knownOnly(roles) {
		if r != RoleService {
			kept = append(kept, r)
		}
	}
	return Principal{Name: strings.TrimSpace(name), Roles: kept}, nil
}

// looksLikeJWT reports whether a token has the three dot-separated parts
// of a compact JWS.
func looksLikeJWT(tok string) bool { return strings.Count(tok, ".") == 2 }

// fileKeySet verifies signatures with the keys of a JWKS file, re-read when
// it changes. A token must name its key (kid) when the set has more than
// one; a kid the set does not hold is refused.
type fileKeySet struct {
	keys *reload.Files[jose.JSONWebKeySet]
}

func newFileKeySet(path string, onReloadError func(error)) (*fileKeySet, error) {
	keys, err := reload.New(func(data [][]byte) (jose.JSONWebKeySet, error) {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(data[0], &set); err != nil {
			return set, fmt.Errorf("JWKS: %w", err)
		}
		if len(set.Keys) == 0 {
			return set, errors.New("JWKS has no keys")
		}
		for _, k := range set.Keys {
			if !k.IsPublic() {
				return set, fmt.Errorf("JWKS key %q is not a public key", k.KeyID)
			}
		}
		return set, nil
	}, time.Second, onReloadError, path)
	if err != nil {
		return nil, fmt.Errorf("--oidc-jwks: %w", err)
	}
	return &fileKeySet{keys: keys}, nil
}

// VerifySignature implements oidc.KeySet.
func (f *fileKeySet) VerifySignature(_ context.Context, raw string) ([]byte, error) {
	algs := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	jws, err := jose.ParseSignedCompact(raw, algs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("exactly one signature is required")
	}
	kid := jws.Signatures[0].Header.KeyID
	set := f.keys.Get()
	candidates := set.Keys
	if kid != "" {
		candidates = set.Key(kid)
		if len(candidates) == 0 {
			return nil, fmt.Errorf("unknown key id %q", kid)
		}
	} else if len(candidates) > 1 {
		return nil, errors.New("the token names no key id (kid) and the key set has several keys")
	}
	for i := range candidates {
		if payload, err := jws.Verify(&candidates[i]); err == nil {
			return payload, nil
		}
	}
	return nil, errors.New("signature does not verify")
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
