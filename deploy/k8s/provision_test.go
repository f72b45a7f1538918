package k8s

import (
	"strings"
	"testing"
)

// TestNATSProvisionJob: every overlay has the Job that makes XCT's streams
// as the NATS admin before the services bind them (their NATS users may
// not create streams): `xct nats provision` with flags it has, the same
// NATS URL and replicas as the services, the admin's password from its
// Secret into the environment and nowhere on the command line, and the
// same locked-down container as the services.
func TestNATSProvisionJob(t *testing.T) {
	known := provisionFlags(t)
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		if len(m.Jobs) != 1 || m.Jobs[0].Name != "xct-nats-provision" {
			t.Fatalf("want the one Job xct-nats-provision, got %d", len(m.Jobs))
		}
		j := m.Jobs[0]
		spec := j.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", j.Name, len(spec.Containers))
		}
		c := spec.Containers[0]
		if len(c.Command) > 0 || len(c.Args) < 2 || c.Args[0] != "nats" || c.Args[1] != "provision" {
			t.Fatalf("%s: command %v args %v, want the image's entrypoint with nats provision", j.Name, c.Command, c.Args)
		}
		args, err := effectiveArgs(m, c)
		if err != nil {
			t.Fatal(err)
		}
		flags, err := parseFlags(args[2:])
		if err != nil {
			t.Fatal(err)
		}
		for f := range flags {
			if !known[f] {
				t.Errorf("%s: xct nats provision has no flag --%s", j.Name, f)
			}
		}
		// The streams' replicas and the NATS the services use; the
		// step records' retention the executor's.
		for _, name := range xctServices {
			w, ok := m.workload(name)
			if !ok {
				t.Fatalf("no workload %s", name)
			}
			sargs, err := effectiveArgs(m, w.template.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}
			sflags, err := parseFlags(sargs[1:])
			if err != nil {
				t.Fatal(err)
			}
			same := []string{"nats", "replicas"}
			if name == "executor" {
				same = append(same, "step-retention")
				if flags["step-retention"] == "" {
					t.Errorf("%s: no --step-retention: the bucket would be made with the default whatever the executor says", j.Name)
				}
			}
			for _, f := range same {
				if flags[f] != sflags[f] {
					t.Errorf("%s: --%s=%q, but %s has %q", j.Name, f, flags[f], name, sflags[f])
				}
			}
		}
		var from string
		for _, e := range c.Env {
			switch e.Name {
			case "XCT_NATS_PASSWORD":
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s: XCT_NATS_PASSWORD is not from a Secret", j.Name)
					continue
				}
				from = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			case "XCT_NATS_USER":
				t.Errorf("%s: XCT_NATS_USER set: the command is the admin's", j.Name)
			}
		}
		if from != "xct-nats-admin/password" {
			t.Errorf("%s: XCT_NATS_PASSWORD from %q, want xct-nats-admin/password", j.Name, from)
		}
		for _, a := range c.Args {
			if strings.Contains(strings.ToLower(a), "password") || strings.Contains(a, "@") {
				t.Errorf("%s: argument %q carries a credential", j.Name, a)
			}
		}
		// No other workload gets the admin's password but NATS itself.
		for _, w := range m.workloads() {
			for _, ct := range w.template.Spec.Containers {
				for _, e := range ct.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "xct-nats-admin" && w.name != "nats" {
						t.Errorf("%s gets the NATS admin's password", w)
					}
				}
			}
		}
		sc := c.SecurityContext
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken ||
			sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: not locked down as the services are: %+v", j.Name, sc)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
			t.Errorf("%s: no resource limits", j.Name)
		}
		if j.Spec.TTLSecondsAfterFinished == nil || j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit < 1 {
			t.Errorf("%s: want a backoff limit (NATS may start with it) and a TTL (a finished Job goes, so a later apply runs it again)", j.Name)
		}
	})
}
