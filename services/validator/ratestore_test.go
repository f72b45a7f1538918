package validator_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// rateStorePolicy limits fs.write to 3 calls an hour across all runs, and
// to 2 calls an hour in one run for shell.exec; a shadow file beside it
// would count its own.
const rateStorePolicy = `
rate_limits:
  - {tool: "fs.write", global: 3/1h}
  - {tool: "shell.exec", per_run: 2/1h}
rules:
  - id: allow-all
    effect: allow
    tools: ["fs.*", "shell.exec"]
`

// rateCluster is validators sharing one JetStream, each served over gRPC
// on loopback and connected to NATS as the validator user.
type rateCluster struct {
	url    string
	policy string
	clock  *fakeClock
}

func newRateCluster(tb testing.TB, url, policy string) *rateCluster {
	tb.Helper()
	admin, err := nats.Connect(url, testutil.Admin())
	if err != nil {
		tb.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		tb.Fatal(err)
	}
	if err := catalog.Publish(context.Background(), js, testTools()); err != nil {
		tb.Fatal(err)
	}
	return &rateCluster{url: url, policy: writeFile(tb, "policy.yaml", policy), clock: newFakeClock()}
}

// replica starts a validator on the cluster's NATS and serves it; stop
// stops it (a crash, as far as its counts go).
func (c *rateCluster) replica(tb testing.TB) (client xctv1.ValidatorServiceClient, stop func()) {
	tb.Helper()
	// No buffering while disconnected: a request fails at once when NATS
	// is gone.
	nc, err := nats.Connect(c.url, testutil.NATSAs(natsauth.Validator), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := validator.New(validator.Config{PolicyFile: c.policy, Replicas: 1}, nc, nil, validator.WithClock(c.clock.Now))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cc.Close()
			g.Stop()
			_ = s.Stop(context.Background())
			nc.Close()
		})
	}
	tb.Cleanup(stop)
	return xctv1.NewValidatorServiceClient(cc), stop
}

func callValidate(tb testing.TB, v xctv1.ValidatorServiceClient, req *xctv1.ValidateRequest) *xctv1.Verdict {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := v.Validate(ctx, req)
	if err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	return resp.GetVerdict()
}

func write(tb testing.TB, run string, n int) *xctv1.ValidateRequest {
	return stepRequest(tb, run, n, "fs.write", map[string]any{"path": "f" + string(rune('a'+n%26)), "content": "x"})
}

// countDecisions counts allows and rate-limit refusals; anything else
// fails the test.
func countDecisions(tb testing.TB, vs []*xctv1.Verdict) (allowed, limited int) {
	tb.Helper()
	for _, v := range vs {
		switch {
		case v.GetDecision() == allow:
			allowed++
		case v.GetDecision() == deny && v.GetError().GetCode() == string(wire.CodeRateLimited):
			limited++
		default:
			tb.Errorf("verdict %v, want allow or RATE_LIMITED", v)
		}
	}
	return allowed, limited
}

// TestRateLimitAcrossReplicas: a global limit of 3 calls an hour, written
// by an operator for the cluster, let 3 calls through each validator
// replica (counted per process, on main: 6 of 10 allowed with two
// replicas). Now the count is NATS's: 10 proposals of different runs
// spread over two replicas, one after the other, allow exactly 3; the
// refusals say when a call frees up.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), rateStorePolicy)
	a, _ := c.replica(t)
	b, _ := c.replica(t)
	var vs []*xctv1.Verdict
	for i := range 10 {
		v := []xctv1.ValidatorServiceClient{a, b}[i%2]
		vs = append(vs, callValidate(t, v, write(t, "run-"+string(rune('a'+i)), 1)))
		c.clock.Advance(time.Second)
	}
	allowed, limited := countDecisions(t, vs)
	if allowed != 3 || limited != 7 {
		t.Fatalf("%d allowed, %d rate limited; want 3 and 7", allowed, limited)
	}
	d := vs[3].GetError().GetDetails().AsMap()
	if d["scope"] != "global" || d["limit"] != 3.0 || d["retry_after_ms"] != float64((time.Hour-3*time.Second).Milliseconds()) {
		t.Errorf("details = %v, want the global limit, retry after 1h-3s", d)
	}
	// An hour after the first call, one place frees up, on either replica.
	c.clock.Advance(time.Hour - 10*time.Second)
	checkVerdict(t, callValidate(t, b, write(t, "run-z", 1)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, a, write(t, "run-y", 1)), deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
}

// TestRateLimitRaceAcrossReplicas: 10 proposals at once, five on each of
// two replicas, for a limit of 3: exactly 3 are allowed.
func TestRateLimitRaceAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), rateStorePolicy)
	a, _ := c.replica(t)
	b, _ := c.replica(t)
	vs := make([]*xctv1.Verdict, 10)
	var wg sync.WaitGroup
	for i := range vs {
		wg.Go(func() {
			v := []xctv1.ValidatorServiceClient{a, b}[i%2]
			vs[i] = callValidate(t, v, write(t, "run-"+string(rune('a'+i)), 1))
		})
	}
	wg.Wait()
	if allowed, limited := countDecisions(t, vs); allowed != 3 || limited != 7 {
		t.Fatalf("%d allowed, %d rate limited; want 3 and 7", allowed, limited)
	}
}

// TestRateLimitSurvivesRestart: a validator that restarts (a crash loop)
// does not forget the calls counted: on main a new process started with
// every budget whole.
func TestRateLimitSurvivesRestart(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), rateStorePolicy)
	a, stop := c.replica(t)
	for i := range 3 {
		checkVerdict(t, callValidate(t, a, write(t, "run-"+string(rune('a'+i)), 1)), allow, "", "allow-all")
	}
	stop()
	a, _ = c.replica(t)
	checkVerdict(t, callValidate(t, a, write(t, "run-d", 1)), deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
}

// TestRateLimitPerRunAcrossReplicas: a per-run limit holds for a run whose
// steps are judged by different replicas, and another run has its own.
// A retried Validate of an allowed step (on either replica) is not
// counted again.
func TestRateLimitPerRunAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), rateStorePolicy)
	a, _ := c.replica(t)
	b, _ := c.replica(t)
	shell := func(run string, n int) *xctv1.ValidateRequest {
		return stepRequest(t, run, n, "shell.exec", map[string]any{"command": "ls", "args": []any{string(rune('a' + n))}})
	}
	checkVerdict(t, callValidate(t, a, shell("run-1", 1)), allow, "", "allow-all")
	// The same step again, on both replicas: still one call.
	checkVerdict(t, callValidate(t, b, shell("run-1", 1)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, a, shell("run-1", 1)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, b, shell("run-1", 2)), allow, "", "allow-all")
	v := callValidate(t, a, shell("run-1", 3))
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
	if d := v.GetError().GetDetails().AsMap(); d["scope"] != "per_run" {
		t.Errorf("details = %v, want the per-run limit", d)
	}
	checkVerdict(t, callValidate(t, b, shell("run-1", 3)), deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
	// An allowed step asked again once the limit is reached is still
	// allowed (it was counted), on the other replica too.
	checkVerdict(t, callValidate(t, a, shell("run-1", 2)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, b, shell("run-2", 1)), allow, "", "allow-all")
}

// TestRateLimitStoreGone: when the count cannot be kept (NATS is gone)
// a call a limit names is denied, saying why and that it may be retried;
// a call no limit names is not affected; once NATS is back, counting
// goes on from where it was.
func TestRateLimitStoreGone(t *testing.T) {
	t.Parallel()
	js := testutil.RestartableJetStream(t)
	c := newRateCluster(t, js.URL(), rateStorePolicy)
	a, _ := c.replica(t)
	checkVerdict(t, callValidate(t, a, write(t, "run-a", 1)), allow, "", "allow-all")
	js.Stop()
	v := callValidate(t, a, write(t, "run-b", 1))
	checkVerdict(t, v, deny, wire.CodeValidatorUnavailable, "allow-all", "builtin.rate_limit")
	if e := v.GetError(); !e.GetRecoverable() || !strings.Contains(e.GetMessage(), "could not be counted") || !strings.Contains(e.GetMessage(), "try again") {
		t.Errorf("error = %v, want a retryable 'could not be counted'", e)
	}
	checkVerdict(t, callValidate(t, a, stepRequest(t, "run-b", 2, "fs.read", map[string]any{"path": "a"})), allow, "", "allow-all")
	js.Start()
	testutil.Eventually(t, 30*time.Second, func() error {
		v := callValidate(t, a, write(t, "run-b", 1))
		if v.GetDecision() != allow {
			return errVerdict{v}
		}
		return nil
	})
	checkVerdict(t, callValidate(t, a, write(t, "run-c", 1)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, a, write(t, "run-d", 1)), deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
}

type errVerdict struct{ v *xctv1.Verdict }

func (e errVerdict) Error() string { return "verdict " + e.v.String() }

// TestRateLimitApprovalAndShadowAcrossReplicas: asking about a step that
// needs approval counts nothing; once the limit is used up on the other
// replica, such a step is refused before a human is asked. A shadow
// file's limit is counted apart from the enforced one, across replicas
// too.
func TestRateLimitApprovalAndShadowAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), `
rate_limits:
  - {tool: "*", global: 2/1h}
rules:
  - id: approve-shell
    effect: require_approval
    tools: ["shell.exec"]
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
`)
	shadow := writeFile(t, "shadow.yaml", `
mode: shadow
rate_limits:
  - {tool: "fs.write", global: 1/1h}
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
`)
	c.policy += "," + shadow
	a, _ := c.replica(t)
	b, _ := c.replica(t)
	shell := func(n int) *xctv1.ValidateRequest {
		return stepRequest(t, "run-a", n, "shell.exec", map[string]any{"command": "ls"})
	}
	for n := 1; n <= 3; n++ {
		checkVerdict(t, callValidate(t, []xctv1.ValidatorServiceClient{a, b}[n%2], shell(n)), approval, wire.CodeApprovalRequired, "approve-shell")
	}
	// The shadow allows its first write and refuses its second; the
	// enforced policy allows both.
	shadowOf := func(v *xctv1.Verdict) string {
		t.Helper()
		if len(v.GetShadow()) != 1 {
			t.Fatalf("shadow = %v", v.GetShadow())
		}
		out := []string{v.GetShadow()[0].GetDecision().String()}
		for _, r := range v.GetShadow()[0].GetReasons() {
			out = append(out, r.GetRuleId())
		}
		return strings.Join(out, " ")
	}
	v := callValidate(t, a, write(t, "run-a", 4))
	checkVerdict(t, v, allow, "", "allow-fs")
	if got := shadowOf(v); got != "VERDICT_DECISION_ALLOW allow-fs" {
		t.Errorf("shadow of the first write: %s", got)
	}
	v = callValidate(t, b, write(t, "run-a", 5))
	checkVerdict(t, v, allow, "", "allow-fs")
	if got := shadowOf(v); got != "VERDICT_DECISION_DENY allow-fs builtin.rate_limit" {
		t.Errorf("shadow of the second write: %s", got)
	}
	checkVerdict(t, callValidate(t, a, shell(6)), deny, wire.CodeRateLimited, "approve-shell", "builtin.rate_limit")
	checkVerdict(t, callValidate(t, b, write(t, "run-a", 7)), deny, wire.CodeRateLimited, "allow-fs", "builtin.rate_limit")
}

// TestRateLimitGivesBack: a call two limits match, taken by the first
// (per run) and refused by the second (global), is given back to the
// first: the run's next call, once the global window has room, is
// allowed on the other replica.
func TestRateLimitGivesBack(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), `
rate_limits:
  - {tool: "fs.write", per_run: 1/2h, global: 2/1h}
rules:
  - id: allow-all
    effect: allow
    tools: ["fs.*"]
`)
	a, _ := c.replica(t)
	b, _ := c.replica(t)
	checkVerdict(t, callValidate(t, a, write(t, "run-a", 1)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, b, write(t, "run-b", 1)), allow, "", "allow-all")
	c.clock.Advance(time.Second)
	v := callValidate(t, a, write(t, "run-c", 1))
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
	if d := v.GetError().GetDetails().AsMap(); d["scope"] != "global" {
		t.Errorf("details = %v, want the global limit", d)
	}
	c.clock.Advance(time.Hour)
	checkVerdict(t, callValidate(t, b, write(t, "run-c", 2)), allow, "", "allow-all")
	checkVerdict(t, callValidate(t, a, write(t, "run-c", 3)), deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
}

// BenchmarkValidateRateLimitedStore measures a validation on NATS whose
// tool two limits match (a per-run and a global window, counted in the
// XCT_RATE_LIMITS bucket: a read and a compare-and-set each), the clock
// moving 100 ms a call so that the global window holds about 600 calls
// and none is refused. The /unlimited case is the same validator with a
// tool no limit matches (the store is not asked).
func BenchmarkValidateRateLimitedStore(b *testing.B) {
	ns := testutil.RunJetStream(b)
	c := newRateCluster(b, ns.ClientURL(), `
rate_limits:
  - {tool: "fs.write", per_run: 100/1m, global: 1000/1m}
rules:
  - id: allow-fs
    effect: allow
    tools: ["fs.*"]
`)
	nc, err := nats.Connect(c.url, testutil.NATSAs(natsauth.Validator))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	s, err := validator.New(validator.Config{PolicyFile: c.policy, Replicas: 1}, nc, nil, validator.WithClock(c.clock.Now))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Stop(ctx) }()
	for _, tool := range []string{"fs.write", "fs.read"} {
		name := "limited"
		if tool == "fs.read" {
			name = "unlimited"
		}
		b.Run(name, func(b *testing.B) {
			reqs := make([]*xctv1.ValidateRequest, 512)
			for i := range reqs {
				a := map[string]any{"path": fmt.Sprintf("f%d", i), "content": "x"}
				if tool == "fs.read" {
					delete(a, "content")
				}
				reqs[i] = stepRequest(b, fmt.Sprintf("run-%d", i%50), i+1, tool, a)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.clock.Advance(100 * time.Millisecond)
				req := reqs[i%len(reqs)]
				req.StepId = fmt.Sprintf("%s-%d", tool, i) // a new step each time
				resp, err := s.Validate(ctx, req)
				if err != nil || resp.GetVerdict().GetDecision() != allow {
					b.Fatalf("Validate: %v, %v", resp.GetVerdict(), err)
				}
				i++
			}
		})
	}
}

// TestRateLimitCountsOnlyVerdictCallers (session 12, attack12): every
// Validate call took a place under the rate limits, in the count every
// replica now shares, also a service's whose verdicts are not signed
// (--verdict-callers names the orchestrator): a taken-over tracer,
// asking about fs.write steps of a run of its own making, used up the
// global limit, and the orchestrator's next steps were refused
// RATE_LIMITED (on main the tracer's 4th and 5th calls were refused, and
// so were all of the orchestrator's). Now only a caller whose verdicts
// are signed is counted; the others are told whether the call fits.
func TestRateLimitCountsOnlyVerdictCallers(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	c := newRateCluster(t, ns.ClientURL(), rateStorePolicy) // fs.write: global 3/1h
	nc, err := nats.Connect(c.url, testutil.NATSAs(natsauth.Validator))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := validator.New(validator.Config{PolicyFile: c.policy, Replicas: 1, VerdictCallers: []string{"service:orchestrator"}},
		nc, nil, validator.WithClock(c.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	as := func(name string) context.Context {
		return auth.NewContext(ctx, auth.Principal{Name: name, Roles: []string{auth.RoleService}, Service: true})
	}
	validate := func(caller string, req *xctv1.ValidateRequest) *xctv1.Verdict {
		t.Helper()
		resp, err := s.Validate(as(caller), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVerdict()
	}
	for i := 1; i <= 5; i++ {
		v := validate("service:tracer", write(t, "run-t", i))
		if v.GetDecision() != allow || v.GetSigned() != nil {
			t.Fatalf("the tracer's call %d: %v (want allowed, unsigned, and not counted)", i, v)
		}
	}
	for i := 1; i <= 3; i++ {
		checkVerdict(t, validate("service:orchestrator", write(t, "run-o", i)), allow, "", "allow-all")
	}
	v := validate("service:orchestrator", write(t, "run-o", 4))
	checkVerdict(t, v, deny, wire.CodeRateLimited, "allow-all", "builtin.rate_limit")
	// Told, not counted: once the limit is used up, the tracer is told so.
	if v := validate("service:tracer", write(t, "run-t", 6)); v.GetError().GetCode() != string(wire.CodeRateLimited) {
		t.Errorf("the tracer once the limit is used up: %v", v)
	}
}
