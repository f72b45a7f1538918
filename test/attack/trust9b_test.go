package attack

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// TestAttackRedirectResendsAnAllowedPostElsewhere (session 9, trust9b): a
// policy lets a run POST to one path of a host with no human
// (/public/comments) and keeps the rest of the host for a human. The
// host has an open redirect under the allowed path; the model's allowed
// POST to it was answered 307 to /admin/delete, and the executor, which
// followed redirects on the same host, sent the same POST, body and all,
// there: a request no policy allowed and no human approved. Now a
// redirect that would send the method and body again is the result
// (redirect_not_followed), for the model to propose as its own step.
func TestAttackRedirectResendsAnAllowedPostElsewhere(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var admin []string
	mux := http.NewServeMux()
	mux.HandleFunc("/public/go", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		admin = append(admin, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		fmt.Fprint(w, "done")
	})
	// Like a front proxy that normalizes paths before routing (nginx
	// merges and resolves dot segments; some servers take "\\" for "/").
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = path.Clean("/" + strings.ReplaceAll(r.URL.Path, "\\", "/"))
		r.URL.RawPath = ""
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + u.Host
	policy := fmt.Sprintf(`rules:
  - id: public-posts
    effect: allow
    tools: [http.request]
    when: 'args.url.startsWith("%s/public/")'
    message: posting to the public API needs no human
  - id: the-rest-needs-a-human
    effect: require_approval
    tools: [http.request]
    when: '!args.url.startsWith("%s/public/")'
    message: anything else on the host needs a human
`, base, base)
	tools := fmt.Sprintf("http:\n  allow_hosts: [%q]\n  allow_addresses: [127.0.0.1/32]\n  timeout: 5s\n", u.Host)
	c := startBindCluster(t, withTools(t, tools, policy))
	target := base + "/public/go?to=" + url.QueryEscape("/admin/delete?all=1")
	c.writeScript(t, "a.yaml", script(
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=42\"}", target)),
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	mu.Lock()
	got := append([]string(nil), admin...)
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("the allowed POST reached a path the policy keeps for a human: %v", got)
	}
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || len(run.GetSteps()) != 1 {
		t.Fatalf("run %s: %s, %d steps", run.GetStatus(), run.GetMessage(), len(run.GetSteps()))
	}
	// The same policy's prefix, passed by dot segments that the server
	// resolves: the policy reads /public/..., the server /admin/delete.
	c.writeScript(t, "b.yaml", script(
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=43\"}", base+"/public/../admin/delete")),
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=44\"}", base+"/public/%2e%2E/admin/delete")),
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=45\"}", base+"/public/..%5cadmin/delete")),
	))
	dots := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:b.yaml"})
	mu.Lock()
	got = append([]string(nil), admin...)
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("an allowed POST reached a path the policy keeps for a human through dot segments: %v", got)
	}
	if errs := stepErrors(dots); fmt.Sprint(errs) != "[INVALID_ARGUMENT INVALID_ARGUMENT INVALID_ARGUMENT]" {
		t.Fatalf("dot segments: %v", errs)
	}
	// A deny rule on the host as written, passed by writing it otherwise.
	denyPolicy := fmt.Sprintf(`rules:
  - id: allow-http
    effect: allow
    tools: [http.request]
  - id: not-the-admin-host
    effect: deny
    tools: [http.request]
    when: 'args.url.startsWith("http://localhost:%s/")'
    message: the admin host is off limits
`, u.Port())
	c2 := startBindCluster(t, withTools(t, fmt.Sprintf("http:\n  allow_hosts: [\"localhost:%s\"]\n  allow_addresses: [127.0.0.1/32, \"::1/128\"]\n  timeout: 5s\n", u.Port()), denyPolicy))
	c2.writeScript(t, "c.yaml", script(
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=46\"}", "http://LOCALHOST:"+u.Port()+"/admin/delete")),
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=47\"}", "http://localhost.:"+u.Port()+"/admin/delete")),
		step("http.request", fmt.Sprintf("{method: POST, url: %q, body: \"id=48\"}", "http://localhost:"+u.Port()+"/admin/delete")),
	))
	hosts := c2.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:c.yaml"})
	mu.Lock()
	got = append([]string(nil), admin...)
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("a POST reached the host a deny rule keeps off limits: %v", got)
	}
	if errs := stepErrors(hosts); fmt.Sprint(errs) != "[INVALID_ARGUMENT INVALID_ARGUMENT POLICY_DENIED]" {
		t.Fatalf("the host written otherwise: %v", errs)
	}
	res := run.GetSteps()[0].GetResponse().GetSuccess().GetResult().AsInterface()
	m, _ := res.(map[string]any)
	if m["status"] != float64(http.StatusTemporaryRedirect) || !strings.HasSuffix(fmt.Sprint(m["redirect_not_followed"]), "/admin/delete?all=1") {
		t.Fatalf("the step's result: %v (%v)", res, run.GetSteps()[0].GetResponse().GetError())
	}
}
