package k8s

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
)

// natsUsers are the NATS users of components/nats (internal/natsauth's).
var natsUsers = []string{"orchestrator", "validator", "executor", "tracer", "reader", "admin"}

// TestNATSRequiresAuthentication: the NATS XCT runs lets nobody in without
// a password, has a user per service, a read-only user and an admin, each
// password from its own variable set from its own Secret, and each user's
// publish rights say who may write the chains, the tool catalog and the
// step records and who may change a stream (only the admin).
func TestNATSRequiresAuthentication(t *testing.T) {
	for _, dir := range []string{"overlays/dev", "overlays/prod"} {
		t.Run(dir, func(t *testing.T) {
			m := mustRender(t, dir)
			opts := natsOptions(t, m, "nats-0")
			if opts.NoAuthUser != "" || opts.Username != "" || opts.Authorization != "" || len(opts.Nkeys) > 0 {
				t.Errorf("NATS has another way in: no_auth_user %q, user %q, token set %v, nkeys %d",
					opts.NoAuthUser, opts.Username, opts.Authorization != "", len(opts.Nkeys))
			}
			users := map[string]*server.User{}
			for _, u := range opts.Users {
				users[u.Username] = u
			}
			if len(users) != len(natsUsers) {
				t.Errorf("NATS users %v, want %v", keys(users), natsUsers)
			}
			for _, name := range natsUsers {
				u, ok := users[name]
				if !ok {
					t.Errorf("no NATS user %s", name)
					continue
				}
				// natsOptions gave each password variable its own value.
				if want := "pw-XCT_NATS_" + strings.ToUpper(name) + "_PASSWORD"; u.Password != want {
					t.Errorf("user %s: password %q, want the value of $%s", name, u.Password, strings.TrimPrefix(want, "pw-"))
				}
				if u.Permissions == nil || (u.Permissions.Publish == nil) != (name == "admin") {
					t.Errorf("user %s: permissions %v (only the admin publishes anywhere)", name, u.Permissions)
				}
			}
			sts, _ := m.workload("nats")
			secrets := map[string]string{}
			for _, e := range sts.template.Spec.Containers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secrets[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
			for _, name := range natsUsers {
				v := "XCT_NATS_" + strings.ToUpper(name) + "_PASSWORD"
				if want := "xct-nats-" + name + "/password"; secrets[v] != want {
					t.Errorf("NATS env %s from Secret %q, want %s", v, secrets[v], want)
				}
			}

			may := func(user, subject string) bool {
				u := users[user]
				if u == nil {
					return false
				}
				if u.Permissions == nil || u.Permissions.Publish == nil {
					return true
				}
				p := u.Permissions.Publish
				return p != nil && slices.ContainsFunc(p.Allow, func(s string) bool { return subjectMatches(s, subject) }) &&
					!slices.ContainsFunc(p.Deny, func(s string) bool { return subjectMatches(s, subject) })
			}
			for subject, writers := range map[string][]string{
				"lctl.chain.run-1":                                {"orchestrator", "admin"},
				"lctl.chain.otel-1":                               {"orchestrator", "admin"},
				"lctl.otel.1":                                     {"tracer", "admin"},
				"$JS.API.STREAM.CREATE.LCTL_OTEL":                 {"admin"}, // the Job xct-nats-provision
				"$JS.API.STREAM.DELETE.LCTL_OTEL":                 {"admin"},
				"$JS.API.STREAM.PURGE.LCTL_OTEL":                  {"admin"},
				"$JS.API.CONSUMER.CREATE.LCTL_OTEL.c.lctl.otel.>": {"tracer", "reader", "admin"},
				"$KV.XCT_TOOLS.fs.write":                          {"executor", "admin"},
				"$KV.XCT_STEPS.step-1":                            {"executor", "admin"},
				"$O.XCT_STEP_BLOBS.C.x":                           {"executor", "admin"},
				"$KV.XCT_APPROVALS.a":                             {"validator", "admin"},
				"$KV.XCT_REDACTION.hmac-key":                      {"admin"}, // xct nats provision makes it
				"$JS.API.STREAM.DELETE.LCTL":                      {"admin"},
				"$JS.API.STREAM.PURGE.LCTL":                       {"admin"},
				"$JS.API.STREAM.UPDATE.LCTL":                      {"admin"},
				"$JS.API.STREAM.MSG.DELETE.LCTL":                  {"admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_TOOLS":               {"admin"},
				"$JS.API.STREAM.DELETE.KV_XCT_TOOLS":              {"admin"},
				"$JS.API.STREAM.PURGE.OBJ_XCT_STEP_BLOBS":         {"executor", "admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_RUN_OWNERS":          {"orchestrator", "admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_RUN_QUOTA":           {"admin"},
				"$KV.XCT_RUN_QUOTA.p":                             {"orchestrator", "admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_RATE_LIMITS":         {"admin"},
				"$KV.XCT_RATE_LIMITS.g":                           {"validator", "admin"},
				"$JS.API.STREAM.CREATE.X":                         {"admin"},
				"$JS.API.STREAM.CREATE.LCTL":                      {"admin"},
				"$JS.API.STREAM.CREATE.KV_XCT_STEPS":              {"admin"},
				"$JS.API.STREAM.CREATE.KV_XCT_RUN_OWNERS":         {"admin"},
				"$JS.API.STREAM.CREATE.KV_XCT_TOOLS":              {"admin"},
				"$JS.API.STREAM.INFO.LCTL":                        {"orchestrator", "validator", "executor", "tracer", "reader", "admin"},
				// Consumers only where a service reads with them (natsauth's consumes).
				"$JS.API.CONSUMER.CREATE.LCTL.c.lctl.chain.run-1":                  {"orchestrator", "tracer", "reader", "admin"},
				"$JS.API.CONSUMER.CREATE.KV_XCT_TOOLS.c.$KV.XCT_TOOLS.>":           {"orchestrator", "validator", "admin"},
				"$JS.API.CONSUMER.CREATE.KV_XCT_STEPS.c.$KV.XCT_STEPS.s":           {"executor", "admin"},
				"$JS.API.CONSUMER.CREATE.KV_XCT_APPROVALS.c.$KV.XCT_APPROVALS.r.s": {"orchestrator", "validator", "admin"},
			} {
				for _, user := range natsUsers {
					if got, want := may(user, subject), slices.Contains(writers, user); got != want {
						t.Errorf("user %s may publish to %s: %v, want %v", user, subject, got, want)
					}
				}
			}
			// Nobody subscribes to a data subject, the admin included:
			// a push consumer aimed there would deliver into it.
			maySubscribe := func(user, subject string) bool {
				u := users[user]
				if u == nil {
					return false
				}
				if u.Permissions == nil || u.Permissions.Subscribe == nil {
					return true
				}
				p := u.Permissions.Subscribe
				match := func(s string) bool { return subjectMatches(s, subject) }
				return (len(p.Allow) == 0 || slices.ContainsFunc(p.Allow, match)) && !slices.ContainsFunc(p.Deny, match)
			}
			for _, subject := range []string{"lctl.chain.run-1", "lctl.otel.1", "$KV.XCT_TOOLS.fs.write", "$KV.XCT_STEPS.s", "$O.XCT_STEP_BLOBS.C.x", "$KV.XCT_APPROVALS.a", "$KV.XCT_RUN_OWNERS.r", "$KV.XCT_RUN_QUOTA.p", "$KV.XCT_RATE_LIMITS.g", "$KV.XCT_REDACTION.k"} {
				for _, user := range natsUsers {
					if maySubscribe(user, subject) {
						t.Errorf("user %s may subscribe to %s", user, subject)
					}
				}
			}
			if !maySubscribe("admin", "_INBOX.admin.x") {
				t.Error("the admin may not subscribe to its inbox")
			}
		})
	}
}

// TestServicesConnectToNATSAsThemselves: each service's password comes from
// its own Secret into XCT_NATS_PASSWORD (the user named like its target),
// never from a flag.
func TestServicesConnectToNATSAsThemselves(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, name := range xctServices {
			w, ok := m.workload(name)
			if !ok {
				t.Errorf("no workload %s", name)
				continue
			}
			c := w.template.Spec.Containers[0]
			var from string
			for _, e := range c.Env {
				if e.Name == "XCT_NATS_PASSWORD" {
					if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						t.Errorf("%s: XCT_NATS_PASSWORD is not from a Secret", w)
						continue
					}
					from = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
				if e.Name == "XCT_NATS_USER" {
					t.Errorf("%s: XCT_NATS_USER set: the user is the service's own name", w)
				}
			}
			if want := "xct-nats-" + name + "/password"; from != want {
				t.Errorf("%s: XCT_NATS_PASSWORD from %q, want %s", w, from, want)
			}
			for _, a := range c.Args {
				if strings.Contains(strings.ToLower(a), "password") || strings.Contains(a, "@") && strings.Contains(a, "nats://") {
					t.Errorf("%s: argument %q carries a NATS credential", w, a)
				}
			}
		}
	})
}

// subjectMatches reports whether NATS subject pattern (with * and >)
// matches subject.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestNATSRoutesRequireAuthentication: a server of the cluster accepts a
// route only with the route user's password (from the Secret
// xct-nats-route), and its own routes present it: a pod that reaches
// 6222 cannot join the cluster and read or write the streams as a server.
// One server (overlays/dev) has no cluster port at all.
func TestNATSRoutesRequireAuthentication(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		if _, inCluster := m.workload("nats"); !inCluster {
			return
		}
		opts := natsOptions(t, m, "nats-0")
		if opts.Cluster.Port == 0 {
			if len(opts.Routes) > 0 {
				t.Errorf("routes %v without a cluster port", opts.Routes)
			}
			return
		}
		const pw = "pw-XCT_NATS_ROUTE_PASSWORD"
		if opts.Cluster.Username != "route" || opts.Cluster.Password != pw {
			t.Errorf("cluster authorization: user %q, password %q; want route and the value of $XCT_NATS_ROUTE_PASSWORD",
				opts.Cluster.Username, opts.Cluster.Password)
		}
		if len(opts.Routes) == 0 {
			t.Error("a cluster without routes")
		}
		for _, r := range opts.Routes {
			p, _ := r.User.Password()
			if r.User.Username() != "route" || p != pw {
				t.Errorf("route %s does not present the route user's password", r.Redacted())
			}
		}
		sts, _ := m.workload("nats")
		found := false
		for _, e := range sts.template.Spec.Containers[0].Env {
			if e.Name != "XCT_NATS_ROUTE_PASSWORD" {
				continue
			}
			found = true
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "xct-nats-route" || e.ValueFrom.SecretKeyRef.Key != "password" {
				t.Errorf("XCT_NATS_ROUTE_PASSWORD is not from the Secret xct-nats-route (key password): %+v", e)
			}
		}
		if !found {
			t.Error("the NATS container has no XCT_NATS_ROUTE_PASSWORD")
		}
	})
}

// TestNATSMonitoringIsNotServed: the monitoring port (no authentication:
// connections, subscriptions and consumers of every user) is there for
// the kubelet's probes only. No Service publishes it, and no pod may
// connect to it (TestNetworkPolicyGraph has the whole graph).
func TestNATSMonitoringIsNotServed(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		sts, inCluster := m.workload("nats")
		if !inCluster {
			return
		}
		for _, s := range m.Services {
			for _, p := range s.Spec.Ports {
				if p.Port == 8222 || p.TargetPort.String() == "monitor" || p.TargetPort.IntValue() == 8222 {
					t.Errorf("Service %s publishes the NATS monitoring port (%s)", s.Name, p.Name)
				}
			}
		}
		var monitor corev1.ContainerPort
		for _, p := range sts.template.Spec.Containers[0].Ports {
			if p.Name == "monitor" {
				monitor = p
			}
		}
		nats := endpoint{}
		for _, e := range world(m) {
			if e.name == "nats" {
				nats = e
			}
		}
		for _, src := range world(m) {
			if src.namespace == namespace && allowed(m.NetworkPolicies, src, nats, monitor) {
				t.Errorf("%s may connect to the NATS monitoring port", src.name)
			}
		}
	})
}

// TestNATSRoutesAuthenticateForReal: two servers with the rendered
// configuration (loopback ports instead of the pods' names) form their
// cluster through the route user; a connection to the cluster port
// without the password is refused by the server.
func TestNATSRoutesAuthenticateForReal(t *testing.T) {
	m := mustRender(t, "overlays/prod")
	start := func(pod string, route *url.URL) *server.Server {
		opts := natsOptions(t, m, pod).Clone()
		opts.Host, opts.Port, opts.HTTPPort, opts.PidFile = "127.0.0.1", -1, 0, ""
		opts.JetStream, opts.StoreDir = false, ""
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", -1
		opts.NoLog, opts.NoSigs = true, true
		var routes []*url.URL
		if route != nil {
			// The pods' names do not resolve here: the first route with
			// its user and password, to the loopback server.
			r := *opts.Routes[0]
			r.Host = route.Host
			routes = append(routes, &r)
		}
		opts.Routes = routes
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("NATS did not start")
		}
		t.Cleanup(s.Shutdown)
		return s
	}
	first := start("nats-0", nil)
	addr := first.ClusterAddr()
	start("nats-1", &url.URL{Host: addr.String()})
	eventually(t, func() bool { return first.NumRoutes() > 0 })

	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"name\":\"intruder\",\"cluster\":\"xct\"}\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, "Authorization Violation") {
		t.Errorf("a route without the password: %q, %v", line, err)
	}
}

// eventually polls cond until it holds (10 s): deploy/k8s is a module of
// its own, without internal/testutil.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for wait := time.Millisecond; !cond(); wait = min(2*wait, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 10s")
		}
		time.Sleep(wait) //nolint:forbidigo // polling a condition, as testutil.Eventually does

	}
}
