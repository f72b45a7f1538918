package tracer

import (
	"io"
	"net/http"
	"net/http/httptest"
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
// Authorization header it was called with; "Bearer good" is the only
// valid token.
func linkServer(t *testing.T) (*httptest.Server, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newUISessions()
	s.now = c.now
	authorize := func(r *http.Request, _ string) error {
		if r.Header.Get("Authorization") != "Bearer good" {
			return debugger.ErrUnauthenticated
		}
		return nil
	}
	mux := http.NewServeMux()
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("as:" + r.Header.Get("Authorization")))
	})
	mux.Handle("/", s.mount(mux, authorize, echo))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, c
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func newLink(t *testing.T, srv *httptest.Server, token, csrf string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+loginLinksPath, strings.NewReader(`{"chain":"run-1"}`))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if csrf != "" {
		req.Header.Set("X-XCT-CSRF", csrf)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func get(t *testing.T, url string, cookie *http.Cookie) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
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

func TestOneTimeLink(t *testing.T) {
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
	resp, body := newLink(t, srv, "good", "1")
	if resp.StatusCode != http.StatusOK || strings.Contains(body, "good") {
		t.Fatalf("link: %s %s (the token must not be in it)", resp.Status, body)
	}
	link := srv.URL + linkPath(t, body)

	// First use: a session cookie (HttpOnly, SameSite=Strict, short) and
	// the way to the chain.
	resp, _ = get(t, link, nil)
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/#/chain/run-1" || cookie == nil ||
		!cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge != int(sessionTTL/time.Second) {
		t.Fatalf("login: %s location %q cookie %+v", resp.Status, resp.Header.Get("Location"), cookie)
	}
	// The cookie calls as the token that asked for the link.
	if _, body := get(t, srv.URL+"/api/chains", cookie); body != "as:Bearer good" {
		t.Fatalf("with the session: %q", body)
	}
	if _, body := get(t, srv.URL+"/api/chains", nil); body != "as:" {
		t.Fatalf("without it: %q", body)
	}
	// Second use: refused.
	if resp, body := get(t, link, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "already used or has expired") {
		t.Fatalf("second use: %s %s", resp.Status, body)
	}
	// An unknown code: refused.
	if resp, _ := get(t, srv.URL+loginPath+"?code=made-up", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("made-up code: %s", resp.Status)
	}

	// An expired code: refused.
	_, body = newLink(t, srv, "good", "1")
	late := srv.URL + linkPath(t, body)
	c.add(loginCodeTTL + time.Second)
	if resp, _ := get(t, late, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired code: %s", resp.Status)
	}
	// An expired session no longer authenticates.
	c.add(sessionTTL)
	if _, body := get(t, srv.URL+"/api/chains", cookie); body != "as:" {
		t.Fatalf("expired session: %q", body)
	}
}
