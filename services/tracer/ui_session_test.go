package tracer

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xct-dev/xct/lctl/debugger"
)

// clock is a settable time for the sessions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// linkServer serves the link routes over a handler that echoes the
// Authorization header it was called with; "Bearer good" (alice) and
// "Bearer other" (mallory) are the valid tokens. With tls the server is
// an httptest TLS server.
func linkServer(t *testing.T, tls ...bool) (*httptest.Server, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	names := map[string]string{"Bearer good": "alice", "Bearer other": "mallory"}
	s := newUISessions(func(r *http.Request) string { return names[r.Header.Get("Authorization")] })
	s.now = c.now
	authorize := func(r *http.Request, _ string) error {
		if names[r.Header.Get("Authorization")] == "" {
			return debugger.ErrUnauthenticated
		}
		return nil
	}
	mux := http.NewServeMux()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("as:" + r.Header.Get("Authorization")))
	})
	mux.Handle("/", s.mount(mux, authorize, echo))
	var srv *httptest.Server
	if len(tls) > 0 && tls[0] {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return srv, c
}

// client is a client of srv that follows no redirect.
func client(srv *httptest.Server) *http.Client {
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func newLink(t *testing.T, srv *httptest.Server, token, csrf string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+loginLinksPath, strings.NewReader(`{"chain":"run-1"}`))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if csrf != "" {
		req.Header.Set("X-XCT-CSRF", csrf)
	}
	return do(t, srv, req)
}

func do(t *testing.T, srv *httptest.Server, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client(srv).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// get GETs url with a session's cookie and key (either may be nil or
// "").
func get(t *testing.T, srv *httptest.Server, url string, cookie *http.Cookie, key ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if len(key) > 0 && key[0] != "" {
		req.Header.Set(sessionKeyHeader, key[0])
	}
	return do(t, srv, req)
}

// signIn posts a link's code as its page's Continue button would, with
// headers (name, value pairs) saying where the post came from, and the
// fields login.js adds (end, end_key) when end is not nil.
func signIn(t *testing.T, srv *httptest.Server, link string, end *session, headers ...string) (*http.Response, string) {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"code": {u.Query().Get("code")}}
	if end != nil {
		form.Set("end", end.handle)
		form.Set("end_key", end.key)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+loginPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, srv, req)
}

// session is what a sign-in gave the browser: the cookie, and from the
// answer's page (what login.js keeps) the session's path, key and handle,
// and where the page goes on to.
type session struct {
	cookie            *http.Cookie
	home, key, handle string
	to                string
}

// attr is the value of the data- attribute name in body ("" if none).
func attr(body, name string) string {
	_, rest, ok := strings.Cut(body, " data-"+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return html.UnescapeString(v)
}

// signedIn is the session a sign-in's answer gave (nil parts when it
// gave none).
func signedIn(resp *http.Response, body, cookieName string) session {
	return session{cookie: sessionOf(resp, cookieName), home: attr(body, "base"), key: attr(body, "key"), handle: attr(body, "handle"), to: attr(body, "to")}
}

// calls is what the echo handler says a request was served as, with
// the session's cookie and key.
func (s session) calls(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	_, body := get(t, srv, srv.URL+s.home+path, s.cookie, s.key)
	return body
}

// sameOrigin are the headers a browser sends with the page's own post.
func sameOrigin(srv *httptest.Server) []string {
	return []string{"Sec-Fetch-Site", "same-origin", "Origin", srv.URL}
}

func sessionOf(resp *http.Response, name string) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

func linkPath(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, `"path":"`)
	if i < 0 {
		t.Fatalf("no path in %s", body)
	}
	rest := body[i+len(`"path":"`):]
	return rest[:strings.Index(rest, `"`)]
}

func makeLink(t *testing.T, srv *httptest.Server, token string) string {
	t.Helper()
	resp, body := newLink(t, srv, token, "1")
	if resp.StatusCode != http.StatusOK || strings.Contains(body, token) {
		t.Fatalf("link: %s %s (the token must not be in it)", resp.Status, body)
	}
	return srv.URL + linkPath(t, body)
}

func TestOneTimeLink(t *testing.T) {
	t.Parallel()
	srv, c := linkServer(t)

	// Asking needs a valid bearer token and the CSRF header.
	if resp, body := newLink(t, srv, "", "1"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s %s", resp.Status, body)
	}
	if resp, body := newLink(t, srv, "bad", "1"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad token: %s %s", resp.Status, body)
	}
	if resp, body := newLink(t, srv, "good", ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no CSRF header: %s %s", resp.Status, body)
	}
	link := makeLink(t, srv, "good")

	// Opening it names the principal and signs nothing in; it can be
	// opened again until it is used.
	for range 2 {
		resp, body := get(t, srv, link, nil)
		if resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 0 || !strings.Contains(body, "signs this browser in as <strong>alice</strong>") ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Fatalf("open: %s cookies %v\n%s", resp.Status, resp.Cookies(), body)
		}
	}

	// Continue: a session cookie (HttpOnly, SameSite=Strict, short), and
	// a page (no redirect) that hands the session's key to its script and
	// names where to go on to.
	resp, body := signIn(t, srv, link, nil, sameOrigin(srv)...)
	alice := signedIn(resp, body, sessionCookie)
	cookie, home := alice.cookie, alice.home
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(home, "/s/") || alice.to != home+"#/chain/run-1" || cookie == nil ||
		!cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge != int(sessionTTL/time.Second) || cookie.Path != home ||
		len(alice.key) < 40 || len(alice.handle) < 40 || alice.key == cookie.Value || alice.handle == cookie.Value ||
		!strings.Contains(body, `<script src="/login.js"></script>`) || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("sign in: %s cookie %+v session %+v\n%s", resp.Status, cookie, alice, body)
	}
	if len(resp.Cookies()) != 1 {
		t.Fatalf("sign in set %d cookies (%v): only the session's, none of Path=/", len(resp.Cookies()), resp.Cookies())
	}
	if strings.Contains(home, alice.key) || strings.Contains(alice.to, alice.key) {
		t.Fatalf("the session's key in a URL: %+v", alice)
	}
	// The cookie with its key calls as the token that asked for the link,
	// under the session's own path only.
	if body := alice.calls(t, srv, "api/chains"); body != "as:Bearer good" {
		t.Fatalf("with the session: %q", body)
	}
	if _, body := get(t, srv, srv.URL+home+"api/chains", nil, alice.key); body != "as:" {
		t.Fatalf("the key without the cookie: %q", body)
	}
	for _, where := range []string{"/api/chains", "/s/another/api/chains", "/s/" + cookie.Value + "/api/chains"} {
		if _, body := get(t, srv, srv.URL+where, cookie, alice.key); body != "as:" {
			t.Fatalf("the session at %s: %q", where, body)
		}
	}
	// The cookie without its key (one planted from another origin), or
	// with a wrong one: refused, saying why.
	for _, key := range []string{"", "x", alice.handle, cookie.Value, alice.key[:len(alice.key)-1]} {
		resp, body := get(t, srv, srv.URL+home+"api/chains", cookie, key)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "key is missing or wrong") || strings.Contains(body, "as:") ||
			resp.Header.Get("Content-Security-Policy") != debugger.ContentSecurityPolicy {
			t.Fatalf("the cookie with key %q: %s %s", key, resp.Status, body)
		}
	}
	// The page and its assets need nothing.
	if _, body := get(t, srv, srv.URL+home, cookie); body != "as:" {
		t.Fatalf("the page with the cookie alone: %q", body)
	}
	// The live stream takes the key in its query (EventSource sends no
	// headers), and the key goes no further; no other API does.
	if _, body := get(t, srv, srv.URL+home+"api/chains/run-1/live?from=3&session_key="+url.QueryEscape(alice.key), cookie); body != "as:Bearer good" {
		t.Fatalf("live with the key in its query: %q", body)
	}
	if resp, _ := get(t, srv, srv.URL+home+"api/chains?session_key="+url.QueryEscape(alice.key), cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the key in another API's query: %s", resp.Status)
	}
	if resp, _ := get(t, srv, srv.URL+strings.TrimSuffix(home, "/"), cookie); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != home {
		t.Fatalf("the session's path without its slash: %s %q", resp.Status, resp.Header.Get("Location"))
	}
	// Second use: refused, opened or posted.
	if resp, body := get(t, srv, link, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "already used or has expired") {
		t.Fatalf("second open: %s %s", resp.Status, body)
	}
	if resp, body := signIn(t, srv, link, nil, sameOrigin(srv)...); resp.StatusCode != http.StatusUnauthorized || sessionOf(resp, sessionCookie) != nil || attr(body, "key") != "" {
		t.Fatalf("second use: %s %s", resp.Status, body)
	}
	// An unknown code: refused.
	if resp, _ := get(t, srv, srv.URL+loginPath+"?code=made-up", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("made-up code: %s", resp.Status)
	}

	// An expired code: refused.
	late := makeLink(t, srv, "good")
	c.add(loginCodeTTL + time.Second)
	if resp, _ := get(t, srv, late, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired code: %s", resp.Status)
	}
	if resp, _ := signIn(t, srv, late, nil, sameOrigin(srv)...); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired code posted: %s", resp.Status)
	}
	// An expired session no longer authenticates.
	c.add(sessionTTL)
	if body := alice.calls(t, srv, "api/chains"); body != "as:" {
		t.Fatalf("expired session: %q", body)
	}
}

// TestLinkSignsInOnlyFromItsPage: a link made by mallory, posted by
// another site's page (a form that submits itself, or a script) or by
// something that says nowhere where it comes from, signs no one in and
// leaves the code unused; its page names mallory, and only its own
// Continue signs in, ending alice's session when it carries that
// session's handle and key (what login.js adds from the page's storage).
// A handle with a wrong key ends nothing: no other origin can end a
// session it does not hold the key of.
func TestLinkSignsInOnlyFromItsPage(t *testing.T) {
	t.Parallel()
	srv, _ := linkServer(t)
	resp, body := signIn(t, srv, makeLink(t, srv, "good"), nil, sameOrigin(srv)...)
	alice := signedIn(resp, body, sessionCookie)
	if alice.cookie == nil || alice.key == "" {
		t.Fatalf("alice signs in: %s", resp.Status)
	}
	link := makeLink(t, srv, "other")
	for _, from := range [][]string{
		{"Sec-Fetch-Site", "cross-site", "Origin", "http://localhost:1"},
		{"Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:1"},
		{"Sec-Fetch-Site", "none"},
		{"Origin", "http://localhost:1"},
		{"Origin", "null"},
		{},
	} {
		resp, body := signIn(t, srv, link, &alice, from...)
		if resp.StatusCode != http.StatusForbidden || sessionOf(resp, sessionCookie) != nil {
			t.Fatalf("post with %q: %s %s", from, resp.Status, body)
		}
	}
	if body := alice.calls(t, srv, "api/chains"); body != "as:Bearer good" {
		t.Fatalf("alice's session after the refused posts: %q", body)
	}
	resp, body = get(t, srv, link, alice.cookie)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "signs this browser in as <strong>mallory</strong>") ||
		!strings.Contains(body, `<p id="current" hidden>`) || !strings.Contains(body, `<script src="/login.js"></script>`) {
		t.Fatalf("the page of mallory's link: %s\n%s", resp.Status, body)
	}
	// mallory's own sign-in naming alice's handle with a wrong key (she
	// may learn a handle, never a key): alice's session stays.
	wrong := session{handle: alice.handle, key: alice.cookie.Value}
	resp, body = signIn(t, srv, makeLink(t, srv, "other"), &wrong, sameOrigin(srv)...)
	if resp.StatusCode != http.StatusOK || signedIn(resp, body, sessionCookie).key == "" {
		t.Fatalf("mallory's sign-in: %s", resp.Status)
	}
	if body := alice.calls(t, srv, "api/chains"); body != "as:Bearer good" {
		t.Fatalf("alice's session after a sign-in naming it with a wrong key: %q", body)
	}
	// An older browser: no Sec-Fetch-Site, its Origin this host; the page
	// adds alice's session's handle and key.
	resp, body = signIn(t, srv, link, &alice, "Origin", srv.URL)
	mallory := signedIn(resp, body, sessionCookie)
	if resp.StatusCode != http.StatusOK || mallory.cookie == nil {
		t.Fatalf("Continue on the page: %s", resp.Status)
	}
	if body := mallory.calls(t, srv, "api/chains"); body != "as:Bearer other" {
		t.Fatalf("mallory's session: %q", body)
	}
	if body := alice.calls(t, srv, "api/chains"); body != "as:" {
		t.Fatalf("alice's replaced session still authenticates: %q", body)
	}
	// Each session's key is its own.
	if _, body := get(t, srv, srv.URL+mallory.home+"api/chains", mallory.cookie, alice.key); body == "as:Bearer other" {
		t.Fatalf("mallory's cookie with alice's key: %q", body)
	}
}

// TestSessionMintsNoLink: a session cookie alone cannot ask for a link
// (which would extend the session past its 30 minutes by script).
func TestSessionMintsNoLink(t *testing.T) {
	t.Parallel()
	srv, _ := linkServer(t)
	resp, body := signIn(t, srv, makeLink(t, srv, "good"), nil, sameOrigin(srv)...)
	alice := signedIn(resp, body, sessionCookie)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+loginLinksPath, strings.NewReader(`{"chain":"run-1"}`))
	req.Header.Set("X-XCT-CSRF", "1")
	req.Header.Set(sessionKeyHeader, alice.key)
	req.AddCookie(alice.cookie)
	if resp, body := do(t, srv, req); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a link asked for with the session cookie: %s %s", resp.Status, body)
	}
}

// TestSessionCookieOverTLS: over TLS the cookie is __Host- and Secure,
// it needs its key as on plaintext, and a cookie of the plain name (one a
// sibling domain could plant) is not read.
func TestSessionCookieOverTLS(t *testing.T) {
	t.Parallel()
	srv, _ := linkServer(t, true)
	resp, body := signIn(t, srv, makeLink(t, srv, "good"), nil, sameOrigin(srv)...)
	alice := signedIn(resp, body, hostCookie)
	cookie := alice.cookie
	if cookie == nil || !cookie.Secure || !cookie.HttpOnly || cookie.Path != "/" || cookie.Domain != "" || alice.home != "/" || alice.key == "" {
		t.Fatalf("cookie over TLS: %+v (all: %v), session %+v", cookie, resp.Cookies(), alice)
	}
	if body := alice.calls(t, srv, "api/chains"); body != "as:Bearer good" {
		t.Fatalf("with the session: %q", body)
	}
	if resp, _ := get(t, srv, srv.URL+"/api/chains", cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the cookie without its key over TLS: %s", resp.Status)
	}
	planted := &http.Cookie{Name: sessionCookie, Value: cookie.Value}
	if _, body := get(t, srv, srv.URL+"/api/chains", planted, alice.key); body != "as:" {
		t.Fatalf("a plain-named cookie over TLS: %q", body)
	}
}

// TestLinksOfOnePrincipalPushOutNoOther: mallory makes more links, and
// signs in more often, than the tracer keeps for everyone (1024 codes,
// 4096 sessions): alice's link made before still works, and her session
// still authenticates; mallory keeps her own last ones only.
func TestLinksOfOnePrincipalPushOutNoOther(t *testing.T) {
	t.Parallel()
	srv, c := linkServer(t)
	alicesLink := makeLink(t, srv, "good")
	resp, body := signIn(t, srv, makeLink(t, srv, "good"), nil, sameOrigin(srv)...)
	alice := signedIn(resp, body, sessionCookie)
	var last string
	for range maxLoginCodes + 1 {
		c.add(time.Millisecond) // alice's are the oldest
		last = makeLink(t, srv, "other")
	}
	for range maxSessions + 1 {
		c.add(time.Millisecond)
		resp, _ := signIn(t, srv, makeLink(t, srv, "other"), nil, sameOrigin(srv)...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("mallory signs in: %s", resp.Status)
		}
	}
	if body := alice.calls(t, srv, "api/chains"); body != "as:Bearer good" {
		t.Fatalf("alice's session after mallory's: %q", body)
	}
	if resp, body := signIn(t, srv, alicesLink, nil, sameOrigin(srv)...); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's link after mallory's %d: %s %s", maxLoginCodes+1, resp.Status, body)
	}
	if resp, _ := get(t, srv, last, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("mallory's last link: %s", resp.Status)
	}
}
