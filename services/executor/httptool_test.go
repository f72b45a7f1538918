package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/wire"
)

// fakeResolver answers from a table; a name with several answers gives
// them one per lookup (DNS rebinding), the last one repeating.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	lookups map[string]int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.lookups[host], len(list)-1)
	r.lookups[host]++
	return []netip.Addr{netip.MustParseAddr(list[i])}, nil
}

// httpFixture is a loopback HTTP server and what the tests need to know.
type httpFixture struct {
	srv      *httptest.Server
	port     string
	forever  chan struct{} // closed when the endless handler stopped
	resolver *fakeResolver
}

func newHTTPFixture(t *testing.T) *httpFixture {
	t.Helper()
	f := &httpFixture{forever: make(chan struct{})}
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Reply", "yes")
		_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "host": r.Host, "x-test": r.Header.Get("X-Test"), "body": string(body)})
	})
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte{0xff, 0x00, 0x01}) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/redirect307", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/slash/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "slash") }) // /slash redirects here
	mux.HandleFunc("/forever", func(w http.ResponseWriter, r *http.Request) {
		// 10 GB, if anyone read it.
		defer once.Do(func() { close(f.forever) })
		chunk := make([]byte, 64<<10)
		for written := int64(0); written < 10<<30; written += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	_, f.port, _ = net.SplitHostPort(f.srv.Listener.Addr().String())
	f.resolver = &fakeResolver{lookups: map[string]int{}, answers: map[string][]string{
		"api.test":      {"127.0.0.1"},
		"evil.test":     {"127.0.0.2"},
		"rebind.test":   {"127.0.0.1", "127.0.0.2"},
		"metadata.test": {"169.254.169.254"},
		"mapped.test":   {"::ffff:127.0.0.1"},
	}}
	return f
}

// url is a URL on the fixture's port.
func (f *httpFixture) url(host, path string) string {
	return "http://" + net.JoinHostPort(host, f.port) + path
}

// service is an executor whose http section is yaml, "PORT" replaced.
func (f *httpFixture) service(t *testing.T, yaml string) *Service {
	t.Helper()
	cfg, err := ParseToolsConfig("tools.yaml", []byte(strings.ReplaceAll(yaml, "PORT", f.port)))
	must(t, err)
	cfg.HTTP.Resolver = f.resolver
	s, err := New(Config{Workspace: t.TempDir(), Tools: cfg, DefaultTimeout: 10 * time.Second}, nil, testLogger(t))
	must(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

const httpHosts = `http:
  allow_hosts: ["api.test:PORT", "evil.test:PORT", "rebind.test:PORT", "metadata.test:PORT", "mapped.test:PORT",
                "127.0.0.1:PORT", "[::1]:PORT", "[::ffff:127.0.0.1]:PORT", "169.254.169.254", "10.0.0.1:PORT", "api.test"]
  max_redirects: 3
  max_response_bytes: 1024
  timeout: 2s
`

// TestHTTPSSRF: every way to a private, loopback or metadata address is
// refused while loopback is not allowed; nothing is sent.
func TestHTTPSSRF(t *testing.T) {
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts)
	cases := []struct {
		name string
		url  string
		code wire.Code
	}{
		{"loopback literal", f.url("127.0.0.1", "/ok"), wire.CodePermissionDenied},
		{"IPv6 loopback", f.url("::1", "/ok"), wire.CodePermissionDenied},
		{"IPv4-mapped IPv6 loopback", f.url("::ffff:127.0.0.1", "/ok"), wire.CodePermissionDenied},
		{"metadata literal", "http://169.254.169.254/latest/meta-data/", wire.CodePermissionDenied},
		{"private literal", f.url("10.0.0.1", "/ok"), wire.CodePermissionDenied},
		{"allowed name resolving to loopback", f.url("api.test", "/ok"), wire.CodePermissionDenied},
		{"allowed name resolving to metadata", f.url("metadata.test", "/ok"), wire.CodePermissionDenied},
		{"allowed name resolving to a mapped address", f.url("mapped.test", "/ok"), wire.CodePermissionDenied},
		{"host not allowed", f.url("other.test", "/ok"), wire.CodePermissionDenied},
		{"allowed host, port not allowed", "http://api.test:8081/ok", wire.CodePermissionDenied},
		{"decimal IP", "http://2130706433:" + f.port + "/ok", wire.CodePermissionDenied},
		{"credentials in the URL", "http://user:pw@" + net.JoinHostPort("api.test", f.port) + "/ok", wire.CodePermissionDenied},
		{"file scheme", "file:///etc/passwd", wire.CodePermissionDenied},
		{"gopher scheme", "gopher://api.test:" + f.port + "/_x", wire.CodePermissionDenied},
		{"relative URL", "/ok", wire.CodeInvalidArgument},
		{"scheme-relative URL", "//api.test/ok", wire.CodeInvalidArgument},
		{"not a URL", "http://[::1", wire.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": c.url})
			if got := codeOf(r); got != string(c.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), c.code)
			}
			t.Log(r.GetError().GetMessage())
		})
	}
	// Allowing the link-local range does not open the metadata address.
	s2 := f.service(t, httpHosts+"  allow_addresses: [169.254.0.0/16, 127.0.0.0/8]\n")
	if r := exec(t, s2, "http.request", map[string]any{"method": "GET", "url": f.url("metadata.test", "/ok")}); codeOf(r) != string(wire.CodePermissionDenied) {
		t.Fatalf("metadata through a wide prefix: %v", r)
	}
}

// TestHTTPRedirectsAndRebinding: with loopback 127.0.0.1 allowed (the
// test server), redirects and second lookups still cannot go elsewhere.
func TestHTTPRedirectsAndRebinding(t *testing.T) {
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n")
	redirect := func(to string) string { return f.url("api.test", "/redirect?to="+url.QueryEscape(to)) }
	// A redirect to another host is not followed: the verdict judged the
	// request's host; the redirect is the result, naming where it leads.
	for _, to := range []string{f.url("evil.test", "/ok"), "http://169.254.169.254/latest/meta-data/", f.url("other.test", "/ok"),
		"file:///etc/passwd", f.url("::1", "/ok"), f.url("127.0.0.1", "/ok")} {
		res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET", "url": redirect(to)}))
		if res.Status != http.StatusFound || res.RedirectNotFollowed != to || res.Redirects != 0 {
			t.Errorf("redirect to %s: %+v", to, res)
		}
	}
	// An approved POST to api.test is not re-sent, body and all, to
	// another allowed host by a 307 (an open redirect on api.test).
	res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "POST", "body": "approved for api.test",
		"url": f.url("api.test", "/redirect307?to="+url.QueryEscape(f.url("127.0.0.1", "/echo")))}))
	if res.Status != http.StatusTemporaryRedirect || strings.Contains(res.Body, "approved for") || res.RedirectNotFollowed == "" {
		t.Fatalf("a POST through a 307 to another host: %+v", res)
	}
	cases := []struct {
		name string
		url  string
		code wire.Code
	}{
		{"DNS rebinding between two requests", f.url("rebind.test", "/slash"), wire.CodePermissionDenied},
		{"too many redirects", f.url("api.test", "/loop"), wire.CodeToolFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": c.url})
			if got := codeOf(r); got != string(c.code) {
				t.Fatalf("code = %q (%s), want %q", got, r.GetError().GetMessage(), c.code)
			}
			t.Log(r.GetError().GetMessage())
		})
	}
	// A redirect on the same host to another path, port or query is not
	// followed either: the policy judged the request's URL (session 10,
	// trust10a); the server's own spelling of the same URL (a "/" added)
	// is.
	for _, to := range []string{f.url("api.test", "/ok"), "http://api.test:1/ok", f.url("api.test", "/redirect?to=x")} {
		res = resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET", "url": redirect(to)}))
		if res.Status != http.StatusFound || res.RedirectNotFollowed != to || res.Redirects != 0 || res.Body == "hello" {
			t.Errorf("redirect on the same host to %s: %+v", to, res)
		}
	}
	res = resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/slash")}))
	if res.Status != 200 || res.Body != "slash" || res.Redirects != 1 || !strings.HasSuffix(res.URL, "/slash/") {
		t.Fatalf("redirect to the same path with a slash: %+v", res)
	}
	// With redirects off, the 3xx is the result.
	s3 := f.service(t, strings.Replace(httpHosts, "max_redirects: 3", "max_redirects: -1", 1)+"  allow_addresses: [127.0.0.1/32]\n")
	res = resultAs[HTTPResult](t, exec(t, s3, "http.request", map[string]any{"method": "GET", "url": redirect("http://169.254.169.254/")}))
	if res.Status != http.StatusFound || res.Headers["Location"] != "http://169.254.169.254/" {
		t.Fatalf("no redirects: %+v", res)
	}
}

// TestHTTPRedirectResendsNoRequest: a redirect on the allowed host that
// would send the request again with its method (a 307 or 308 of a POST,
// PUT, PATCH or DELETE, body and all) is not followed: the policy and the
// approver judged that method on that URL, and an open redirect on the
// same host would re-send the approved body to a path no one judged
// (session 9, trust9b). Nor a GET's (session 10, trust10a).
func TestHTTPRedirectResendsNoRequest(t *testing.T) {
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n")
	to := f.url("api.test", "/echo")
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		body := "approved for /public/comments"
		if method == "DELETE" {
			body = ""
		}
		res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": method, "body": body,
			"url": f.url("api.test", "/redirect307?to="+url.QueryEscape(to))}))
		if res.Status != http.StatusTemporaryRedirect || res.Redirects != 0 || res.RedirectNotFollowed != to || strings.Contains(res.Body, `"method"`) {
			t.Errorf("%s through a 307 to another path of the same host was re-sent: %+v", method, res)
		}
	}
	res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET",
		"url": f.url("api.test", "/redirect307?to="+url.QueryEscape(to))}))
	if res.Status != http.StatusTemporaryRedirect || res.Redirects != 0 || res.RedirectNotFollowed != to || strings.Contains(res.Body, `"method"`) {
		t.Fatalf("a GET's 307 to another path of the same host: %+v", res)
	}
}

// TestHTTPRequest: the positive paths, with loopback explicitly allowed.
func TestHTTPRequest(t *testing.T) {
	f := newHTTPFixture(t)
	// Proxies from the environment are never used: this one does not exist.
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy"} {
		t.Setenv(k, "http://127.0.0.1:1")
	}
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n")
	res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{
		"method": "POST", "url": f.url("api.test", "/echo"), "headers": map[string]any{"X-Test": "1"}, "body": "payload",
	}))
	var echo map[string]any
	must(t, json.Unmarshal([]byte(res.Body), &echo))
	if res.Status != 200 || echo["method"] != "POST" || echo["x-test"] != "1" || echo["body"] != "payload" || echo["host"] != net.JoinHostPort("api.test", f.port) || res.Headers["X-Reply"] != "yes" {
		t.Fatalf("echo: %+v %v", res, echo)
	}
	bin := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("127.0.0.1", "/binary")}))
	if bin.Encoding != EncodingBase64 || bin.Body != "/wAB" || bin.Size != 3 {
		t.Fatalf("binary: %+v", bin)
	}

	bad := []struct {
		name string
		args map[string]any
		code wire.Code
	}{
		{"Host header", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"Host": "169.254.169.254"}}, wire.CodeInvalidArgument},
		{"proxy header", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"Proxy-Authorization": "x"}}, wire.CodeInvalidArgument},
		{"method override header", map[string]any{"method": "POST", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X-HTTP-Method-Override": "DELETE"}}, wire.CodeInvalidArgument},
		{"URL override header", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"x-original-url": "/admin"}}, wire.CodeInvalidArgument},
		{"forwarding header", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X-Forwarded-Host": "admin.test"}}, wire.CodeInvalidArgument},
		{"override header with underscores", map[string]any{"method": "POST", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X_HTTP_Method_Override": "DELETE"}}, wire.CodeInvalidArgument},
		{"forwarding header with underscores", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"x_forwarded_for": "127.0.0.1"}}, wire.CodeInvalidArgument},
		{"transfer-encoding header", map[string]any{"method": "POST", "url": f.url("api.test", "/ok"), "headers": map[string]any{"transfer-encoding": "chunked"}}, wire.CodeInvalidArgument},
		{"header injection", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X-A": "1\r\nX-B: 2"}}, wire.CodeInvalidArgument},
		{"header not a string", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X-A": 1}}, wire.CodeInvalidArgument},
		{"header name in lower case", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"authorization": "Bearer x"}}, wire.CodeInvalidArgument},
		{"header name in upper case", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X-API-Key": "x"}}, wire.CodeInvalidArgument},
		{"header name in mixed case after an underscore", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "headers": map[string]any{"X_custom": "x"}}, wire.CodeInvalidArgument},
		{"body on GET", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "body": "x"}, wire.CodeInvalidArgument},
		{"method", map[string]any{"method": "TRACE", "url": f.url("api.test", "/ok")}, wire.CodeInvalidArgument},
		{"body too large", map[string]any{"method": "POST", "url": f.url("api.test", "/ok"), "body": strings.Repeat("x", 2<<20)}, wire.CodeInvalidArgument},
		{"unknown argument", map[string]any{"method": "GET", "url": f.url("api.test", "/ok"), "proxy": "x"}, wire.CodeInvalidArgument},
		{"connection refused", map[string]any{"method": "GET", "url": "http://127.0.0.1:1/"}, wire.CodePermissionDenied}, // port not allowed
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if got := codeOf(exec(t, s, "http.request", c.args)); got != string(c.code) {
				t.Fatalf("code = %q, want %q", got, c.code)
			}
		})
	}
	// https_only refuses plain http.
	s2 := f.service(t, httpHosts+"  https_only: true\n  allow_addresses: [127.0.0.1/32]\n")
	if got := codeOf(exec(t, s2, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/ok")})); got != string(wire.CodePermissionDenied) {
		t.Fatalf("https only: %q", got)
	}
}

// TestHTTPLimits: a 10 GB body is capped, not read; a server that never
// answers is a timeout; the executor keeps serving.
func TestHTTPLimits(t *testing.T) {
	f := newHTTPFixture(t)
	s := f.service(t, strings.Replace(httpHosts, "timeout: 2s", "timeout: 1s", 1)+"  allow_addresses: [127.0.0.1/32]\n")
	r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/forever")})
	// The request was sent and answered: a success that says what is
	// known (the status), not a failure a model would send again.
	if m, _ := r.GetSuccess().GetResult().AsInterface().(map[string]any); notKeptOf(r) != NotKeptTooLarge || m["status"] != 200.0 || m["body_not_read"] != true {
		t.Fatalf("endless body: %v", r)
	}
	// The server sees the connection dropped (a generous bound for a
	// loaded machine, not a measure: the call ended before its 1 s
	// timeout, or it would be TIMEOUT, not this success).
	select {
	case <-f.forever:
	case <-time.After(time.Minute):
		t.Fatal("the endless body's connection is still open a minute after the call ended")
	}
	if r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/slow")}); codeOf(r) != string(wire.CodeTimeout) {
		t.Fatalf("slow server: %v", r)
	}
	if res := resultAs[HTTPResult](t, exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/ok")})); res.Body != "hello" {
		t.Fatalf("afterwards: %+v", res)
	}
}

func TestHTTPDescriptor(t *testing.T) {
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts)
	st, _ := s.tool("http.request")
	d := st.desc
	if d.GetIdempotent() || d.GetEffect().String() != "EFFECT_IRREVERSIBLE" || d.GetTimeout().AsDuration() != 2*time.Second {
		t.Fatalf("descriptor: %v", d)
	}
	if d.GetMaxOutputBytes() < 1024*4/3 {
		t.Fatalf("output cap %d below the body cap", d.GetMaxOutputBytes())
	}
}

func TestURLGuard(t *testing.T) {
	var rules []hostRule
	for _, s := range []string{"api.example.com", "*.example.org", "host.test:8443", "10.0.0.1", "[2001:db8::1]:443"} {
		r, err := parseHostRule(s)
		must(t, err)
		rules = append(rules, r)
	}
	g := urlGuard{hosts: rules}
	for raw, ok := range map[string]bool{
		"https://api.example.com/x":           true,
		"http://api.example.com/x":            true,
		"https://API.Example.COM./x":          true,
		"https://api.example.com:443/x":       true,
		"https://api.example.com:8443/x":      false,
		"https://evil.api.example.com/x":      false,
		"https://a.example.org/x":             true,
		"https://a.b.example.org/x":           true,
		"https://example.org/x":               false,
		"https://badexample.org/x":            false,
		"https://host.test:8443/":             true,
		"https://host.test/":                  false,
		"http://10.0.0.1/":                    true,
		"https://[2001:db8::1]/":              true,
		"https://[2001:db8:0::1]:443/":        true,
		"ftp://api.example.com/":              false,
		"https://u@api.example.com/":          false,
		"https://api.example.com@evil.test/":  false,
		"https://evil.test#@api.example.com/": false,
		"https://api.example.com:0/":          false,
	} {
		u, err := url.Parse(raw)
		must(t, err)
		if got := g.check(u) == nil; got != ok {
			t.Errorf("check(%q) allowed = %v, want %v", raw, got, ok)
		}
	}
}

func TestAddrGuard(t *testing.T) {
	g := newAddrGuard([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("169.254.169.254/32")})
	for addr, ok := range map[string]bool{
		"93.184.216.34":    true,
		"2606:4700::1111":  true,
		"127.0.0.1":        false,
		"127.255.0.9":      false,
		"0.0.0.0":          false,
		"10.0.0.1":         false,
		"10.1.2.3":         true, // allowed explicitly
		"172.16.0.1":       false,
		"192.168.1.1":      false,
		"100.64.0.1":       false,
		"100.100.100.200":  false,
		"169.254.1.1":      false,
		"169.254.169.254":  true, // listed exactly
		"168.63.129.16":    false,
		"224.0.0.1":        false,
		"255.255.255.255":  false,
		"::":               false,
		"::1":              false,
		"::ffff:127.0.0.1": false,
		"::ffff:10.1.2.3":  true,
		"::127.0.0.1":      false,
		"64:ff9b::7f00:1":  false,
		"2002:7f00:1::":    false,
		"2001:0:4136::":    false,
		"fc00::1":          false,
		"fd00:ec2::254":    false,
		"fe80::1":          false,
		"fe80::1%eth0":     false,
		"ff02::1":          false,
		"2001:db8::1":      false,
		// IPv4-translated (SIIT), the metadata address behind it; and
		// the IPv6 space outside global unicast (2000::/3).
		"::ffff:0:a9fe:a9fe": false,
		"::ffff:0:7f00:1":    false,
		"4000::1":            false,
		"100::1":             false,
	} {
		if got := g.check(netip.MustParseAddr(addr)) == nil; got != ok {
			t.Errorf("check(%s) allowed = %v, want %v", addr, got, ok)
		}
	}
	// A wider prefix does not open a metadata address.
	wide := newAddrGuard([]netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fd00::/8")})
	for _, m := range []string{"169.254.169.254", "fd00:ec2::254"} {
		if wide.check(netip.MustParseAddr(m)) == nil {
			t.Errorf("%s allowed through a prefix", m)
		}
	}
}

// TestHTTPDotSegments: a URL whose path the server would resolve to
// another one (dot segments, encoded or not, ";" parameters, backslashes)
// is refused before anything is sent, naming the resolved URL; dots
// inside names are not segments (session 9, trust9b).
func TestHTTPDotSegments(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h.test/public/../admin":       "https://h.test/admin",
		"https://h.test/public/./x":            "https://h.test/public/x",
		"https://h.test/public/%2e%2E/admin":   "https://h.test/admin",
		"https://h.test/public/..;x=1/admin":   "https://h.test/admin",
		"https://h.test/public/..%5cadmin":     "https://h.test/admin",
		"https://h.test/public\\..\\admin?q=1": "https://h.test/admin?q=1",
		"https://h.test/v1.2/file..txt":        "",
		"https://h.test/.well-known/x":         "",
		"https://h.test/a/...":                 "",
		"https://h.test":                       "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		clean, ok := dotSegments(u)
		if ok != (want != "") || clean != want {
			t.Errorf("%s: %q %v, want %q", raw, clean, ok, want)
		}
	}
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n")
	r := exec(t, s, "http.request", map[string]any{"method": "POST", "url": f.url("api.test", "/public/../echo"), "body": "x"})
	if codeOf(r) != string(wire.CodeInvalidArgument) || r.GetError().GetDetails().AsMap()["clean"] != f.url("api.test", "/echo") {
		t.Fatalf("dot segments: %v", r)
	}
}

// TestHTTPPlainOrigin: a URL whose scheme, host or port is not written
// plainly (upper case, a trailing dot, the scheme's default port) is
// refused before anything is sent, naming the plain URL: a policy's rule
// on the URL as written would read it as another host (session 9,
// trust9b).
func TestHTTPPlainOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"HTTPS://api.test/x":        "https://api.test/x",
		"https://API.test/x?q=A":    "https://api.test/x?q=A",
		"https://api.test./x":       "https://api.test/x",
		"https://api.test:443/x":    "https://api.test/x",
		"http://api.test:80":        "http://api.test",
		"https://api.test/x":        "",
		"https://api.test:8443/x":   "",
		"http://[::1]:8080/x":       "",
		"https://api.test?q=HOST.":  "",
		"https://api.test#Fragment": "",
		"http://[0:0::1]:8080/x":    "http://[::1]:8080/x",
		"http://[::FFFF:7f00:1]/x":  "http://[::ffff:127.0.0.1]/x",
		"http://api.test:080/x":     "http://api.test/x",
		"http://api.test:08080/x":   "http://api.test:8080/x",
		"http://127.0.0.1:8080/x":   "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.Fragment = ""
		clean, ok := plainOrigin(raw, u)
		if ok != (want == "") || (!ok && clean != want) {
			t.Errorf("%s: %q %v, want %q", raw, clean, ok, want)
		}
	}
}

// TestHTTPPlainPath: a URL whose path a server may read as another one
// than the rule read (a percent-encoded unreserved character, lower-case
// hex, repeated slashes, also through %2F) is refused before anything is
// sent, naming the plain URL; %2F inside a segment is kept (session 10,
// trust10a).
func TestHTTPPlainPath(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h.test/%61dmin/delete":   "https://h.test/admin/delete",
		"https://h.test/ADMIN%2d1":        "https://h.test/ADMIN-1",
		"https://h.test//admin":           "https://h.test/admin",
		"https://h.test/public//x":        "https://h.test/public/x",
		"https://h.test/%2Fadmin":         "https://h.test/admin",
		"https://h.test/a%2fb":            "https://h.test/a%2Fb",
		"https://h.test/caf%c3%a9?q=%61":  "https://h.test/caf%C3%A9?q=%61",
		"https://h.test/admin;x/delete":   "https://h.test/admin/delete",
		"https://h.test/a;jsessionid=1":   "https://h.test/a",
		"https://h.test/repo/a%2Fb/issue": "",
		"https://h.test/caf%C3%A9":        "",
		"https://h.test/a%20b/":           "",
		"https://h.test":                  "",
		"https://h.test/":                 "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		clean, ok := plainPath(u)
		if ok != (want == "") || clean != want {
			t.Errorf("%s: %q %v, want %q", raw, clean, ok, want)
		}
	}
	f := newHTTPFixture(t)
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n")
	r := exec(t, s, "http.request", map[string]any{"method": "POST", "url": f.url("api.test", "/%65cho"), "body": "x"})
	if codeOf(r) != string(wire.CodeInvalidArgument) || r.GetError().GetDetails().AsMap()["clean"] != f.url("api.test", "/echo") {
		t.Fatalf("an encoded letter: %v", r)
	}
}

// TestHTTPLowerPath: the path a case-insensitive (Windows) host reads
// as written.
func TestHTTPLowerPath(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h.test/ADMIN/x":       "https://h.test/admin/x",
		"https://h.test/admin./x":      "https://h.test/admin/x",
		"https://h.test/admin%20/x":    "https://h.test/admin/x",
		"https://h.test/Admin.%20./x":  "https://h.test/admin/x",
		"https://h.test/caf%C3%A9/x":   "",
		"https://h.test/a.b/x":         "",
		"https://h.test/admin/x?Q=Big": "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		clean, ok := lowerPath(u)
		if ok != (want == "") || clean != want {
			t.Errorf("%s: %q %v, want %q", raw, clean, ok, want)
		}
	}
}

// TestHTTPPlainQuery (session 11, trust11a): the query is taken only in
// its plain form, as the path is: a rule on "force=true" reads what the
// server decodes.
func TestHTTPPlainQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h.test/a?force=%74rue":     "https://h.test/a?force=true",
		"https://h.test/a?%66orce=true":     "https://h.test/a?force=true",
		"https://h.test/a?q=caf%c3%a9":      "https://h.test/a?q=caf%C3%A9",
		"https://h.test/a?q=%7e":            "https://h.test/a?q=~",
		"https://h.test/a?q=caf%C3%A9&x=1":  "",
		"https://h.test/a?q=a+b&r=a%20b%26": "",
		"https://h.test/a?":                 "",
		"https://h.test/a":                  "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		clean, ok := plainQuery(u)
		if ok != (want == "") || clean != want {
			t.Errorf("%s: %q %v, want %q", raw, clean, ok, want)
		}
	}
}

// TestHTTPMethodOverride (session 11, trust11a): a method override field
// in the query or the body (form, JSON at any depth, multipart) is
// refused, nothing sent; the same words as values, or in other fields'
// names, are not.
func TestHTTPMethodOverride(t *testing.T) {
	for q, want := range map[string]string{
		"_method=DELETE": "_method", "a=1&_METHOD=put": "_METHOD", "a=1;_method=put": "_method",
		"%5Fmethod=x": "_method", "_HttpMethod=PATCH": "_HttpMethod", "x-http-method-override=DELETE": "x-http-method-override",
		"method=DELETE": "", "a=_method": "", "my_method=x": "", "": "",
	} {
		if got := overrideInQuery(q); got != want {
			t.Errorf("query %q: %q, want %q", q, got, want)
		}
	}
	for body, want := range map[string]string{
		"note=hi&_method=DELETE":                "_method",
		"  _method=DELETE\n":                    "_method",
		`{"note": "hi", "_method": "DELETE"}`:   "_method",
		`{"a": [1, {"b": {"_Method": "PUT"}}]}`: "_Method",
		`[{"_method": "x"}]`:                    "_method",
		"--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--": "_method",
		"--b\r\nContent-Disposition: form-data; name=_method\r\n\r\nDELETE\r\n--b--":     "_method",
		`{"note": "_method", "list": ["_method"]}`:                                       "",
		`{"my_method": "x", "nested": {"method": "DELETE"}}`:                             "",
		"name=\"_methods\"": "",
		"hello world":       "",
		"":                  "",
	} {
		if got := overrideInBody(body); got != want {
			t.Errorf("body %q: %q, want %q", body, got, want)
		}
	}
	// Nested 10,000 deep: a token walk, no recursion.
	deep := strings.Repeat("[", 10000) + `{"_method": "DELETE"}` + strings.Repeat("]", 10000)
	if got := overrideInBody(deep); got != "_method" {
		t.Errorf("a deep body: %q", got)
	}
	f := newHTTPFixture(t)
	var hits sync.Map
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Store(r.URL.RequestURI(), true) })
	s := f.service(t, httpHosts+"  allow_addresses: [127.0.0.1/32]\n  case_insensitive_paths: [\"api.test:PORT\"]\n")
	for _, args := range []map[string]any{
		{"method": "POST", "url": f.url("api.test", "/echo?_method=DELETE"), "body": "x"},
		{"method": "POST", "url": f.url("api.test", "/echo"), "body": `{"_method": "DELETE"}`},
		{"method": "GET", "url": f.url("api.test", "/echo?q=%61")},
		{"method": "GET", "url": f.url("api.test", "/Echo")},
		{"method": "GET", "url": f.url("api.test", "/echo./x")},
		{"method": "GET", "url": f.url("api.test", "/echo%20/x")},
	} {
		r := exec(t, s, "http.request", args)
		if codeOf(r) != string(wire.CodeInvalidArgument) {
			t.Errorf("%v: %v", args, r)
		}
	}
	hits.Range(func(k, _ any) bool {
		t.Errorf("a refused request reached the server: %v", k)
		return true
	})
	// Not a case-insensitive host: sent as written.
	if r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("127.0.0.1", "/Echo")}); codeOf(r) != "" {
		t.Errorf("an upper-case path on another host: %v", r)
	}
	if _, ok := hits.Load("/Echo"); !ok {
		t.Error("the upper-case path on another host was not sent")
	}
	if _, err := ParseToolsConfig("tools.yaml", []byte("http:\n  allow_hosts: [a.test]\n  case_insensitive_paths: [\"a/b\"]\n")); err == nil {
		t.Error("a bad case_insensitive_paths entry was accepted")
	}
}

// TestHTTPUnderscoreHeadersConfig (session 16): underscore_headers takes
// only names with a "_", written plainly, that may be sent at all.
func TestHTTPUnderscoreHeadersConfig(t *testing.T) {
	t.Parallel()
	if _, err := ParseToolsConfig("tools.yaml", []byte("http:\n  allow_hosts: [a.test]\n  underscore_headers: [Api_Key]\n")); err != nil {
		t.Errorf("a plain name with \"_\": %v", err)
	}
	for _, bad := range []string{"api_key", "Api-Key", "X_Forwarded_For", "Api_Key:"} {
		if _, err := ParseToolsConfig("tools.yaml", []byte(fmt.Sprintf("http:\n  allow_hosts: [a.test]\n  underscore_headers: [%q]\n", bad))); err == nil {
			t.Errorf("underscore_headers entry %q was accepted", bad)
		}
	}
}

// TestHTTPHostAddresses (session 11, trust11a): allow_addresses lets
// every allowed host reach the addresses it lists; a name under an
// allowed wildcard whose DNS someone else controls (a dangling CNAME)
// then reached the internal service it was meant for. host_addresses
// allows them to one host only.
func TestHTTPHostAddresses(t *testing.T) {
	f := newHTTPFixture(t)
	f.resolver.answers["taken.example.test"] = []string{"127.0.0.1"}
	f.resolver.answers["status.internal"] = []string{"127.0.0.1"}
	s := f.service(t, `http:
  allow_hosts: ["status.internal:PORT", "*.example.test:PORT"]
  host_addresses:
    "status.internal:PORT": [127.0.0.1/32]
  timeout: 2s
`)
	if r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("status.internal", "/ok")}); codeOf(r) != "" {
		t.Fatalf("the host the addresses are for: %v", r)
	}
	r := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("taken.example.test", "/ok")})
	if codeOf(r) != string(wire.CodePermissionDenied) || r.GetError().GetDetails().AsMap()["outcome_unknown"] == true {
		t.Fatalf("another allowed host resolving to them: %v", r)
	}
	for _, bad := range []string{"http:\n  allow_hosts: [a.test]\n  host_addresses: {\"a/b\": [10.0.0.0/8]}\n", "http:\n  allow_hosts: [a.test]\n  host_addresses: {a.test: [nonsense]}\n"} {
		if _, err := ParseToolsConfig("tools.yaml", []byte(bad)); err == nil {
			t.Errorf("accepted: %s", bad)
		}
	}
}
