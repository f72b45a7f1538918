package k8s

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// statelessServices may run as any number of replicas; the executor and
// the tracer own volumes and run as one.
var statelessServices = []string{"orchestrator", "validator"}

// serviceFlag returns the effective value of a flag of an xct service's
// container.
func serviceFlag(t *testing.T, m *manifests, service, flag string) string {
	t.Helper()
	w, ok := m.workload(service)
	if !ok {
		t.Fatalf("no workload %s", service)
	}
	args, err := effectiveArgs(m, w.template.Spec.Containers[0])
	if err != nil {
		t.Fatalf("%s: %v", w, err)
	}
	flags, err := parseFlags(args[1:])
	if err != nil {
		t.Fatalf("%s: %v", w, err)
	}
	return flags[flag]
}

func TestProdOverlay(t *testing.T) {
	m := mustRender(t, "overlays/prod")
	for _, name := range statelessServices {
		w, _ := m.workload(name)
		if w.replicas < 2 {
			t.Errorf("%s has %d replicas, want at least 2", w, w.replicas)
		}
		h := m.hpa(name)
		if h == nil {
			t.Errorf("no HorizontalPodAutoscaler for %s", name)
		} else if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas %v, want at least 2", h.Name, h.Spec.MinReplicas)
		}
	}
	// R3: every service creates the stream and buckets with three replicas,
	// on three NATS servers that fsync every write.
	for _, name := range xctServices {
		if got := serviceFlag(t, m, name, "replicas"); got != "3" {
			t.Errorf("%s: --replicas=%s, want 3", name, got)
		}
	}
	nats, ok := m.workload("nats")
	if !ok || nats.replicas != 3 {
		t.Fatalf("want a NATS StatefulSet of 3 servers, got %v", nats.replicas)
	}
	opts := natsOptions(t, m, "nats-0")
	if len(opts.Routes) != 3 {
		t.Errorf("NATS has %d cluster routes, want 3", len(opts.Routes))
	}
	for i, r := range opts.Routes {
		// Each route names a server of the StatefulSet through its headless Service.
		want := fmt.Sprintf("nats-%d.%s:%d", i, m.StatefulSets[0].Spec.ServiceName, opts.Cluster.Port)
		if r.Host != want {
			t.Errorf("NATS route %d is %s, want %s", i, r.Host, want)
		}
	}
	if opts.Cluster.Name == "" {
		t.Error("NATS cluster has no name")
	}
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			if _, tag := splitImage(c.Image); tag == "dev" {
				t.Errorf("%s runs the dev image %s", w, c.Image)
			}
		}
	}
}

func TestDevOverlay(t *testing.T) {
	m := mustRender(t, "overlays/dev")
	for _, w := range m.workloads() {
		if w.replicas != 1 {
			t.Errorf("%s has %d replicas, want 1 in dev", w, w.replicas)
		}
	}
	if len(m.HPAs) > 0 {
		t.Errorf("dev has %d HorizontalPodAutoscalers, want none", len(m.HPAs))
	}
	for _, name := range xctServices {
		if got := serviceFlag(t, m, name, "replicas"); got != "1" {
			t.Errorf("%s: --replicas=%s, want 1 (one NATS server)", name, got)
		}
	}
	opts := natsOptions(t, m, "nats-0")
	if len(opts.Routes) != 0 || opts.Cluster.Port != 0 {
		t.Errorf("the single dev NATS server has a cluster (port %d, routes %v)", opts.Cluster.Port, opts.Routes)
	}
}

// TestExternalNATS checks components/external-nats: no NATS of our own,
// and every service pointed at the URL the overlay set.
func TestExternalNATS(t *testing.T) {
	m := mustRender(t, "testdata/external-nats")
	if len(m.StatefulSets) > 0 {
		t.Errorf("renders %d StatefulSets, want none", len(m.StatefulSets))
	}
	for _, name := range xctServices {
		if got, want := serviceFlag(t, m, name, "nats"), "nats://nats.messaging.svc.cluster.local:4222"; got != want {
			t.Errorf("%s: --nats=%s, want %s", name, got, want)
		}
	}
}

// TestServicesFindNATS checks that with components/nats every service's
// --nats is the NATS Service, and that no service asks for more stream
// replicas than there are servers.
func TestServicesFindNATS(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		nats, inCluster := m.workload("nats")
		if !inCluster {
			t.Skip("NATS is outside the overlay")
		}
		for _, name := range xctServices {
			url := serviceFlag(t, m, name, "nats")
			host, ok := strings.CutPrefix(url, "nats://")
			if !ok {
				t.Errorf("%s: --nats=%s is not a nats:// URL", name, url)
				continue
			}
			if err := servedBy(m, host, "nats"); err != nil {
				t.Errorf("%s: --nats: %v", name, err)
			}
			if r, err := strconv.Atoi(serviceFlag(t, m, name, "replicas")); err != nil || r < 1 || r > int(nats.replicas) {
				t.Errorf("%s: --replicas=%d (%v) but NATS has %d servers", name, r, err, nats.replicas)
			}
		}
	})
}

// natsOptions parses the rendered NATS configuration with the NATS
// server's own parser (the version the image runs), as the pod named pod
// would, and checks it against the StatefulSet: JetStream on, fsync on
// every write, the store on the data volume, the ports the container
// declares, and every $VARIABLE set by the container's env.
func natsOptions(t *testing.T, m *manifests, pod string) *server.Options {
	t.Helper()
	var sts *appsv1.StatefulSet
	for _, s := range m.StatefulSets {
		if s.Name == "nats" {
			sts = s
		}
	}
	if sts == nil {
		t.Fatal("no NATS StatefulSet")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	var cm *corev1.ConfigMap
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			cm = m.configMap(v.ConfigMap.Name)
		}
	}
	if cm == nil {
		t.Fatal("the NATS StatefulSet mounts no rendered ConfigMap as config")
	}
	if want := []string{"--config", filepath.Join(mounts["config"], "nats.conf")}; !slices.Equal(c.Args, want) {
		t.Fatalf("NATS args %v, want %v", c.Args, want)
	}
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The configuration's variables come from the container's env; the
	// server resolves them from the process environment. A Secret's
	// value is "pw-<variable>" (natsUsers checks it), the pod's name is
	// pod, and a literal value has its $(VAR) references expanded from
	// the variables before it, as the kubelet does.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "pw-" + e.Name
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = pod
		default:
			env[e.Name] = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(e.Value, func(ref string) string {
				if v, ok := env[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		}
	}
	// Quoted strings are literal (subjects such as "$JS.API.>").
	for _, file := range slices.Sorted(maps.Keys(cm.Data)) {
		unquoted := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(cm.Data[file], `""`)
		for _, v := range regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(unquoted, -1) {
			val, ok := env[v[1]]
			if !ok {
				t.Errorf("%s uses $%s, which the container's env does not set", file, v[1])
			}
			t.Setenv(v[1], val)
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("NATS does not accept its configuration: %v", err)
	}
	// The server's own validation of the options (cluster and JetStream
	// settings that parse but cannot run together), without starting it.
	check := opts.Clone()
	check.StoreDir, check.PidFile = t.TempDir(), ""
	srv, err := server.NewServer(check)
	if err != nil {
		t.Fatalf("NATS refuses its configuration: %v", err)
	}
	srv.Shutdown()
	if opts.ServerName != pod {
		t.Errorf("NATS server_name is %q, want the pod name %q", opts.ServerName, pod)
	}
	if !opts.JetStream {
		t.Error("JetStream is not enabled")
	}
	if !opts.SyncAlways {
		t.Error("JetStream does not sync every write (sync_interval: always)")
	}
	if opts.StoreDir != mounts["data"] {
		t.Errorf("JetStream store_dir %q is not the data volume (mounted at %q)", opts.StoreDir, mounts["data"])
	}
	if filepath.Dir(opts.PidFile) != mounts["pid"] {
		t.Errorf("pid_file %q is not on the pid volume (mounted at %q)", opts.PidFile, mounts["pid"])
	}
	storage := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	if opts.JetStreamMaxStore <= 0 || opts.JetStreamMaxStore >= storage.Value() {
		t.Errorf("max_file_store %d does not stay below the volume's %s", opts.JetStreamMaxStore, storage.String())
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if opts.Port != int(ports["client"]) || opts.HTTPPort != int(ports["monitor"]) {
		t.Errorf("NATS listens on %d (monitor %d), the container declares client %d, monitor %d",
			opts.Port, opts.HTTPPort, ports["client"], ports["monitor"])
	}
	if opts.Cluster.Port != 0 && opts.Cluster.Port != int(ports["cluster"]) {
		t.Errorf("NATS cluster port %d, the container declares %d", opts.Cluster.Port, ports["cluster"])
	}
	if pre := c.Lifecycle; pre == nil || pre.PreStop == nil || pre.PreStop.Exec == nil ||
		!slices.Contains(pre.PreStop.Exec.Command, "ldm="+opts.PidFile) {
		t.Errorf("NATS preStop does not put the server (pid file %s) in lame duck mode", opts.PidFile)
	}
	return opts
}

// TestNATSImageIsTheTestedServer checks that components/nats runs the NATS
// server version XCT is built and tested with, which is also the version
// whose parser checks the configuration here.
func TestNATSImageIsTheTestedServer(t *testing.T) {
	xct := goModVersion(t, filepath.Join(repoRoot, "go.mod"), "github.com/nats-io/nats-server/v2")
	here := goModVersion(t, "go.mod", "github.com/nats-io/nats-server/v2")
	if xct != here {
		t.Errorf("XCT's go.mod has nats-server %s, deploy/k8s/go.mod %s: keep them equal (cd deploy/k8s && go get github.com/nats-io/nats-server/v2@%s)", xct, here, xct)
	}
	m := mustRender(t, "overlays/prod")
	w, _ := m.workload("nats")
	_, tag := splitImage(w.template.Spec.Containers[0].Image)
	if "v"+tag != xct {
		t.Errorf("components/nats runs nats:%s, XCT is tested with nats-server %s", tag, xct)
	}
}

// goModVersion returns the version of module path required by a go.mod.
func goModVersion(t *testing.T, file, path string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s+(v\S+)`)
	v := re.FindSubmatch(data)
	if v == nil {
		t.Fatalf("%s does not require %s", file, path)
	}
	return string(v[1])
}
