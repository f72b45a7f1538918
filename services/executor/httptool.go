package executor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Limits of http.request that are not configurable.
const (
	httpMaxURLBytes     = 8 << 10
	httpMaxHeaders      = 64
	httpMaxHeaderBytes  = 16 << 10 // all request headers together
	httpMaxRespHeaders  = 64 << 10 // all response headers together
	httpDefaultMaxBytes = 1 << 20
	httpDefaultRedirect = 5
)

// HTTPResult is the result of http.request.
type HTTPResult struct {
	// Status is the final response's status code.
	Status int `json:"status"`
	// URL is the final URL, after redirects.
	URL string `json:"url"`
	// Headers are the final response's headers, values joined by ", ".
	Headers map[string]string `json:"headers"`
	// Body is the response body: the text itself when it is valid UTF-8,
	// otherwise its standard base64 encoding.
	Body string `json:"body"`
	// Encoding is EncodingUTF8 or EncodingBase64.
	Encoding string `json:"encoding"`
	// Size is the body's length in bytes.
	Size int64 `json:"size"`
	// Redirects counts the redirects followed.
	Redirects int `json:"redirects"`
	// RedirectNotFollowed is the Location of a redirect not followed (to
	// another host, path or query, or one that would send the method and
	// body again):
	// the response is that redirect. The verdict (and an approver) judged
	// the request's URL, so a request elsewhere is the model's to propose.
	RedirectNotFollowed string `json:"redirect_not_followed,omitempty"`
}

// httpTool is the http.request tool. Every URL (the request's and every
// redirect's) must name an allowed host, and every connection is checked
// at dial time against the denied address ranges, so neither a redirect
// nor DNS rebinding reaches a private or metadata address. It never uses a
// proxy from the environment and never reads more of a body than its cap.
type httpTool struct {
	urls       urlGuard
	folded     []hostRule // hosts whose paths are case-insensitive
	underscore []string   // header names with "_" that may be sent
	addrs      *addrGuard
	resolver   Resolver
	timeout    time.Duration
	maxReq     int64
	maxResp    int64
	maxRedir   int
	maxOutput  int64
	methodList []string
}

func newHTTPTool(cfg *HTTPConfig, defTimeout time.Duration, maxOutput int64) *httpTool {
	t := &httpTool{
		urls:       urlGuard{hosts: cfg.hosts, httpsOnly: cfg.HTTPSOnly},
		folded:     cfg.foldedHosts,
		underscore: cfg.UnderscoreHeaders,
		addrs:      newAddrGuard(cfg.addrs, cfg.hostAddrs...),
		resolver:   cfg.Resolver,
		timeout:    cfg.Timeout,
		maxReq:     cfg.MaxRequestBytes,
		maxResp:    cfg.MaxResponseBytes,
		maxRedir:   cfg.MaxRedirects,
		maxOutput:  maxOutput,
		methodList: []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"},
	}
	if t.resolver == nil {
		t.resolver = net.DefaultResolver
	}
	if t.timeout == 0 {
		t.timeout = defTimeout
	}
	if t.maxReq == 0 {
		t.maxReq = httpDefaultMaxBytes
	}
	if t.maxResp == 0 {
		t.maxResp = httpDefaultMaxBytes
	}
	switch t.maxRedir {
	case 0:
		t.maxRedir = httpDefaultRedirect
	case -1:
		t.maxRedir = 0
	}
	// The body travels in the JSON result, possibly as base64.
	if need := t.maxResp*4/3 + 64<<10; t.maxOutput < need {
		t.maxOutput = need
	}
	return t
}

func (t *httpTool) Descriptor() *xctv1.ToolDescriptor {
	methods := `"` + strings.Join(t.methodList, `", "`) + `"`
	schema := `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "method": {"enum": [` + methods + `], "description": "HTTP method."},
    "url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "Absolute http or https URL of an allowed host."},
    "headers": {"type": "object", "maxProperties": 64, "additionalProperties": {"type": "string"}, "description": "Request headers, each name written with its words capitalized and separated by \"-\" (Content-Type, X-Api-Key) (Host, Connection, Content-Length, Transfer-Encoding, Proxy-*, X-Forwarded-*, Forwarded, method and URL overrides such as X-HTTP-Method-Override and X-Original-URL are refused)."},
    "body": {"type": "string", "description": "Request body, as text."}
  },
  "required": ["method", "url"],
  "additionalProperties": false
}`
	return &xctv1.ToolDescriptor{
		Name: "http.request",
		Description: "Send one HTTP request to an allowed host and return the response: status, url (after redirects), headers, " +
			"body (text, or base64 when encoding is \"base64\"), size and redirects. Redirects are followed only to the same URL (over https, or with a \"/\" added to its path), and never one that sends the method and body again (a 307 or 308 of a POST); " +
			"any other redirect is returned as the response, with redirect_not_followed naming where it leads: propose that URL as its own request. " +
			"Hosts and addresses are restricted by the executor's configuration.",
		InputSchema: schema,
		// The executor cannot know what a request does on the other side,
		// whatever its method: every request is irreversible and is never
		// re-run when in doubt.
		Effect:         xctv1.Effect_EFFECT_IRREVERSIBLE,
		Idempotent:     false,
		Timeout:        durationpb.New(t.timeout),
		MaxOutputBytes: t.maxOutput,
	}
}

// forbiddenHeader reports request headers the caller may not set: they
// would redirect the request, smuggle another one, or use a proxy; or
// they make a server act on another method or URL than the request's,
// which is what a policy judged (a GET with X-HTTP-Method-Override:
// DELETE, or X-Original-URL: /admin on a request to /public), or speak
// for a proxy in front of the server (X-Forwarded-For: 127.0.0.1 past an
// address rule of the server's).
//
// A "_" is taken for a "-": CGI, PHP and WSGI servers name a header
// HTTP_X_HTTP_METHOD_OVERRIDE whether it was sent with dashes or
// underscores, so X_HTTP_Method_Override is the same header there.
func forbiddenHeader(name string) bool {
	name = strings.ReplaceAll(name, "_", "-")
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive", "Expect",
		"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Method",
		"X-Original-Url", "X-Rewrite-Url", "X-Override-Url",
		"Forwarded", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "X-Originating-Ip", "X-Remote-Addr", "X-Remote-Ip", "X-Cluster-Client-Ip":
		return true
	}
	n := strings.ToLower(name)
	return strings.HasPrefix(n, "proxy-") || strings.HasPrefix(n, "x-forwarded-")
}

func (t *httpTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "method", "url", "headers", "body"); e != nil {
		return nil, e
	}
	method, e := stringArg(args, "method", nil)
	if e != nil {
		return nil, e
	}
	if !slices.Contains(t.methodList, method) {
		return nil, argErr("method", "method %q is not one of %s", method, strings.Join(t.methodList, ", "))
	}
	raw, e := stringArg(args, "url", nil)
	if e != nil {
		return nil, e
	}
	empty := ""
	body, e := stringArg(args, "body", &empty)
	if e != nil {
		return nil, e
	}
	if int64(len(body)) > t.maxReq {
		return nil, argErr("body", "body is %d bytes, the limit is %d", len(body), t.maxReq)
	}
	if body != "" && (method == "GET" || method == "HEAD") {
		return nil, argErr("body", "a %s request has no body", method)
	}
	u, e := t.parseURL(raw)
	if e != nil {
		return nil, e
	}
	if k := overrideInBody(body); k != "" {
		// Rails, Laravel, Symfony and Express's method-override act on a
		// POST whose form or JSON carries "_method: DELETE" as a DELETE: a
		// policy judged the POST.
		return nil, argErr("body", "the body has a method override field %q, which a server may act on as another method than %s, the one judged: propose that method instead", k, method)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(body))
	if err != nil {
		return nil, argErr("url", "cannot build the request: %v", err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if e := t.headers(req, args["headers"]); e != nil {
		return nil, e
	}

	redirects := 0
	notFollowed := ""
	client := &http.Client{
		Transport: t.transport(),
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if t.maxRedir == 0 {
				return http.ErrUseLastResponse // the 3xx itself is the result
			}
			if !sameResource(r.URL, u) {
				// The policy judged a request to u: one to another host,
				// or to another path or query of the same host (an open
				// redirect under an allowed prefix taking a GET to a
				// path the policy keeps for a human), is not what was
				// allowed or approved. Only the same URL over https, or
				// with a "/" added to its path, is followed.
				notFollowed = r.URL.Redacted()
				return http.ErrUseLastResponse
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				// A 307 or 308 sends the method again, body and all, to
				// another URL: the policy and an approver judged it on
				// the first one, and an open redirect on the same host
				// would take an approved POST to a path no one judged.
				// (A 301-303 turns it into a GET without the body.)
				notFollowed = r.URL.Redacted()
				return http.ErrUseLastResponse
			}
			if len(via) > t.maxRedir {
				return &redirectError{limit: t.maxRedir}
			}
			if err := t.urls.check(r.URL); err != nil {
				return err
			}
			redirects = len(via)
			return nil
		},
	}
	// Whether a connection was ever made: before that, not one byte of
	// the request can have left (a DNS failure, a refused or unreachable
	// address), and the failure is definite, not in doubt.
	var connected atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	}))
	if e := Commit(ctx); e != nil {
		return nil, e
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, t.fail(ctx, u, err, connected.Load())
	}
	defer func() { _ = resp.Body.Close() }()
	// Never read more than the cap: a body that goes on forever costs one
	// byte more than the cap, then the connection is dropped.
	data, err := io.ReadAll(io.LimitReader(resp.Body, t.maxResp+1))
	if err != nil {
		return nil, t.fail(ctx, u, err, true)
	}
	if int64(len(data)) > t.maxResp {
		// The request was sent and answered: an error would tell the
		// model it failed, and it would send it again. What is known is
		// the status; the body was not read (docs/events.md, "A result
		// not kept").
		return map[string]any{"result_not_kept": true, "reason": NotKeptTooLarge, "tool": "http.request",
			"status": resp.StatusCode, "url": resp.Request.URL.Redacted(), "limit": t.maxResp, "body_not_read": true,
			"message": fmt.Sprintf("the request was sent and answered with status %d, but the response body of %s is larger than %d bytes: it was not read",
				resp.StatusCode, u.Redacted(), t.maxResp)}, nil
	}
	res := HTTPResult{Status: resp.StatusCode, URL: resp.Request.URL.String(), Headers: map[string]string{}, Size: int64(len(data)), Redirects: redirects,
		RedirectNotFollowed: notFollowed}
	for k, v := range resp.Header {
		res.Headers[k] = strings.Join(v, ", ")
	}
	if utf8.Valid(data) {
		res.Body, res.Encoding = string(data), EncodingUTF8
	} else {
		res.Body, res.Encoding = base64.StdEncoding.EncodeToString(data), EncodingBase64
	}
	return res, nil
}

// parseURL checks the request's URL before anything is sent.
func (t *httpTool) parseURL(raw string) (*url.URL, *xctv1.Error) {
	if len(raw) > httpMaxURLBytes {
		return nil, argErr("url", "url is %d bytes, the limit is %d", len(raw), httpMaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, argErr("url", "url %q does not parse: %v", raw, err)
	}
	if !u.IsAbs() {
		return nil, argErr("url", "url %q is not absolute", raw)
	}
	u.Fragment, u.RawFragment = "", ""
	if clean, ok := dotSegments(u); ok {
		// A policy reads the URL as written ("/public/../admin" starts
		// with "/public/"); the server resolves it. Only the path the
		// server will act on is taken, as the fs tools take clean paths.
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the path of url %q has \".\" or \"..\" segments (or a backslash), which the server may resolve to another path than the one judged; propose %q",
			u.Redacted(), clean), map[string]any{"argument": "url", "clean": clean})
	}
	if clean, ok := plainPath(u); !ok {
		// A rule on "/admin" does not read "/%61dmin" or "//admin"; a
		// server decodes the one and merges the slashes of the other.
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the path of url %q is not written in its plain form (a percent-encoded letter, digit or \"-._~\", lower-case hex, repeated \"/\", or \";\" parameters), which a server may read as another path than the one judged; propose %q",
			u.Redacted(), clean), map[string]any{"argument": "url", "clean": clean})
	}
	if clean, ok := plainQuery(u); !ok {
		// As for the path: a rule on "force=true" does not read
		// "force=%74rue", which the server decodes.
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the query of url %q is not written in its plain form (a percent-encoded letter, digit or \"-._~\", or lower-case hex), which a server may read as another query than the one judged; propose %q",
			u.Redacted(), clean), map[string]any{"argument": "url", "clean": clean})
	}
	if k := overrideInQuery(u.RawQuery); k != "" {
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the query of url %q has a method override parameter %q, which a server may act on as another method than the one judged: propose that method instead",
			u.Redacted(), k), map[string]any{"argument": "url", "parameter": k})
	}
	if clean, ok := plainOrigin(raw, u); !ok {
		// A policy reads "https://API.example.org." or ":443" as written;
		// the executor connects to the host they name.
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the scheme, host or port of url %q is not written in its plain form (lower case, no trailing dot, no default port), which a policy may read as another host; propose %q",
			u.Redacted(), clean), map[string]any{"argument": "url", "clean": clean})
	}
	if err := t.urls.check(u); err != nil {
		return nil, wire.WithDetails(wire.Errorf(wire.CodePermissionDenied, "url %q is not allowed: %v", u.Redacted(), err),
			map[string]any{"url": u.Redacted()})
	}
	if clean, ok := lowerPath(u); !ok && matchHost(t.folded, u) {
		// The server reads "/ADMIN" as "/admin"; a rule on "/admin" does
		// not.
		return nil, wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
			"the path of url %q has upper-case letters or a segment ending in \".\" or a space, and the host reads paths as Windows names them (case_insensitive_paths): propose %q",
			u.Redacted(), clean), map[string]any{"argument": "url", "clean": clean})
	}
	return u, nil
}

// lowerPath reports whether u's path is written as a server that reads
// paths as Windows names them (case-insensitive: IIS, ASP.NET) cannot
// read as another: no upper-case ASCII letter (percent-encodings' hex
// digits aside), and no segment ending in "." or a space ("/admin./x" is
// "/admin/x" there); and the URL so written.
func lowerPath(u *url.URL) (string, bool) {
	segs := strings.Split(u.EscapedPath(), "/")
	changed := false
	for i, seg := range segs {
		b := []byte(seg)
		for j := 0; j < len(b); j++ {
			if b[j] == '%' {
				j += 2
				continue
			}
			if 'A' <= b[j] && b[j] <= 'Z' {
				b[j] += 'a' - 'A'
				changed = true
			}
		}
		seg = string(b)
		trimmed := seg
		for {
			t := strings.TrimSuffix(strings.TrimSuffix(trimmed, "."), "%20")
			if t == trimmed {
				break
			}
			trimmed = t
		}
		if trimmed != seg && trimmed != "" {
			seg, changed = trimmed, true
		}
		segs[i] = seg
	}
	if !changed {
		return "", true
	}
	c := *u
	c.RawPath = strings.Join(segs, "/")
	if p, err := url.PathUnescape(c.RawPath); err == nil {
		c.Path = p
	}
	return c.Redacted(), false
}

// plainQuery reports whether u's query is written as plainPath wants a
// path (RFC 3986 6.2.2): no percent-encoded unreserved character and
// upper-case hex in the encodings that stay. Otherwise it returns the URL
// with its query so written.
func plainQuery(u *url.URL) (string, bool) {
	q, changed := plainEncodings(u.RawQuery)
	if !changed {
		return "", true
	}
	c := *u
	c.RawQuery = q
	return c.Redacted(), false
}

// plainEncodings decodes s's percent-encoded unreserved characters and
// upper-cases the hex of the other encodings; changed says whether that
// changed s.
func plainEncodings(s string) (string, bool) {
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			if unreserved(v) {
				b.WriteByte(v)
				changed = true
			} else {
				enc := "%" + strings.ToUpper(s[i+1:i+3])
				changed = changed || enc != s[i:i+3]
				b.WriteString(enc)
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), changed
}

// methodOverrides are the names of a form field, JSON key or query
// parameter that frameworks read as the request's method ("_method":
// Rails, Laravel, Symfony, Sinatra, Express's method-override;
// "_HttpMethod": Salesforce), or that some gateways take as the header of
// that name. Compared in lower case.
var methodOverrides = []string{"_method", "_httpmethod", "x-http-method-override", "x-http-method", "x-method-override"}

func isOverride(k string) bool {
	return slices.Contains(methodOverrides, strings.ToLower(strings.TrimSpace(k)))
}

// overrideInQuery is the first method override parameter of the raw
// query (or form body) q, decoded; "" when there is none. Pairs are
// split on "&" and ";" (some servers split on both).
func overrideInQuery(q string) string {
	for _, pair := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(pair, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if isOverride(k) {
			return k
		}
	}
	return ""
}

// overrideInBody is the first method override field of a request body,
// whatever its declared type (a server may parse it as a form, JSON or
// multipart regardless): a form key, a JSON object's key at any depth, or
// a multipart part's name; "" when there is none.
func overrideInBody(body string) string {
	if body == "" {
		return ""
	}
	if k := overrideInQuery(strings.TrimSpace(body)); k != "" {
		return k
	}
	if m := multipartOverride.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	dec := json.NewDecoder(strings.NewReader(body))
	// A key is the string token at an even position inside an object.
	type level struct {
		object bool
		n      int
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if err != nil {
			return "" // not JSON (any more): what was read had none
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if len(stack) > 0 {
					stack[len(stack)-1].n++
				}
				stack = append(stack, level{object: v == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].n%2 == 0 && isOverride(v) {
				return v
			}
		}
		if len(stack) > 0 {
			stack[len(stack)-1].n++
		}
	}
}

// multipartOverride finds a multipart part (or any header-like
// parameter) named as a method override.
var multipartOverride = regexp.MustCompile(`(?i)\bname\s*=\s*"?\s*(_method|_httpmethod|x-http-method-override|x-http-method|x-method-override)\s*"?(?:[\s;]|$)`)

// headers sets the caller's request headers.
func (t *httpTool) headers(req *http.Request, v any) *xctv1.Error {
	if v == nil {
		return nil
	}
	hs, ok := v.(map[string]any)
	if !ok {
		return argErr("headers", "headers must be an object of strings")
	}
	if len(hs) > httpMaxHeaders {
		return argErr("headers", "%d headers, the limit is %d", len(hs), httpMaxHeaders)
	}
	total := 0
	for k, v := range hs {
		s, ok := v.(string)
		if !ok {
			return argErr("headers", "header %q must be a string", k)
		}
		if forbiddenHeader(k) {
			return argErr("headers", "header %q cannot be set", k)
		}
		if k == "" || strings.ContainsAny(k, " \t\r\n:\x00") || strings.ContainsAny(s, "\r\n\x00") {
			return argErr("headers", "header %q is malformed", k)
		}
		if p := plainHeaderName(k); p != k {
			return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"header %q is not written plainly: write it as %q (a policy reads the name as written, a server in any case)", k, p),
				map[string]any{"argument": "headers", "header": k, "plain": p})
		}
		if strings.Contains(k, "_") && !slices.Contains(t.underscore, k) {
			// CGI, PHP and WSGI servers name X_Api_Key and X-Api-Key
			// both HTTP_X_API_KEY: a rule on the one does not see the
			// other. One spelling, unless the configuration lists it.
			p := strings.ReplaceAll(k, "_", "-")
			return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument,
				"header %q has a \"_\", which many servers read as \"-\" (%q) while a policy reads the name as written: write it as %q (a name with \"_\" is sent only when the http tool's underscore_headers lists it)", k, p, p),
				map[string]any{"argument": "headers", "header": k, "plain": p})
		}
		total += len(k) + len(s)
		req.Header.Set(k, s)
	}
	if total > httpMaxHeaderBytes {
		return argErr("headers", "headers are %d bytes, the limit is %d", total, httpMaxHeaderBytes)
	}
	return nil
}

// plainHeaderName is the one spelling of a header name that http.request
// takes: each word's first letter upper case and the rest lower case
// ("Authorization", "X-Api-Key"), words separated by "-" or "_" (CGI,
// PHP and WSGI servers read "_" as "-"). A server reads a header's name
// in any case, a policy reads args.headers as written: a rule on
// "Authorization" in args.headers judged {"authorization": ...} as no
// credentials, and the server got them.
func plainHeaderName(k string) string {
	b := []byte(k)
	start := true
	for i, c := range b {
		switch {
		case c == '-' || c == '_':
			start = true
			continue
		case start && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !start && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		start = false
	}
	return string(b)
}

// transport is a fresh transport for one request: no proxy, no connection
// reuse across steps, every dial through the address guard.
func (t *httpTool) transport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil, // never from the environment
		DialContext:            t.addrs.dialContext(t.resolver, t.timeout),
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: httpMaxRespHeaders,
		TLSHandshakeTimeout:    t.timeout,
		ResponseHeaderTimeout:  t.timeout,
	}
}

// sameResource reports whether the redirect target to names the resource
// the request from named: the same host, path and query, with at most an
// upgrade from http on port 80 to https on port 443 and a "/" added to
// the path (a server's own spelling of the same URL). Everything else is
// another request, for the model to propose and the policy to judge.
func sameResource(to, from *url.URL) bool {
	if to.User != nil || to.Opaque != "" || !strings.EqualFold(to.Hostname(), from.Hostname()) || to.RawQuery != from.RawQuery {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		return map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	switch tp, fp := port(to), port(from); {
	case to.Scheme == from.Scheme && tp == fp:
	case from.Scheme == "http" && fp == "80" && to.Scheme == "https" && tp == "443":
	default:
		return false
	}
	tpath, fpath := to.EscapedPath(), from.EscapedPath()
	if fpath == "" {
		fpath = "/"
	}
	if tpath == "" {
		tpath = "/"
	}
	return tpath == fpath || tpath == fpath+"/"
}

// redirectError is more redirects than allowed.
type redirectError struct{ limit int }

func (e *redirectError) Error() string {
	return fmt.Sprintf("more than %d redirects", e.limit)
}

// fail turns a client error into an error signal. The request may have
// been sent (outcome_unknown), except when a guard refused it or no
// connection was ever made (connected false): then it is definite that
// nothing was sent.
func (t *httpTool) fail(ctx context.Context, u *url.URL, err error, connected bool) *xctv1.Error {
	if be, ok := isBlocked(err); ok {
		return wire.WithDetails(wire.Errorf(wire.CodePermissionDenied, "request to %s refused: %v", u.Redacted(), be),
			map[string]any{"url": u.Redacted()})
	}
	var re *redirectError
	if errors.As(err, &re) {
		return wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "request to %s: %v", u.Redacted(), re),
			map[string]any{"url": u.Redacted(), "limit": re.limit})
	}
	notSent := ""
	if !connected {
		notSent = "; no connection was made, nothing was sent"
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return wire.WithDetails(wire.Errorf(wire.CodeTimeout, "request to %s did not finish within %v%s", u.Redacted(), t.timeout, notSent),
			map[string]any{"url": u.Redacted(), "timeout_ms": t.timeout.Milliseconds(), "outcome_unknown": connected})
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return wire.WithDetails(wire.Errorf(wire.CodeTimeout, "request to %s timed out: %v%s", u.Redacted(), err, notSent),
			map[string]any{"url": u.Redacted(), "outcome_unknown": connected})
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return wire.WithDetails(wire.Errorf(wire.CodeToolFailure, "request to %s failed: %v%s", u.Redacted(), err, notSent),
		map[string]any{"url": u.Redacted(), "outcome_unknown": connected})
}

// argErr is INVALID_ARGUMENT about one argument.
func argErr(arg, format string, args ...any) *xctv1.Error {
	return wire.WithDetails(wire.Errorf(wire.CodeInvalidArgument, format, args...), map[string]any{"argument": arg})
}

// dotSegments reports whether u's path has a "." or ".." segment (also
// percent-encoded, or with ";" parameters, or between backslashes, which
// some servers take for slashes), and the URL with its path resolved.
func dotSegments(u *url.URL) (string, bool) {
	raw := u.EscapedPath()
	dec, err := url.PathUnescape(raw)
	if err != nil {
		dec = raw
	}
	found := false
	for _, p := range []string{raw, dec} {
		for _, seg := range strings.Split(strings.ReplaceAll(p, "\\", "/"), "/") {
			seg, _, _ = strings.Cut(seg, ";")
			if seg == "." || seg == ".." {
				found = true
			}
		}
		if strings.ContainsRune(p, '\\') {
			found = true
		}
	}
	if !found {
		return "", false
	}
	segs := strings.Split(strings.ReplaceAll(dec, "\\", "/"), "/")
	for i, seg := range segs {
		if base, _, _ := strings.Cut(seg, ";"); base == "." || base == ".." {
			segs[i] = base
		}
	}
	c := *u
	c.Path = path.Clean("/" + strings.Join(segs, "/"))
	c.RawPath = ""
	return c.Redacted(), true
}

// plainOrigin reports whether raw begins with u's scheme, host and port in
// their plain form: lower case, the host without a trailing dot, an IP
// address in its one canonical spelling, a port without leading zeros and
// not the scheme's default. Otherwise it returns raw with that
// beginning made plain.
func plainOrigin(raw string, u *url.URL) (string, bool) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || u.Host == "" || u.User != nil {
		return raw, true // no authority, or credentials in it: the guards refuse it
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		// One spelling of an address: "[0:0::1]" is "[::1]".
		host = strings.ReplaceAll(ip.String(), "%", "%25")
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	defaultPort := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	port := u.Port()
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10) // ":080" is ":80"
	}
	if port != "" && port != defaultPort {
		host += ":" + port
	}
	plain := u.Scheme + "://" + host
	if scheme+"://"+rest[:end] == plain {
		return raw, true
	}
	return plain + rest[end:], false
}

// plainPath reports whether u's path is written in the one form a rule on
// it can rely on (RFC 3986's normalisation, 6.2.2): no percent-encoded
// unreserved character ("%61" is "a"), upper-case hex in the encodings
// that stay, no empty segment ("//admin", also through "%2F", which
// servers merge), and no ";" parameters, which servers drop. Otherwise it returns the URL with its path so written.
// "%2F" itself is kept: APIs use it inside a segment.
func plainPath(u *url.URL) (string, bool) {
	p, changed := plainEncodings(u.EscapedPath())
	if strings.Contains(p, ";") {
		// Path parameters: Tomcat and Spring drop them before routing
		// ("/admin;x/delete" is "/admin/delete").
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			segs[i], _, _ = strings.Cut(seg, ";")
		}
		p, changed = strings.Join(segs, "/"), true
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		dec = p
	}
	if strings.Contains(p, "//") || strings.Contains(dec, "//") {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
		for strings.Contains(p, "/%2F") || strings.Contains(p, "%2F/") || strings.Contains(p, "%2F%2F") {
			p = strings.NewReplacer("/%2F", "/", "%2F/", "/", "%2F%2F", "%2F").Replace(p)
		}
		changed = true
	}
	if !changed {
		return "", true
	}
	c := *u
	if c.Path, err = url.PathUnescape(p); err != nil {
		c.Path = p
	}
	c.RawPath = p
	return c.Redacted(), false
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// unreserved is RFC 3986's unreserved set: never needs percent-encoding.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
