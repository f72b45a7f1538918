package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/xct-dev/xct/gen/lctl/v1" // registers the protos walked below
	_ "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/testutil"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

const aliceTok = "alice-token-0123456789"

func TestParseTokensRejectsMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, want string }{
		{"unknown key", "- {principal: a, roles: [submitter], token: 0123456789abcdefX, role: x}", "field role not found"},
		{"unknown role", "- {principal: a, roles: [approvers], token: 0123456789abcdefX}", `unknown role "approvers"`},
		{"no roles", "- {principal: a, token: 0123456789abcdefX}", "roles are required"},
		{"no principal", "- {roles: [admin], token: 0123456789abcdefX}", "principal is required"},
		{"short token", "- {principal: a, roles: [admin], token: short}", "shorter than 16"},
		{"both forms", "- {principal: a, roles: [admin], token: 0123456789abcdefX, token_sha256: " + TokenSHA256("0123456789abcdefX") + "}", "not both"},
		{"bad digest", "- {principal: a, roles: [admin], token_sha256: abc}", "64 hex digits"},
		{"no token", "- {principal: a, roles: [admin]}", "token or token_sha256 is required"},
		{"same token twice", "- {principal: a, roles: [admin], token: 0123456789abcdefX}\n- {principal: b, roles: [admin], token_sha256: " + TokenSHA256("0123456789abcdefX") + "}", `same token as "a"`},
		{"same principal twice", "- {principal: a, roles: [admin], token: 0123456789abcdefX}\n- {principal: A, roles: [admin], token: 0123456789abcdefY}", "listed twice"},
		{"long s for s", "- {principal: sam, roles: [admin], token: 0123456789abcdefX}\n- {principal: \"ſam\", roles: [submitter], token: 0123456789abcdefY}", "listed twice"},
		{"full-width", "- {principal: sam, roles: [admin], token: 0123456789abcdefX}\n- {principal: \"ｓａｍ\", roles: [submitter], token: 0123456789abcdefY}", "listed twice"},
		{"trailing dot", "- {principal: sam, roles: [admin], token: 0123456789abcdefX}\n- {principal: \"sam.\", roles: [submitter], token: 0123456789abcdefY}", "listed twice"},
		{"zero-width space", "- {principal: sam, roles: [admin], token: 0123456789abcdefX}\n- {principal: \"s\\u200bam\", roles: [submitter], token: 0123456789abcdefY}", "listed twice"},
		{"not a list", "principal: a", "cannot unmarshal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTokensFileAuthenticatesAndReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.yaml")
	bobTok := "bob-token-abcdefghijkl"
	writeFile(t, path, "- {principal: alice, roles: [submitter, auditor], token: "+aliceTok+"}\n"+
		"- {principal: bob, roles: [approver], token_sha256: "+TokenSHA256(bobTok)+"}\n")
	logs := &testutil.Buffer{}
	a, err := New(context.Background(), Config{TokensFile: path}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := a.Authenticate(ctx, aliceTok)
	if err != nil || p.Name != "alice" || !slices.Equal(p.Roles, []string{RoleAuditor, RoleSubmitter}) || p.Service {
		t.Fatalf("alice: %+v %v", p, err)
	}
	if p, err := a.Authenticate(ctx, bobTok); err != nil || p.Name != "bob" || !p.Has(RoleApprover) {
		t.Fatalf("bob: %+v %v", p, err)
	}
	for _, bad := range []string{"", "nope", aliceTok + "x", aliceTok[:len(aliceTok)-1], strings.ToUpper(aliceTok)} {
		if _, err := a.Authenticate(ctx, bad); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("token %q: err = %v", bad, err)
		}
	}

	// Rotation: alice's token is replaced, carol is added.
	carolTok := "carol-token-abcdefghijkl"
	writeFile(t, path, "- {principal: alice, roles: [submitter], token: alice-new-token-0123456789}\n"+
		"- {principal: carol, roles: [operator], token: "+carolTok+"}\n")
	testutil.Eventually(t, 20*time.Second, func() error {
		if _, err := a.Authenticate(ctx, carolTok); err != nil {
			return err
		}
		return nil
	})
	if _, err := a.Authenticate(ctx, aliceTok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("the old token still works: %v", err)
	}
	// A broken file keeps the last good one.
	writeFile(t, path, "- {principal: carol, roles: [operators], token: "+carolTok+"}\n")
	if err := os.Chtimes(path, time.Now().Add(time.Minute), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Until the broken file was looked at (the authenticator logs that it
	// keeps the last good one), and after, carol keeps her role.
	testutil.Eventually(t, 20*time.Second, func() error {
		if p, err := a.Authenticate(ctx, carolTok); err != nil || !p.Has(RoleOperator) {
			t.Fatalf("after a broken reload: %+v %v", p, err)
		}
		if !strings.Contains(logs.String(), "credentials file changed but cannot be used") {
			return errors.New("the broken file was not looked at yet")
		}
		return nil
	})
}

func TestAuthenticateGRPCMetadata(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "- {principal: alice, roles: [submitter], token: "+aliceTok+"}\n")
	a, err := New(context.Background(), Config{TokensFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		md   metadata.MD
		ok   bool
	}{
		{"bearer", metadata.Pairs("authorization", "Bearer "+aliceTok), true},
		{"scheme case", metadata.Pairs("authorization", "bearer "+aliceTok), true},
		{"none", metadata.MD{}, false},
		{"basic", metadata.Pairs("authorization", "Basic "+aliceTok), false},
		{"no scheme", metadata.Pairs("authorization", aliceTok), false},
		{"two values", metadata.Pairs("authorization", "Bearer "+aliceTok, "authorization", "Bearer "+aliceTok), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.NewIncomingContext(context.Background(), tc.md)
			p, err := a.AuthenticateGRPC(ctx)
			if tc.ok != (err == nil) || (tc.ok && p.Name != "alice") {
				t.Fatalf("principal %+v err %v", p, err)
			}
			if err != nil && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("err %v does not wrap ErrUnauthenticated", err)
			}
		})
	}
}

func TestAuthenticateHTTP(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, path, "- {principal: dave, roles: [auditor], token: "+aliceTok+"}\n")
	a, err := New(context.Background(), Config{TokensFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, err := a.AuthenticateHTTP(r); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("no header: %v", err)
	}
	r.Header.Set("Authorization", "Bearer "+aliceTok)
	if p, err := a.AuthenticateHTTP(r); err != nil || p.Name != "dave" || BearerToken(r) != aliceTok {
		t.Fatalf("%+v %v", p, err)
	}
}

// issuer signs JWTs with keys generated in the test.
type issuer struct {
	keys map[string]*ecdsa.PrivateKey
}

func newIssuer(t *testing.T, kids ...string) *issuer {
	t.Helper()
	is := &issuer{keys: map[string]*ecdsa.PrivateKey{}}
	for _, kid := range kids {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		is.keys[kid] = k
	}
	return is
}

func (is *issuer) jwks(t *testing.T) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (is *issuer) sign(t *testing.T, kid string, key *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	if key == nil {
		key = is.keys[kid]
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

const (
	testIssuer   = "https://idp.example.test"
	testAudience = "xct"
)

func claims(over map[string]any) map[string]any {
	c := map[string]any{
		"iss": testIssuer, "aud": testAudience, "sub": "erin",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
		"roles": []string{"approver", "service", "something-else"},
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func TestJWTVerification(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1", "k2")
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, path, string(is.jwks(t)))
	a, err := New(context.Background(), Config{OIDCIssuer: testIssuer, OIDCAudience: testAudience, OIDCJWKS: path, OIDCRolesClaim: "roles"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := is.sign(t, "k1", nil, claims(nil))
	p, err := a.Authenticate(ctx, good)
	// A token never makes its holder a service; unknown roles are dropped.
	if err != nil || p.Name != "erin" || !slices.Equal(p.Roles, []string{RoleApprover}) || p.Service {
		t.Fatalf("good token: %+v %v", p, err)
	}
	if p, err := a.Authenticate(ctx, is.sign(t, "k2", nil, claims(map[string]any{"roles": "auditor submitter"}))); err != nil || !slices.Equal(p.Roles, []string{RoleAuditor, RoleSubmitter}) {
		t.Fatalf("space-separated roles: %+v %v", p, err)
	}

	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	hmacSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	hmacTok, _ := jwt.Signed(hmacSigner).Claims(claims(nil)).Serialize()
	parts := strings.Split(good, ".")
	tests := []struct {
		name, token, want string
	}{
		{"expired", is.sign(t, "k1", nil, claims(map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})), "token expired"},
		{"wrong audience", is.sign(t, "k1", nil, claims(map[string]any{"aud": "someone-else"})), "audience"},
		{"wrong issuer", is.sign(t, "k1", nil, claims(map[string]any{"iss": "https://evil.example.test"})), "different provider"},
		{"unknown kid", is.sign(t, "k9", stranger, claims(nil)), `unknown key id "k9"`},
		{"known kid, other key", is.sign(t, "k1", stranger, claims(nil)), "signature does not verify"},
		{"no kid with two keys", is.sign(t, "", is.keys["k1"], claims(nil)), "names no key id"},
		{"no expiry", is.sign(t, "k1", nil, claims(map[string]any{"exp": nil})), "no expiry"},
		{"no subject", is.sign(t, "k1", nil, claims(map[string]any{"sub": nil})), `no "sub" claim`},
		{"not yet valid", is.sign(t, "k1", nil, claims(map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "not before"},
		{"hmac", hmacTok, "malformed"},
		{"tampered payload", parts[0] + "." + strings.TrimRight(parts[1], "A") + "B." + parts[2], ""},
		{"alg none", "eyJhbGciOiJub25lIn0." + parts[1] + ".", "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := a.Authenticate(ctx, tc.token)
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("principal %+v, err = %v, want %q", p, err, tc.want)
			}
			if (tc.name == "expired") != Expired(err) {
				t.Fatalf("Expired(%v) = %v", err, Expired(err))
			}
		})
	}

	// Key rotation: k3 replaces the set; tokens of k1 stop working.
	is2 := newIssuer(t, "k3")
	writeFile(t, path, string(is2.jwks(t)))
	fresh := is2.sign(t, "k3", nil, claims(nil))
	testutil.Eventually(t, 20*time.Second, func() error { _, err := a.Authenticate(ctx, fresh); return err })
	if _, err := a.Authenticate(ctx, good); err == nil {
		t.Fatal("a token of a removed key still works")
	}
}

func TestJWTFromJWKSURL(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(is.jwks(t))
	}))
	defer srv.Close()
	ctx := oidc.ClientContext(context.Background(), srv.Client())
	a, err := New(ctx, Config{OIDCIssuer: testIssuer, OIDCAudience: testAudience, OIDCJWKS: srv.URL + "/jwks"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Authenticate(context.Background(), is.sign(t, "k1", nil, claims(nil))); err != nil || p.Name != "erin" {
		t.Fatalf("%+v %v", p, err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := a.Authenticate(context.Background(), is.sign(t, "k2", other, claims(nil))); err == nil {
		t.Fatal("a token of an unknown key was accepted")
	}
	if _, err := New(ctx, Config{OIDCIssuer: testIssuer, OIDCAudience: testAudience, OIDCJWKS: "http://idp.example.test/jwks"}, nil); err == nil {
		t.Fatal("a JWKS over plain http to a non-loopback host was accepted")
	}
	if _, err := New(ctx, Config{OIDCIssuer: testIssuer, OIDCJWKS: srv.URL}, nil); err == nil {
		t.Fatal("OIDC without an audience was accepted")
	}
}

func TestCertPrincipal(t *testing.T) {
	t.Parallel()
	u := func(s string) *url.URL {
		v, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name string
		uris []*url.URL
		want string
	}{
		{"service", []*url.URL{ServiceID("orchestrator")}, "service:orchestrator"},
		{"other trust domain", []*url.URL{u("spiffe://evil.example/service/orchestrator")}, ""},
		{"not a service", []*url.URL{u("spiffe://xct.local/user/alice")}, ""},
		{"two ids", []*url.URL{ServiceID("a"), ServiceID("b")}, ""},
		{"bad name", []*url.URL{u("spiffe://xct.local/service/a/b")}, ""},
		{"none", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := CertPrincipal(&x509.Certificate{URIs: tc.uris})
			if ok != (tc.want != "") || p.Name != tc.want || (ok && (!p.Service || !p.Has(RoleService))) {
				t.Fatalf("%+v %v", p, ok)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	tbl := DefaultTable()
	who := func(roles ...string) Principal { return Principal{Name: "x", Roles: roles} }
	tests := []struct {
		p      Principal
		method string
		ok     bool
	}{
		{who(RoleSubmitter), "/xct.v1.OrchestratorService/StartRun", true},
		{who(RoleApprover), "/xct.v1.OrchestratorService/StartRun", false},
		{who(RoleAuditor), "/xct.v1.OrchestratorService/GetRun", true},
		{who(RoleAuditor), "/lctl.v1.TracerService/VerifyChain", true},
		{who(RoleApprover), "/xct.v1.ValidatorService/DecideApproval", true},
		{who(RoleSubmitter), "/xct.v1.ValidatorService/DecideApproval", false},
		{who(RoleSubmitter), "/xct.v1.ValidatorService/Validate", false},
		{who(RoleService), "/xct.v1.ValidatorService/Validate", true},
		{who(RoleService), "/xct.v1.OrchestratorService/StartRun", false},
		{who(RoleOperator), "/xct.v1.ExecutorService/ResolveStep", true},
		{who(RoleOperator), "/xct.v1.ExecutorService/Execute", false},
		{who(RoleAdmin), "/xct.v1.ExecutorService/Execute", true},
		{who(), "/xct.v1.OrchestratorService/GetRun", false},
		{who(RoleAdmin), "/xct.v1.OrchestratorService/NoSuchMethod", false},
		// External servers' methods name their one caller.
		{Principal{Name: ExecutorPrincipal, Roles: []string{RoleService}, Service: true}, "/xct.v1.ToolService/Invoke", true},
		{Principal{Name: ExecutorPrincipal, Roles: []string{RoleService}, Service: true}, "/xct.v1.ToolService/Describe", true},
		{Principal{Name: "service:tracer", Roles: []string{RoleService}, Service: true}, "/xct.v1.ToolService/Invoke", false},
		{Principal{Name: OrchestratorPrincipal, Roles: []string{RoleService}, Service: true}, "/xct.v1.ToolService/Invoke", false},
		{Principal{Name: ExecutorPrincipal, Roles: []string{RoleAdmin}}, "/xct.v1.ToolService/Invoke", false},
		{who(RoleAdmin), "/xct.v1.ToolService/Invoke", false},
		{Principal{Name: OrchestratorPrincipal, Roles: []string{RoleService}, Service: true}, "/xct.v1.ProposerService/Propose", true},
		{Principal{Name: ExecutorPrincipal, Roles: []string{RoleService}, Service: true}, "/xct.v1.ProposerService/Propose", false},
	}
	for _, tc := range tests {
		err := tbl.Authorize(tc.p, tc.method)
		if tc.ok != (err == nil) {
			t.Errorf("%s %v calling %s: %v", tc.p.Name, tc.p.Roles, tc.method, err)
		}
	}
	if !IsOpen("/grpc.health.v1.Health/Check") || IsOpen("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo") {
		t.Fatal("only health is open")
	}
}

// TestEveryRPCIsInTheTable walks every service of XCT's protos: an RPC
// added without an authorization rule fails here (and the server refuses to
// start with it, see grpcx).
func TestEveryRPCIsInTheTable(t *testing.T) {
	t.Parallel()
	tbl := DefaultTable()
	var all []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		pkg := string(fd.Package())
		if pkg != "xct.v1" && pkg != "lctl.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				all = append(all, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(all) < 25 {
		t.Fatalf("found only %d methods: %v", len(all), all)
	}
	if missing := tbl.Missing(all); len(missing) > 0 {
		t.Fatalf("methods without an authorization rule: %v", missing)
	}
	// And the table names nothing that does not exist (a renamed RPC).
	for m := range tbl {
		if !slices.Contains(all, m) && !strings.HasPrefix(m, "/grpc.reflection.") && !strings.HasPrefix(m, "/opentelemetry.") {
			t.Errorf("the table names %s, which no service has", m)
		}
	}
}

func TestDevCredentialsAndClientToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "dev", "credentials.yaml")
	entries, err := DevCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Principal)
	}
	if strings.Join(names, ",") != "dev,alice,bob,carol,dave,admin,service:dev" {
		t.Fatalf("principals %v", names)
	}
	again, err := DevCredentials(path)
	if err != nil || again[2].Token != entries[2].Token {
		t.Fatal("tokens changed although the file exists")
	}
	a, err := New(context.Background(), Config{TokensFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, as := range []string{"", "bob", "service:dev"} {
		tok, err := ClientToken("", as, path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(context.Background(), tok)
		want := map[string]string{"": "dev", "bob": "bob", "service:dev": "service:dev"}[as]
		if err != nil || p.Name != want {
			t.Fatalf("as %q: %+v %v", as, p, err)
		}
	}
	if tok, err := ClientToken("explicit-token", "bob", path); err != nil || tok != "explicit-token" {
		t.Fatalf("explicit token: %q %v", tok, err)
	}
	if _, err := ClientToken("", "mallory", path); err == nil {
		t.Fatal("a principal without a token got one")
	}
	if _, err := ClientToken("", "", filepath.Join(dir, "missing.yaml")); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestPrincipalNames: a name grants only itself (SamePrincipal, Is), and
// refuses what looks like it (LookAlike).
func TestPrincipalNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b       string
		same, like bool
	}{
		{"alice", "alice", true, true},
		{" alice ", "alice", true, true},
		{"alice", "Alice", false, true},
		{"sam", "ſam", false, true},
		{"kate", "\u212aate", false, true}, // Kelvin sign
		{"alice", "ａｌｉｃｅ", false, true},
		{"alice", "alice.", false, true},
		{"alice", "al\u200bice", false, true},
		{"alice", "alice\u00ad", false, true},
		{"jose\u0301", "jos\u00e9", false, true}, // NFD and NFC
		{"alice", "alicia", false, false},
		{"alice", "alice2", false, false},
		{"a.lice", "alice", false, false},
	} {
		if got := SamePrincipal(tc.a, tc.b); got != tc.same {
			t.Errorf("SamePrincipal(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
		if got := LookAlike(tc.a, tc.b); got != tc.like {
			t.Errorf("LookAlike(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.like)
		}
	}
	ctx := NewContext(context.Background(), Principal{Name: "sam", Roles: []string{RoleSubmitter}})
	if p, err := ActingAs(ctx, "sam"); err != nil || p.Name != "sam" {
		t.Fatalf("ActingAs its own name: %v %v", p, err)
	}
	// A look-alike of the caller's own name acts as the caller, as its
	// token names it; any other name is refused.
	for _, alias := range []string{"SAM", "ſam", "sam."} {
		if p, err := ActingAs(ctx, alias); err != nil || p.Name != "sam" {
			t.Errorf("ActingAs(%q) from sam: %v %v, want sam", alias, p, err)
		}
	}
	if _, err := ActingAs(ctx, "samuel"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ActingAs(samuel) from sam: %v, want PERMISSION_DENIED", err)
	}
}
