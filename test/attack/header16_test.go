package attack

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// A header named with "_" past a rule on its "-" name. A policy lets
// requests carry the demo API key only (`!("X-Api-Key" in args.headers)
// || args.headers["X-Api-Key"] == "demo"`); CGI, PHP and WSGI servers
// name X_Api_Key and X-Api-Key both HTTP_X_API_KEY. On main
// {"X_Api_Key": "stolen"} was allowed (no X-Api-Key in the arguments) and
// the server read the stolen key, and {"X-Api-Key": "demo", "X_Api_Key":
// "stolen"} was allowed too (Go sends X_api_key after X-Api-Key, the
// later wins there). Now a name with "_" is refused, naming the "-" form,
// unless the http tool's underscore_headers lists it.
func TestAttackHeaderWithUnderscorePastAValueRule(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := ""
		for k, v := range r.Header { // as a CGI server names them: the last one wins
			if textproto.CanonicalMIMEHeaderKey(strings.ReplaceAll(k, "_", "-")) == "X-Api-Key" && (key == "" || k != "X-Api-Key") {
				key = v[len(v)-1]
			}
		}
		mu.Lock()
		keys = append(keys, key)
		mu.Unlock()
		fmt.Fprint(w, "hello")
	}))
	t.Cleanup(srv.Close)
	base := srv.URL
	policy := `rules:
  - id: demo-key-only
    effect: allow
    tools: [http.request]
    when: '!has(args.headers) || !("X-Api-Key" in args.headers) || args.headers["X-Api-Key"] == "demo"'
`
	tools := fmt.Sprintf("http:\n  allow_hosts: [%q]\n  allow_addresses: [127.0.0.1/32]\n  timeout: 5s\n", strings.TrimPrefix(base, "http://"))
	c := startBindCluster(t, withTools(t, tools, policy))
	get := func(headers string) string {
		return step("http.request", fmt.Sprintf("{method: GET, url: %q, headers: %s}", base+"/x", headers))
	}
	c.writeScript(t, "u.yaml", script(
		get(`{"X-Api-Key": "demo"}`),
		get(`{"X_Api_Key": "stolen"}`),
		get(`{"X-Api-Key": "demo", "X_Api_Key": "stolen"}`),
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:u.yaml"})
	mu.Lock()
	got := append([]string(nil), keys...)
	mu.Unlock()
	for _, k := range got {
		if k != "demo" {
			t.Errorf("the server read key %q, which the policy allows only as demo (requests: %q)", k, got)
		}
	}
	if errs := stepErrors(run); fmt.Sprint(errs) != "[ INVALID_ARGUMENT INVALID_ARGUMENT]" {
		t.Fatalf("steps: %v", errs)
	}
	if msg := run.GetSteps()[1].GetResponse().GetError().GetMessage(); !strings.Contains(msg, `"X-Api-Key"`) {
		t.Errorf("the refusal %q does not name the \"-\" form", msg)
	}
}
