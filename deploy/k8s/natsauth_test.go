package k8s

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
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
				if (u.Permissions == nil) != (name == "admin") {
					t.Errorf("user %s: permissions %v (only the admin has none)", name, u.Permissions)
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
				if u.Permissions == nil {
					return true
				}
				p := u.Permissions.Publish
				return p != nil && slices.ContainsFunc(p.Allow, func(s string) bool { return subjectMatches(s, subject) }) &&
					!slices.ContainsFunc(p.Deny, func(s string) bool { return subjectMatches(s, subject) })
			}
			for subject, writers := range map[string][]string{
				"lctl.chain.run-1":                        {"orchestrator", "tracer", "admin"},
				"$KV.XCT_TOOLS.fs.write":                  {"executor", "admin"},
				"$KV.XCT_STEPS.step-1":                    {"executor", "admin"},
				"$O.XCT_STEP_BLOBS.C.x":                   {"executor", "admin"},
				"$KV.XCT_APPROVALS.a":                     {"validator", "admin"},
				"$JS.API.STREAM.DELETE.LCTL":              {"admin"},
				"$JS.API.STREAM.PURGE.LCTL":               {"admin"},
				"$JS.API.STREAM.UPDATE.LCTL":              {"admin"},
				"$JS.API.STREAM.MSG.DELETE.LCTL":          {"admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_TOOLS":       {"admin"},
				"$JS.API.STREAM.DELETE.KV_XCT_TOOLS":      {"admin"},
				"$JS.API.STREAM.PURGE.OBJ_XCT_STEP_BLOBS": {"executor", "admin"},
				"$JS.API.STREAM.PURGE.KV_XCT_RUN_OWNERS":  {"orchestrator", "admin"},
				"$JS.API.STREAM.CREATE.X":                 {"admin"},
				"$JS.API.STREAM.CREATE.LCTL":              {"orchestrator", "tracer", "admin"},
				"$JS.API.STREAM.CREATE.KV_XCT_STEPS":      {"executor", "admin"},
				"$JS.API.STREAM.INFO.LCTL":                {"orchestrator", "validator", "executor", "tracer", "reader", "admin"},
				"$JS.API.CONSUMER.CREATE.LCTL.c":          {"orchestrator", "validator", "executor", "tracer", "reader", "admin"},
			} {
				for _, user := range natsUsers {
					if got, want := may(user, subject), slices.Contains(writers, user); got != want {
						t.Errorf("user %s may publish to %s: %v, want %v", user, subject, got, want)
					}
				}
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
