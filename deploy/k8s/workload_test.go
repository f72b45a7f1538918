package k8s

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// xctServices are the four services of the xct image, each a Deployment,
// a Service and a container of the same name.
var xctServices = []string{"orchestrator", "validator", "executor", "tracer"}

// TestWorkloadsAreProductionReady checks every container of every
// Deployment and StatefulSet: probes, requests and limits, and a security
// context that meets the restricted Pod Security Standard with a read-only
// root file system.
func TestWorkloadsAreProductionReady(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads() {
			for _, p := range workloadProblems(w) {
				t.Errorf("%s: %s", w, p)
			}
		}
	})
}

func workloadProblems(w workload) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	pod := w.template.Spec
	if !selectorMatches(w.selector, w.template.Labels) {
		bad("selector %v does not match its pod template's labels %v", w.selector, w.template.Labels)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		bad("automountServiceAccountToken is not false")
	}
	if pod.ServiceAccountName == "" || pod.ServiceAccountName == "default" {
		bad("runs as the default service account")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		bad("shares a host namespace")
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			bad("volume %s is a hostPath", v.Name)
		}
	}
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		in := func(format string, args ...any) { bad("container "+c.Name+": "+format, args...) }
		if c.ReadinessProbe == nil {
			in("no readinessProbe")
		}
		if c.LivenessProbe == nil {
			in("no livenessProbe")
		}
		for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
			if p == nil {
				continue
			}
			if port, ok := probePort(p); !ok || !hasContainerPort(c, port) {
				in("%s probe port %v is not a port of the container", kind, port)
			}
			if hasNamedPort(c, "grpc") && p.GRPC == nil {
				in("%s probe is not a gRPC probe although the container serves gRPC", kind)
			}
			// Liveness asks whether the process is alive (grpcx's
			// "liveness"), the others whether it can work (""): a
			// full NATS store or a lost NATS must not restart it.
			// The orchestrator's readiness may also follow its
			// dependencies (components/orchestrator-deps-ready).
			if p.GRPC != nil {
				want := []string{""}
				switch {
				case kind == "liveness":
					want = []string{"liveness"}
				case kind == "readiness" && w.name == "orchestrator":
					want = append(want, "xct.orchestrator.deps")
				}
				if got := ptrValue(p.GRPC.Service); !slices.Contains(want, got) {
					in("%s probe asks for health service %q, want one of %q", kind, got, want)
				}
			}
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
				in("no %s request", r)
			}
			if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
				in("no %s limit", r)
			} else if req := c.Resources.Requests[r]; q.Cmp(req) < 0 {
				in("%s limit %s is below its request %s", r, q.String(), req.String())
			}
		}
		csc := c.SecurityContext
		if csc == nil {
			in("no securityContext")
			continue
		}
		if !isTrue(csc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			in("runAsNonRoot is not true")
		}
		if u := csc.RunAsUser; u != nil && *u == 0 || u == nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
			in("runs as user 0")
		}
		if !isTrue(csc.ReadOnlyRootFilesystem) {
			in("readOnlyRootFilesystem is not true")
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			in("allowPrivilegeEscalation is not false")
		}
		if isTrue(csc.Privileged) {
			in("is privileged")
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			in("capabilities do not drop ALL")
		} else if len(csc.Capabilities.Add) > 0 {
			in("adds capabilities %v", csc.Capabilities.Add)
		}
		seccomp := csc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			in("seccompProfile is not RuntimeDefault")
		}
		if name, tag := splitImage(c.Image); name == "" || tag == "" || tag == "latest" {
			in("image %q has no pinned tag", c.Image)
		}
		if name, _ := splitImage(c.Image); (name == "xct" || strings.HasSuffix(name, "/xct")) && !memLimitFromContainer(c) {
			in("GOMEMLIMIT is not the container's memory limit (xct serve collects at --gc-percent 400 and needs the limit to collect sooner)")
		}
	}
	return out
}

// TestReferencesResolve checks that whatever a pod refers to is rendered:
// volumes of mounts, ConfigMaps, claims, service accounts (which do not
// mount their token either), and every $(VAR) of an argument.
func TestReferencesResolve(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads() {
			for _, p := range referenceProblems(m, w) {
				t.Errorf("%s: %s", w, p)
			}
		}
	})
}

func referenceProblems(m *manifests, w workload) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	pod := w.template.Spec
	sa := pod.ServiceAccountName
	if i := slices.IndexFunc(m.ServiceAccounts, func(s *corev1.ServiceAccount) bool { return s.Name == sa }); i < 0 {
		bad("service account %q is not rendered", sa)
	} else if a := m.ServiceAccounts[i].AutomountServiceAccountToken; a == nil || *a {
		bad("service account %q mounts its token", sa)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		switch {
		case v.ConfigMap != nil:
			if m.configMap(v.ConfigMap.Name) == nil && !isTrue(v.ConfigMap.Optional) {
				bad("volume %s: ConfigMap %q is not rendered", v.Name, v.ConfigMap.Name)
			}
		case v.PersistentVolumeClaim != nil:
			claim := v.PersistentVolumeClaim.ClaimName
			if !slices.ContainsFunc(m.PVCs, func(p *corev1.PersistentVolumeClaim) bool { return p.Name == claim }) {
				bad("volume %s: PersistentVolumeClaim %q is not rendered", v.Name, claim)
			}
		case v.Secret != nil:
			if !isTrue(v.Secret.Optional) {
				bad("volume %s: Secret %q is not optional (the manifests ship no Secrets)", v.Name, v.Secret.SecretName)
			}
		}
	}
	for _, c := range w.claimTemplates {
		volumes[c.Name] = true
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		for _, vm := range c.VolumeMounts {
			if !volumes[vm.Name] {
				bad("container %s mounts %q, which is not a volume of the pod", c.Name, vm.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !isTrue(r.Optional) {
				if cm := m.configMap(r.Name); cm == nil {
					bad("container %s env %s: ConfigMap %q is not rendered", c.Name, e.Name, r.Name)
				} else if _, ok := cm.Data[r.Key]; !ok {
					bad("container %s env %s: ConfigMap %q has no key %q", c.Name, e.Name, r.Name, r.Key)
				}
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil && !isTrue(r.Optional) {
				bad("container %s env %s: Secret %q is not optional (the manifests ship no Secrets)", c.Name, e.Name, r.Name)
			}
		}
		if _, err := effectiveArgs(m, c); err != nil {
			bad("container %s: %v", c.Name, err)
		}
	}
	return out
}

// TestServicesTargetContainerPorts checks that every Service selects pods
// and that each of its ports reaches a port those pods declare.
func TestServicesTargetContainerPorts(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, s := range m.Services {
			var selected []workload
			for _, w := range m.workloads() {
				if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
					selected = append(selected, w)
				}
			}
			if len(selected) == 0 {
				t.Errorf("Service %s selects no workload (selector %v)", s.Name, s.Spec.Selector)
				continue
			}
			for _, p := range s.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				for _, w := range selected {
					if !podHasPort(w.template.Spec, target, protocolOf(p.Protocol)) {
						t.Errorf("Service %s port %s: target %s/%s is not a container port of %s",
							s.Name, p.Name, target.String(), protocolOf(p.Protocol), w)
					}
				}
			}
		}
		for _, s := range m.StatefulSets {
			svc := m.service(s.Spec.ServiceName)
			if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("StatefulSet %s: serviceName %q is not a rendered headless Service", s.Name, s.Spec.ServiceName)
			}
		}
	})
}

// TestDisruptionBudgetsAndAutoscalers checks that PDBs and HPAs name
// workloads that exist, and that the stateless services have a PDB.
func TestDisruptionBudgetsAndAutoscalers(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, p := range m.PDBs {
			var n int
			for _, w := range m.workloads() {
				if selectorMatches(p.Spec.Selector, w.template.Labels) {
					n++
					if p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 0 ||
						p.Spec.MinAvailable != nil && p.Spec.MinAvailable.IntValue() >= int(w.replicas) {
						t.Errorf("PodDisruptionBudget %s never lets %s (%d replicas) be drained", p.Name, w, w.replicas)
					}
				}
			}
			if n != 1 {
				t.Errorf("PodDisruptionBudget %s selects %d workloads, want 1", p.Name, n)
			}
		}
		for _, name := range []string{"orchestrator", "validator"} {
			if !slices.ContainsFunc(m.PDBs, func(p *policyv1.PodDisruptionBudget) bool { return p.Name == name }) {
				t.Errorf("no PodDisruptionBudget for %s", name)
			}
		}
		for _, h := range m.HPAs {
			ref := h.Spec.ScaleTargetRef
			if _, ok := m.workload(ref.Name); !ok || ref.Kind != "Deployment" {
				t.Errorf("HorizontalPodAutoscaler %s scales %s %s, which is not a rendered Deployment", h.Name, ref.Kind, ref.Name)
			}
			if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
				t.Errorf("HorizontalPodAutoscaler %s: minReplicas %v, maxReplicas %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
			}
			if slices.Contains([]string{"executor", "tracer"}, ref.Name) {
				t.Errorf("HorizontalPodAutoscaler %s scales %s, which must run as one replica", h.Name, ref.Name)
			}
		}
		for _, name := range []string{"executor", "tracer"} {
			if w, ok := m.workload(name); !ok || w.replicas != 1 {
				t.Errorf("%s must run as exactly one replica (it owns its volume)", name)
			}
		}
	})
}

// TestServiceArgs checks how each xct container is started: the image's
// entrypoint with `serve --target=NAME`, listening on its container port,
// calling the other services at their Services, with flags xct has.
func TestServiceArgs(t *testing.T) {
	known := serveFlags(t)
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, name := range xctServices {
			w, ok := m.workload(name)
			if !ok {
				t.Errorf("no workload %s", name)
				continue
			}
			c := w.template.Spec.Containers[0]
			if len(w.template.Spec.Containers) != 1 || c.Name != name {
				t.Errorf("%s: want one container named %s", w, name)
				continue
			}
			if len(c.Command) > 0 {
				t.Errorf("%s: command %v replaces the image's entrypoint; set args only", w, c.Command)
			}
			if len(c.Args) == 0 || c.Args[0] != "serve" {
				t.Errorf("%s: args %v do not start with serve", w, c.Args)
				continue
			}
			args, err := effectiveArgs(m, c)
			if err != nil {
				t.Errorf("%s: %v", w, err)
				continue
			}
			flags, err := parseFlags(args[1:])
			if err != nil {
				t.Errorf("%s: %v", w, err)
				continue
			}
			for f := range flags {
				if !known[f] {
					t.Errorf("%s: xct serve has no flag --%s", w, f)
				}
			}
			if got := flags["target"]; got != name {
				t.Errorf("%s: --target=%s, want %s", w, got, name)
			}
			listen := flags[name+"-listen"]
			if port := c.Ports[0].ContainerPort; listen != fmt.Sprintf(":%d", port) {
				t.Errorf("%s: --%s-listen=%q, want \":%d\" (every interface, the container port)", w, name, listen, port)
			}
			for _, p := range pathProblems(w, c, flags) {
				t.Errorf("%s: %s", w, p)
			}
			if name == "orchestrator" {
				for _, dep := range []string{"validator", "executor"} {
					if err := servedBy(m, flags[dep+"-addr"], dep); err != nil {
						t.Errorf("%s: --%s-addr: %v", w, dep, err)
					}
				}
			}
			// Only the orchestrator gets signed verdicts, and executes or
			// previews steps: another service taken over (the tracer parses
			// what submitters export) acts on nothing and reads no file.
			if flag := map[string]string{"validator": "verdict-callers", "executor": "step-callers"}[name]; flag != "" && flags[flag] != "service:orchestrator" {
				t.Errorf("%s: --%s=%q, want service:orchestrator", w, flag, flags[flag])
			}
		}
	})
}

// pathFlags are the xct flags that name files or directories, and whether
// the service writes there durably (state that must outlive the pod).
var pathFlags = map[string]bool{
	"workspace":    true,
	"tracer-data":  true,
	"scripts-dir":  false,
	"policy":       false,
	"tools-config": false,
}

// pathProblems checks that every path a service is given is on a volume
// (the root file system is read-only), and that durable state is on a
// writable PersistentVolumeClaim.
func pathProblems(w workload, c corev1.Container, flags map[string]string) []string {
	var out []string
	for flag, durable := range pathFlags {
		p, ok := flags[flag]
		if !ok {
			continue
		}
		var mount *corev1.VolumeMount
		for i, vm := range c.VolumeMounts {
			if (p == vm.MountPath || strings.HasPrefix(p, strings.TrimSuffix(vm.MountPath, "/")+"/")) &&
				(mount == nil || len(vm.MountPath) > len(mount.MountPath)) {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil {
			out = append(out, fmt.Sprintf("--%s=%s is on the read-only root file system", flag, p))
			continue
		}
		if !durable {
			continue
		}
		i := slices.IndexFunc(w.template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if mount.ReadOnly || i < 0 || w.template.Spec.Volumes[i].PersistentVolumeClaim == nil {
			out = append(out, fmt.Sprintf("--%s=%s is not on a writable PersistentVolumeClaim", flag, p))
		}
	}
	return out
}

// servedBy reports whether addr ("host:port") is the Service of the named
// workload, on a port that reaches it.
func servedBy(m *manifests, addr, name string) error {
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return fmt.Errorf("%q is not host:port", addr)
	}
	s := m.service(host)
	if s == nil {
		return fmt.Errorf("%q: no Service %s", addr, host)
	}
	if s.Spec.Selector["app.kubernetes.io/name"] != name {
		return fmt.Errorf("%q: Service %s does not select %s", addr, host, name)
	}
	for _, p := range s.Spec.Ports {
		if fmt.Sprint(p.Port) == port {
			return nil
		}
	}
	return fmt.Errorf("%q: Service %s has no port %s", addr, host, port)
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// effectiveArgs returns a container's args as the kubelet passes them:
// each $(VAR) replaced by the container's env var VAR, resolved from its
// value or its ConfigMap. A reference to an undefined variable is an error
// (the kubelet would pass it through literally).
func effectiveArgs(m *manifests, c corev1.Container) ([]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			if cm := m.configMap(r.Name); cm != nil {
				if v, ok := cm.Data[r.Key]; ok {
					env[e.Name] = v
				}
			}
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "<" + e.ValueFrom.FieldRef.FieldPath + ">"
		}
	}
	out := make([]string, len(c.Args))
	var missing []string
	for i, a := range c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := env[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("args refer to %v, which the container's env does not resolve", missing)
	}
	return out, nil
}

// parseFlags parses --name=value arguments, the only form the manifests
// use (so each argument is readable alone).
func parseFlags(args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok || name == "" {
			return nil, fmt.Errorf("argument %q is not --name=value", a)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("flag --%s is given twice", name)
		}
		out[name] = value
	}
	return out, nil
}

func selectorMatches(s *metav1.LabelSelector, l map[string]string) bool {
	if s == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	return err == nil && !sel.Empty() && sel.Matches(labels.Set(l))
}

func probePort(p *corev1.Probe) (intstr.IntOrString, bool) {
	switch {
	case p.GRPC != nil:
		return intstr.FromInt32(p.GRPC.Port), true
	case p.HTTPGet != nil:
		return p.HTTPGet.Port, true
	case p.TCPSocket != nil:
		return p.TCPSocket.Port, true
	}
	return intstr.IntOrString{}, false
}

func hasContainerPort(c corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
			return true
		}
	}
	return false
}

func hasNamedPort(c corev1.Container, name string) bool {
	return hasContainerPort(c, intstr.FromString(name))
}

func podHasPort(pod corev1.PodSpec, port intstr.IntOrString, proto corev1.Protocol) bool {
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if protocolOf(p.Protocol) != proto {
				continue
			}
			if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
				return true
			}
		}
	}
	return false
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// splitImage splits "registry/name:tag" (a digest counts as a tag).
func splitImage(image string) (name, tag string) {
	if name, digest, ok := strings.Cut(image, "@"); ok {
		return name, digest
	}
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		return image[:colon], image[colon+1:]
	}
	return image, ""
}

func isTrue(b *bool) bool { return b != nil && *b }

// memLimitFromContainer says whether c's GOMEMLIMIT is its own memory
// limit (a resourceFieldRef to limits.memory of c itself).
func memLimitFromContainer(c corev1.Container) bool {
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil {
			continue
		}
		r := e.ValueFrom.ResourceFieldRef
		return r.Resource == "limits.memory" && (r.ContainerName == "" || r.ContainerName == c.Name) && r.Divisor.IsZero()
	}
	return false
}

// ptrValue is *p, or "" when p is nil.
func ptrValue(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestOrchestratorReadinessFollowsDependenciesOnlyWhenAsked: base keeps
// the orchestrator ready while its validator is away (its steps fail
// closed; runs stay readable and cancellable); with
// components/orchestrator-deps-ready its readiness probe asks
// xct.orchestrator.deps (services/orchestrator DepsHealthService), and its
// startup and liveness probes are unchanged.
func TestOrchestratorReadinessFollowsDependenciesOnlyWhenAsked(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		w, ok := m.workload("orchestrator")
		if !ok {
			t.Fatal("no orchestrator")
		}
		c := w.template.Spec.Containers[0]
		want := ""
		if m == mustRender(t, "testdata/deps-ready") {
			want = "xct.orchestrator.deps"
		}
		if got := ptrValue(c.ReadinessProbe.GRPC.Service); got != want {
			t.Errorf("readiness asks %q, want %q", got, want)
		}
		if got := ptrValue(c.StartupProbe.GRPC.Service); got != "" {
			t.Errorf("startup asks %q, want \"\"", got)
		}
		if got := ptrValue(c.LivenessProbe.GRPC.Service); got != "liveness" {
			t.Errorf("liveness asks %q, want liveness", got)
		}
	})
}
