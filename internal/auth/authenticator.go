package auth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/xct-dev/xct/internal/reload"
)

// Config is how a service authenticates its callers (flags).
type Config struct {
	// TokensFile is a YAML list of {principal, roles, token|token_sha256};
	// it is re-read when it changes.
	TokensFile string
	// OIDC: JWTs are verified against the JWKS (a file, re-read when it
	// changes, or an https URL) and must carry the issuer, the audience
	// and an expiry in the future.
	OIDCIssuer         string
	OIDCAudience       string
	OIDCJWKS           string
	OIDCRolesClaim     string
	OIDCPrincipalClaim string
}

// RegisterFlags registers the authentication flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TokensFile, "auth-tokens", "", "bearer tokens file: a YAML list of {principal, roles, token|token_sha256}, re-read when it changes")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", "", "accept JWTs issued by this issuer (with --oidc-audience and --oidc-jwks)")
	fs.StringVar(&c.OIDCAudience, "oidc-audience", "", "the audience JWTs must name")
	fs.StringVar(&c.OIDCJWKS, "oidc-jwks", "", "the issuer's signing keys: a JWKS file (re-read when it changes) or an https URL")
	fs.StringVar(&c.OIDCRolesClaim, "oidc-roles-claim", "roles", "the JWT claim holding the principal's roles (a list or a space-separated string)")
	fs.StringVar(&c.OIDCPrincipalClaim, "oidc-principal-claim", "sub", "the JWT claim naming the principal")
}

// Enabled reports whether any way of authenticating is configured.
func (c Config) Enabled() bool { return c.TokensFile != "" || c.OIDCIssuer != "" }

// Authenticator turns credentials into principals.
type Authenticator struct {
	tokens *reload.Files[*tokenSet]
	jwt    *jwtVerifier
	log    *slog.Logger
}

// ErrUnauthenticated is every authentication failure; the wrapped message
// says why, for the server's log (callers are told less).
var ErrUnauthenticated = errors.New("unauthenticated")

// New builds an authenticator. With nothing configured it still
// authenticates service certificates, and refuses every token.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Authenticator, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{log: log}
	onReloadError := func(err error) {
		log.Error("credentials file changed but cannot be used; keeping the last good one", "err", err)
	}
	if cfg.TokensFile != "" {
		ts, err := reload.New(func(data [][]byte) (*tokenSet, error) {
			entries, err := ParseTokens(data[0])
			if err != nil {
				return nil, err
			}
			return newTokenSet(entries)
		}, time.Second, onReloadError, cfg.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("--auth-tokens: %w", err)
		}
		a.tokens = ts
	}
	if cfg.OIDCIssuer != "" || cfg.OIDCAudience != "" || cfg.OIDCJWKS != "" {
		v, err := newJWTVerifier(ctx, cfg, onReloadError)
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

// Authenticate turns a bearer token into a principal: a token of the tokens
// file, or a JWT the OIDC settings accept. Errors wrap ErrUnauthenticated.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	if a.tokens != nil {
		if p, ok := a.tokens.Get().lookup(token); ok {
			return p, nil
		}
	}
	if a.jwt != nil && looksLikeJWT(token) {
		p, err := a.jwt.verify(ctx, token)
		if err != nil {
			return Principal{}, fmt.Errorf("%w: jwt: %w", ErrUnauthenticated, err)
		}
		return p, nil
	}
	return Principal{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}

// AuthenticateGRPC finds the caller of a gRPC call: the bearer token of
// its "authorization" metadata if it has one, else the service identity of
// its verified client certificate. More than one authorization value is
// refused (it would be ambiguous which one counts).
func (a *Authenticator) AuthenticateGRPC(ctx context.Context) (Principal, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	switch len(vals) {
	case 0:
		if p, ok := PeerPrincipal(ctx); ok {
			return p, nil
		}
		return Principal{}, fmt.Errorf("%w: no bearer token and no service certificate", ErrUnauthenticated)
	case 1:
		tok, err := bearer(vals[0])
		if err != nil {
			return Principal{}, err
		}
		return a.Authenticate(ctx, tok)
	}
	return Principal{}, fmt.Errorf("%w: %d authorization values", ErrUnauthenticated, len(vals))
}

// AuthenticateHTTP finds the caller of an HTTP request from its
// "Authorization: Bearer" header (for the tracer's HTTP API).
func (a *Authenticator) AuthenticateHTTP(r *http.Request) (Principal, error) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return Principal{}, fmt.Errorf("%w: want one Authorization: Bearer header, got %d", ErrUnauthenticated, len(vals))
	}
	tok, err := bearer(vals[0])
	if err != nil {
		return Principal{}, err
	}
	return a.Authenticate(r.Context(), tok)
}

// BearerToken returns the token of an HTTP request's Authorization header
// ("" if it has none), e.g. to forward the caller's identity.
func BearerToken(r *http.Request) string {
	tok, err := bearer(r.Header.Get("Authorization"))
	if err != nil {
		return ""
	}
	return tok
}

func bearer(v string) (string, error) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%w: authorization is not \"Bearer <token>\"", ErrUnauthenticated)
	}
	return strings.TrimSpace(tok), nil
}

// Expired reports whether an authentication error is an expired JWT.
func Expired(err error) bool { return errors.Is(err, errExpired) }
