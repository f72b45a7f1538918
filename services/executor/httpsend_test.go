package executor

import (
	"net"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// TestHTTPNothingSentIsDefinite: a failure before any connection was made
// (a name that does not resolve, a literal the resolver refuses, a refused
// connection) says nothing was sent: outcome_unknown is false, so the
// step is not in doubt. A failure after connecting stays in doubt.
func TestHTTPNothingSentIsDefinite(t *testing.T) {
	t.Parallel()
	f := newHTTPFixture(t)
	_, closedPort, _ := net.SplitHostPort(closedAddr(t))
	s := f.service(t, `http:
  allow_hosts: ["nxdomain.test:PORT", "127.1:PORT", "2130706433:PORT", "api.test:PORT", "api.test:`+closedPort+`"]
  allow_addresses: [127.0.0.1/32]
  timeout: 1s
`)
	for _, c := range []struct{ name, url string }{
		{"name that does not resolve", f.url("nxdomain.test", "/ok")},
		{"short IPv4 literal", f.url("127.1", "/ok")},
		{"decimal IPv4 literal", f.url("2130706433", "/ok")},
		{"connection refused", "http://" + net.JoinHostPort("api.test", closedPort) + "/ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := exec(t, s, "http.request", map[string]any{"method": "GET", "url": c.url}).GetError()
			if e == nil {
				t.Fatal("succeeded")
			}
			if unknown, ok := e.GetDetails().AsMap()["outcome_unknown"].(bool); !ok || unknown {
				t.Fatalf("%s: %s: outcome_unknown %v, want false", e.GetCode(), e.GetMessage(), e.GetDetails().AsMap())
			}
		})
	}
	t.Run("after connecting, in doubt", func(t *testing.T) {
		e := exec(t, s, "http.request", map[string]any{"method": "GET", "url": f.url("api.test", "/slow")}).GetError()
		if e.GetCode() != string(wire.CodeTimeout) || e.GetDetails().AsMap()["outcome_unknown"] != true {
			t.Fatalf("got %v", e)
		}
	})
}
