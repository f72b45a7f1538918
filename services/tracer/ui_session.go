package tracer

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/debugger"
)

// One-time links into the debugger (`xct debug RUN`): a caller with a
// bearer token asks for a link; the link carries a one-time code, not the
// token; opening it exchanges the code for a session cookie (HttpOnly,
// SameSite=Strict, short-lived) and lands on the chain. A code works once
// and only for a minute; the session ends after sessionTTL. Requests that
// carry the session cookie (and no Authorization header) call the
// debugger's API as the principal whose token asked for the link.

const (
	loginCodeTTL   = time.Minute
	sessionTTL     = 30 * time.Minute
	sessionCookie  = "xct_debugger_session"
	maxLoginCodes  = 1024 // outstanding codes; the oldest go first
	maxSessions    = 4096
	loginLinksPath = "/api/login-links"
	loginPath      = "/login"
)

// uiGrant is a code's or a session's credential.
type uiGrant struct {
	token   string // the caller's bearer token ("Bearer ..." header value)
	chain   string // where a code lands ("" for a session)
	expires time.Time
}

// uiSessions holds the outstanding codes and the sessions. Nothing in it
// is logged.
type uiSessions struct {
	mu       sync.Mutex
	codes    map[string]uiGrant
	sessions map[string]uiGrant
	now      func() time.Time
}

func newUISessions() *uiSessions {
	return &uiSessions{codes: map[string]uiGrant{}, sessions: map[string]uiGrant{}, now: time.Now}
}

// randomID is 32 random bytes, URL-safe.
func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// put stores g under a new id in m, dropping expired entries, and the
// one expiring first when m is full.
func put(m map[string]uiGrant, g uiGrant, limit int, now time.Time) (string, error) {
	var oldest string
	for k, v := range m {
		if !now.Before(v.expires) {
			delete(m, k)
		} else if oldest == "" || v.expires.Before(m[oldest].expires) {
			oldest = k
		}
	}
	if len(m) >= limit && oldest != "" {
		delete(m, oldest)
	}
	id, err := randomID()
	if err != nil {
		return "", err
	}
	m[id] = g
	return id, nil
}

// take removes and returns the code's grant: a code works once.
func (s *uiSessions) take(code string) (uiGrant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.codes[code]
	delete(s.codes, code)
	if !ok || !s.now().Before(g.expires) {
		return uiGrant{}, false
	}
	return g, true
}

// session returns the live session's grant.
func (s *uiSessions) session(id string) (uiGrant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.sessions[id]
	if ok && !s.now().Before(g.expires) {
		delete(s.sessions, id)
		return uiGrant{}, false
	}
	return g, ok
}

// mount registers the link routes on mux and returns next wrapped so a
// session cookie authenticates its requests. authorize is the debugger's
// Authorize hook: it checks the bearer token that asks for a link.
func (s *uiSessions) mount(mux *http.ServeMux, authorize func(*http.Request, string) error, next http.Handler) http.Handler {
	mux.HandleFunc(loginLinksPath, func(w http.ResponseWriter, r *http.Request) { s.newLink(w, r, authorize) })
	mux.HandleFunc(loginPath, s.login)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			if c, err := r.Cookie(sessionCookie); err == nil {
				if g, ok := s.session(c.Value); ok {
					r = r.Clone(r.Context())
					r.Header.Set("Authorization", g.token)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

type loginLinkRequest struct {
	Chain string `json:"chain"`
}

type loginLinkResponse struct {
	// Path is the link, relative to the debugger's address.
	Path      string `json:"path"`
	ExpiresAt string `json:"expires_at"`
}

// newLink answers POST /api/login-links {chain}: a one-time code for the
// caller's bearer token.
func (s *uiSessions) newLink(w http.ResponseWriter, r *http.Request, authorize func(*http.Request, string) error) {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		jsonError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
		return
	}
	if r.Header.Get("X-XCT-CSRF") == "" {
		jsonError(w, http.StatusForbidden, "csrf", "the X-XCT-CSRF header is required on POST")
		return
	}
	bearer := r.Header.Get("Authorization")
	if !strings.HasPrefix(bearer, "Bearer ") {
		w.Header().Set("WWW-Authenticate", `Bearer realm="xct"`)
		jsonError(w, http.StatusUnauthorized, "unauthenticated", "a link is made for a bearer token: send Authorization: Bearer TOKEN")
		return
	}
	if err := authorize(r, debugger.ActionRead); err != nil {
		status, code := http.StatusForbidden, "permission_denied"
		if errors.Is(err, debugger.ErrUnauthenticated) {
			status, code = http.StatusUnauthorized, "unauthenticated"
		}
		jsonError(w, status, code, err.Error())
		return
	}
	var req loginLinkRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "invalid_argument", "want a JSON body {\"chain\": ID}: "+err.Error())
		return
	}
	if req.Chain != "" {
		if err := lctl.ValidateChainID(req.Chain); err != nil {
			jsonError(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
	}
	now := s.now()
	g := uiGrant{token: bearer, chain: req.Chain, expires: now.Add(loginCodeTTL)}
	s.mu.Lock()
	code, err := put(s.codes, g, maxLoginCodes, now)
	s.mu.Unlock()
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "internal", "no random code: "+err.Error())
		return
	}
	writeJSONBody(w, http.StatusOK, loginLinkResponse{
		Path:      loginPath + "?code=" + url.QueryEscape(code),
		ExpiresAt: g.expires.UTC().Format(time.RFC3339),
	})
}

// login answers GET /login?code=: the code is used up, a session cookie
// set, and the browser sent to the chain.
func (s *uiSessions) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", debugger.ContentSecurityPolicy)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	code := r.URL.Query().Get("code")
	g, ok := uiGrant{}, false
	if code != "" {
		g, ok = s.take(code)
	}
	if !ok {
		http.Error(w, "This link was already used or has expired (a link works once, for a minute). Run `xct debug RUN` again for a new one.", http.StatusUnauthorized)
		return
	}
	now := s.now()
	sess := uiGrant{token: g.token, expires: now.Add(sessionTTL)}
	s.mu.Lock()
	id, err := put(s.sessions, sess, maxSessions, now)
	s.mu.Unlock()
	if err != nil {
		http.Error(w, "no session: "+err.Error(), http.StatusInternalServerError)
		return
	}
	//nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure whenever the debugger is served over TLS (plaintext is for loopback only)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	to := "/"
	if g.chain != "" {
		to = "/#/chain/" + url.PathEscape(g.chain)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func jsonError(w http.ResponseWriter, status int, code, msg string) {
	writeJSONBody(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
