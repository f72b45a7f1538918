package tracer

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
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
// token. Opening it shows a page that names the principal the link signs
// in as (and the one this browser is signed in as, if any); its Continue
// button (a same-origin POST) exchanges the code for a session cookie
// (HttpOnly, SameSite=Strict, short-lived, __Host- over TLS) and lands on
// the chain. A code works once and only for a minute; the session ends
// after sessionTTL. Requests that carry the session cookie and the
// session's key (and no Authorization header) call the debugger's API as
// the principal whose token asked for the link.
//
// On plaintext (loopback) the session cookie is scoped to a path of its
// own, /s/<random>/, where the debugger is served for that session, and
// is accepted nowhere else: cookies do not separate ports, so a cookie of
// Path=/ went with every request the browser made to any server on
// 127.0.0.1, another user's or another program's on another port
// included, which then held the session. Over TLS the cookie is __Host-
// (Path=/).
//
// A cookie alone authenticates nothing: another origin can plant one
// (a server on another port of 127.0.0.1 sets a cookie of its own
// principal's session for that session's path and sends the browser
// there: login CSRF). So each session also has a key, handed to the
// page only in the answer to the sign-in's same-origin POST, which its
// script (login.js) keeps in the origin's localStorage; the page sends
// it with every API call (X-XCT-Session-Key; on the live stream, which
// EventSource opens without headers, ?session_key=), and a request
// whose key is missing or not its session's (compared in constant time)
// is refused. Origins separate ports: no other server's page can read
// the key or write one into the debugger's storage, and no URL or
// cookie carries one. Ending a session (a new sign-in in the same
// browser) takes its handle and key, which only the debugger's page
// holds: no cookie names the session to the sign-in page any more.
//
// Opening a link never signs a browser in by itself: a link anyone made
// (shared in a chat, or opened by another site's page) would otherwise
// sign whoever opens it in as its maker, silently replacing their own
// session, and what they then approve or cancel would be done in the
// maker's name (login CSRF). The POST must come from the page itself
// (Sec-Fetch-Site same-origin, or an Origin of this host): another site's
// form cannot sign a browser in.

const (
	loginCodeTTL  = time.Minute
	sessionTTL    = 30 * time.Minute
	sessionCookie = "xct_debugger_session"
	// hostCookie is the session cookie's name over TLS: a __Host- cookie
	// is Secure, host-only and Path=/, so a sibling domain cannot plant
	// one (its own session, to sign a browser in as itself).
	hostCookie     = "__Host-" + sessionCookie
	maxLoginForm   = 4096
	maxLoginCodes  = 1024 // outstanding codes; the oldest go first
	maxSessions    = 4096
	maxPerToken    = 16 // outstanding codes, and sessions, of one bearer token
	loginLinksPath = "/api/login-links"
	loginPath      = "/login"
	// sessionPathPrefix starts a session's own path (plaintext only).
	sessionPathPrefix = "/s/"
	// sessionKeyHeader carries a session's key on API calls; on the live
	// stream the key may come as the query parameter sessionKeyParam.
	sessionKeyHeader = "X-XCT-Session-Key"
	sessionKeyParam  = "session_key"
	// loginScriptPath serves login.js, the sign-in pages' script.
	loginScriptPath = "/login.js"
)

// loginScript keeps a new session's key in the page's storage and offers
// the browser's current session (if any) to be ended: see login.js.
//
//go:embed login.js
var loginScript []byte

// uiGrant is a code's or a session's credential.
type uiGrant struct {
	token   string // the caller's bearer token ("Bearer ..." header value)
	who     string // the principal's name, shown before signing in
	chain   string // where a code lands ("" for a session)
	expires time.Time
	// path is a plaintext session's own path segment (/s/<path>/), the
	// only place its cookie is accepted; "" over TLS. key must come with
	// every request the session authenticates; handle names the session
	// to end it (with its key).
	path, key, handle string
}

// uiSessions holds the outstanding codes and the sessions. Nothing in it
// is logged.
type uiSessions struct {
	mu       sync.Mutex
	codes    map[string]uiGrant
	sessions map[string]uiGrant
	now      func() time.Time
	// identify names the principal of a request's bearer token ("" when
	// unknown), for the sign-in page.
	identify func(*http.Request) string
}

func newUISessions(identify func(*http.Request) string) *uiSessions {
	if identify == nil {
		identify = func(*http.Request) string { return "" }
	}
	return &uiSessions{codes: map[string]uiGrant{}, sessions: map[string]uiGrant{}, now: time.Now, identify: identify}
}

// cookieName is the session cookie's name for a request: __Host- over TLS.
func cookieName(r *http.Request) string {
	if r.TLS != nil {
		return hostCookie
	}
	return sessionCookie
}

// randomID is 32 random bytes, URL-safe.
func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// put stores g under a new id in m, dropping expired entries. One
// principal (one bearer token) holds at most perToken entries: past that
// its own oldest goes, so no principal can push another's out by making
// links or sessions in a loop. When m is full, the entry expiring first
// goes.
func put(m map[string]uiGrant, g uiGrant, limit, perToken int, now time.Time) (string, error) {
	var oldest, oldestOwn string
	own := 0
	for k, v := range m {
		switch {
		case !now.Before(v.expires):
			delete(m, k)
			continue
		case oldest == "" || v.expires.Before(m[oldest].expires):
			oldest = k
		}
		if v.token == g.token {
			own++
			if oldestOwn == "" || v.expires.Before(m[oldestOwn].expires) {
				oldestOwn = k
			}
		}
	}
	switch {
	case own >= perToken && oldestOwn != "":
		delete(m, oldestOwn)
	case len(m) >= limit && oldest != "":
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

// peek returns the code's grant without using it up.
func (s *uiSessions) peek(code string) (uiGrant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.codes[code]
	if !ok || !s.now().Before(g.expires) {
		return uiGrant{}, false
	}
	return g, true
}

// sessionPath splits a request path under /s/: the session's path
// segment and the rest (from its "/"). ok is false for any other path.
func sessionPath(p string) (seg, rest string, ok bool) {
	tail, found := strings.CutPrefix(p, sessionPathPrefix)
	if !found {
		return "", "", false
	}
	seg, rest, found = strings.Cut(tail, "/")
	if !found || seg == "" {
		return seg, "", true
	}
	return seg, "/" + rest, true
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
// session (its cookie and its key) authenticates its requests. authorize
// is the debugger's Authorize hook: it checks the bearer token that asks
// for a link.
func (s *uiSessions) mount(mux *http.ServeMux, authorize func(*http.Request, string) error, next http.Handler) http.Handler {
	mux.HandleFunc(loginLinksPath, func(w http.ResponseWriter, r *http.Request) { s.newLink(w, r, authorize) })
	mux.HandleFunc(loginPath, s.login)
	mux.HandleFunc(loginScriptPath, serveLoginScript)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seg, rest, scoped := sessionPath(r.URL.Path)
		if scoped {
			if rest == "" {
				// /s/<seg> without its slash: the page's relative
				// addresses need it.
				http.Redirect(w, r, sessionPathPrefix+url.PathEscape(seg)+"/", http.StatusMovedPermanently)
				return
			}
			r = r.Clone(r.Context())
			r.URL.Path, r.URL.RawPath = rest, ""
		}
		if r.Header.Get("Authorization") == "" {
			g, found := s.sessionOf(r, seg, scoped)
			key, r2 := sessionKeyOf(r, scoped)
			switch {
			case found && validKey(key, g.key):
				switch {
				case r2 != nil:
					r = r2
				case !scoped:
					r = r.Clone(r.Context())
				}
				r.Header.Set("Authorization", g.token)
			case found && strings.HasPrefix(r.URL.Path, "/api/"):
				// A cookie without its key: planted from another
				// origin, or a page of another browser tab's storage.
				securityHeaders(w)
				w.Header().Set("Cache-Control", "no-store")
				jsonError(w, http.StatusUnauthorized, "UNAUTHENTICATED",
					"this debugger session's key is missing or wrong: a session works only in the page it was signed in from "+
						"(run `xct debug RUN` for a new link), or give a bearer token")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sessionOf is the session a request's cookies name: over TLS the
// __Host- cookie; on plaintext only under the session's own path (seg),
// whichever of the cookies of that name the browser sent (one planted
// with another path may come too). The session's key is checked apart.
func (s *uiSessions) sessionOf(r *http.Request, seg string, scoped bool) (uiGrant, bool) {
	if r.TLS != nil {
		if c, err := r.Cookie(hostCookie); err == nil {
			return s.session(c.Value)
		}
		return uiGrant{}, false
	}
	if !scoped {
		return uiGrant{}, false
	}
	for _, c := range r.CookiesNamed(sessionCookie) {
		if g, ok := s.session(c.Value); ok && g.path == seg {
			return g, true
		}
	}
	return uiGrant{}, false
}

// sessionKeyOf is the session key a request carries: its
// X-XCT-Session-Key header, or on the live stream the session_key query
// parameter (EventSource sends no headers). r2 is the request without
// that parameter (nil when there was none to take out), so the key goes
// no further.
func sessionKeyOf(r *http.Request, scoped bool) (key string, r2 *http.Request) {
	if k := r.Header.Get(sessionKeyHeader); k != "" {
		return k, nil
	}
	if !strings.HasPrefix(r.URL.Path, "/api/chains/") || !strings.HasSuffix(r.URL.Path, "/live") {
		return "", nil
	}
	q := r.URL.Query()
	k := q.Get(sessionKeyParam)
	if k == "" {
		return "", nil
	}
	q.Del(sessionKeyParam)
	if !scoped {
		r = r.Clone(r.Context())
	}
	r.URL.RawQuery = q.Encode()
	return k, r
}

// validKey reports whether got is want, in constant time; an empty key
// is never valid.
func validKey(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// securityHeaders are the debugger's own (lctl/debugger), for the
// answers this file writes itself.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", debugger.ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// serveLoginScript answers GET /login.js.
func serveLoginScript(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "login.js", time.Time{}, bytes.NewReader(loginScript))
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
	g := uiGrant{token: bearer, who: s.identify(r), chain: req.Chain, expires: now.Add(loginCodeTTL)}
	s.mu.Lock()
	code, err := put(s.codes, g, maxLoginCodes, maxPerToken, now)
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

// login answers /login: GET shows the sign-in page of a code, POST (its
// Continue button) signs the browser in.
func (s *uiSessions) login(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.confirm(w, r)
	case http.MethodPost:
		s.signIn(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
	}
}

const linkUsedUp = "This link was already used or has expired (a link works once, for a minute). Run `xct debug RUN` again for a new one."

// signInPage names whom a link signs in as before anything changes. Its
// script (login.js) says who this browser is signed in as now, from the
// page's storage, and adds that session's handle and key to the form so
// Continue ends it.
var signInPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer"><title>Sign in to the XCT debugger</title></head>
<body>
<h1>Sign in to the XCT debugger</h1>
<p id="who">This link signs this browser in as <strong>{{if .Who}}{{.Who}}{{else}}the principal whose token made it{{end}}</strong> for {{.Minutes}} minutes: what you approve, deny or cancel in the debugger is then done in that name.</p>
<p id="current" hidden>This browser is signed in as <strong></strong> now; continuing signs it out.</p>
<p>Continue only if you made this link yourself (<code>xct debug</code>). A link someone else made signs you in as them.</p>
<form id="sign-in" method="post" action="{{.Action}}"><input type="hidden" name="code" value="{{.Code}}"><button id="continue" type="submit">Continue{{if .Who}} as {{.Who}}{{end}}</button></form>
<script src="{{.Script}}"></script>
</body></html>
`))

// signedInPage is the answer to a sign-in: its script (login.js) keeps
// the session's key in the origin's storage and goes on to the chain.
var signedInPage = template.Must(template.New("signed-in").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer"><title>Signed in to the XCT debugger</title></head>
<body>
<main id="signed-in" data-key="{{.Key}}" data-handle="{{.Handle}}" data-who="{{.Who}}" data-base="{{.Base}}" data-ttl="{{.TTL}}" data-to="{{.To}}">
<p>Signed in{{if .Who}} as <strong>{{.Who}}</strong>{{end}}. <a id="next" href="{{.To}}">Open the debugger</a>.</p>
<p id="no-storage" hidden>This browser keeps no storage for this page, where the session's key must be kept: the debugger cannot use this session. Allow site data for it, or give the debugger a bearer token.</p>
</main>
<script src="{{.Script}}"></script>
</body></html>
`))

// confirm answers GET /login?code=: the page naming the link's principal,
// with the button that signs in. The code is not used up.
func (s *uiSessions) confirm(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	g, ok := uiGrant{}, false
	if code != "" {
		g, ok = s.peek(code)
	}
	if !ok {
		http.Error(w, linkUsedUp, http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = signInPage.Execute(w, map[string]any{
		"Who": g.who, "Code": code, "Action": loginPath, "Script": loginScriptPath, "Minutes": int(sessionTTL / time.Minute),
	})
}

// fromThisPage reports whether a POST comes from a page of this server:
// a browser says so in Sec-Fetch-Site, or (an older one) in Origin. A
// request that says neither is refused: it is no browser's click on the
// sign-in page.
func fromThisPage(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	u, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && u.Host != "" && u.Host == r.Host
}

// end ends the live session whose handle and key a sign-in form
// carries (the browser's previous one, from its page's storage): only a
// page holding the key can end a session.
func (s *uiSessions) end(handle, key string) {
	if handle == "" || key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, g := range s.sessions {
		if g.handle == handle {
			if validKey(key, g.key) {
				delete(s.sessions, id)
			}
			return
		}
	}
}

// signIn answers POST /login (code=, and end=, end_key= naming the
// browser's previous session): the code is used up, the previous session
// ended, a session cookie set, and the page that keeps the session's key
// sent on to the chain.
func (s *uiSessions) signIn(w http.ResponseWriter, r *http.Request) {
	if !fromThisPage(r) {
		http.Error(w, "A sign-in must come from the link's own page: open the link and press Continue.", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad sign-in form: "+err.Error(), http.StatusBadRequest)
		return
	}
	code := r.PostForm.Get("code")
	g, ok := uiGrant{}, false
	if code != "" {
		g, ok = s.take(code)
	}
	if !ok {
		http.Error(w, linkUsedUp, http.StatusUnauthorized)
		return
	}
	now := s.now()
	sess := uiGrant{token: g.token, who: g.who, expires: now.Add(sessionTTL)}
	key, err1 := randomID()
	handle, err2 := randomID()
	seg, err3 := randomID()
	if err := errors.Join(err1, err2, err3); err != nil {
		http.Error(w, "no session: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sess.key, sess.handle = key, handle
	base := "/"
	if r.TLS == nil {
		sess.path = seg
		base = sessionPathPrefix + seg + "/"
	}
	s.end(r.PostForm.Get("end"), r.PostForm.Get("end_key"))
	s.mu.Lock()
	id, err := put(s.sessions, sess, maxSessions, maxPerToken, now)
	s.mu.Unlock()
	if err != nil {
		http.Error(w, "no session: "+err.Error(), http.StatusInternalServerError)
		return
	}
	maxAge := int(sessionTTL / time.Second)
	//nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure (and __Host-) whenever the debugger is served over TLS (plaintext is for loopback only)
	http.SetCookie(w, &http.Cookie{
		Name: cookieName(r), Value: id, Path: base, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	to := base
	if g.chain != "" {
		to += "#/chain/" + url.PathEscape(g.chain)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = signedInPage.Execute(w, map[string]any{
		"Key": key, "Handle": handle, "Who": g.who, "Base": base, "TTL": maxAge, "To": to, "Script": loginScriptPath,
	})
}

func jsonError(w http.ResponseWriter, status int, code, msg string) {
	writeJSONBody(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
