package k8s

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpoint is something that sends or receives traffic: a pod (in a
// namespace, with labels) or an address outside the cluster.
type endpoint struct {
	name      string
	namespace string // "" outside the cluster
	labels    map[string]string
	ip        netip.Addr
	ports     []corev1.ContainerPort
}

func port(name string, n int32, proto corev1.Protocol) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: n, Protocol: proto}
}

// world is every endpoint the policies are evaluated against: the pods the
// overlay renders, plus client and bystander pods in the namespace, the
// cluster DNS, an OTLP collector, a NATS in another namespace, and
// addresses outside the cluster.
func world(m *manifests) []endpoint {
	var out []endpoint
	for i, w := range m.workloads() {
		var ports []corev1.ContainerPort
		for _, c := range w.template.Spec.Containers {
			ports = append(ports, c.Ports...)
		}
		out = append(out, endpoint{name: w.name, namespace: w.namespace, labels: w.template.Labels,
			ip: netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + i)}), ports: ports})
	}
	for i, j := range m.Jobs {
		out = append(out, endpoint{name: j.Name, namespace: j.Namespace, labels: j.Spec.Template.Labels,
			ip: netip.AddrFrom4([4]byte{10, 244, 6, byte(10 + i)})})
	}
	return append(out,
		endpoint{name: "client", namespace: namespace, labels: map[string]string{"xct.dev/client": "true"},
			ip: netip.MustParseAddr("10.244.1.1"), ports: []corev1.ContainerPort{port("http", 8080, "")}},
		endpoint{name: "bystander", namespace: namespace, labels: map[string]string{"app": "other"},
			ip: netip.MustParseAddr("10.244.1.2"), ports: []corev1.ContainerPort{port("http", 8080, "")}},
		endpoint{name: "kube-dns", namespace: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"},
			ip: netip.MustParseAddr("10.244.2.1"), ports: []corev1.ContainerPort{port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, "")}},
		endpoint{name: "otel-collector", namespace: "observability", labels: map[string]string{"app": "otel-collector"},
			ip: netip.MustParseAddr("10.244.3.1"), ports: []corev1.ContainerPort{port("otlp-grpc", 4317, ""), port("otlp-http", 4318, "")}},
		endpoint{name: "external-nats", namespace: "messaging", labels: map[string]string{"app.kubernetes.io/name": "nats"},
			ip: netip.MustParseAddr("10.244.4.1"), ports: []corev1.ContainerPort{port("client", 4222, "")}},
		endpoint{name: "elsewhere", namespace: "elsewhere", labels: map[string]string{"app.kubernetes.io/name": "validator"},
			ip: netip.MustParseAddr("10.244.5.1"), ports: []corev1.ContainerPort{port("grpc", 7702, "")}},
		endpoint{name: "internet", ip: netip.MustParseAddr("203.0.113.7"), ports: []corev1.ContainerPort{port("https", 443, "")}},
		endpoint{name: "internet6", ip: netip.MustParseAddr("2001:db8::7"), ports: []corev1.ContainerPort{port("https", 443, "")}},
		endpoint{name: "metadata", ip: netip.MustParseAddr("169.254.169.254"), ports: []corev1.ContainerPort{port("http", 80, ""), port("https", 443, "")}},
		endpoint{name: "private", ip: netip.MustParseAddr("192.168.10.10"), ports: []corev1.ContainerPort{port("https", 443, "")}},
	)
}

// graph returns every connection the policies allow from a pod in the
// namespace to any endpoint's port, as "src -> dst:port/PROTO".
func graph(m *manifests) []string {
	var out []string
	eps := world(m)
	for _, src := range eps {
		if src.namespace != namespace {
			continue
		}
		for _, dst := range eps {
			for _, p := range dst.ports {
				if allowed(m.NetworkPolicies, src, dst, p) {
					out = append(out, fmt.Sprintf("%s -> %s:%d/%s", src.name, dst.name, p.ContainerPort, protocolOf(p.Protocol)))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// allowed reports whether NetworkPolicy semantics let src open a
// connection to dst's port p: src's egress and dst's ingress must both
// allow it. Pods that no policy of a direction selects are open in that
// direction; only the namespace's own policies are in play.
func allowed(pols []*networkingv1.NetworkPolicy, src, dst endpoint, p corev1.ContainerPort) bool {
	return direction(pols, networkingv1.PolicyTypeEgress, src, dst, p) &&
		direction(pols, networkingv1.PolicyTypeIngress, dst, src, p)
}

// direction evaluates the policies of type typ that select subject, for
// traffic with peer on port p of the receiving endpoint.
func direction(pols []*networkingv1.NetworkPolicy, typ networkingv1.PolicyType, subject, peer endpoint, p corev1.ContainerPort) bool {
	selected := false
	for _, pol := range pols {
		if pol.Namespace != subject.namespace || !slices.Contains(pol.Spec.PolicyTypes, typ) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(subject.labels)) {
			continue
		}
		selected = true
		if typ == networkingv1.PolicyTypeEgress {
			for _, r := range pol.Spec.Egress {
				if peersMatch(r.To, pol.Namespace, peer) && portsMatch(r.Ports, p) {
					return true
				}
			}
		} else {
			for _, r := range pol.Spec.Ingress {
				if peersMatch(r.From, pol.Namespace, peer) && portsMatch(r.Ports, p) {
					return true
				}
			}
		}
	}
	return !selected
}

func peersMatch(peers []networkingv1.NetworkPolicyPeer, policyNS string, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if b := peer.IPBlock; b != nil {
			if prefixContains(b.CIDR, e.ip) && !slices.ContainsFunc(b.Except, func(x string) bool { return prefixContains(x, e.ip) }) {
				return true
			}
			continue
		}
		if e.namespace == "" {
			continue
		}
		if peer.NamespaceSelector == nil {
			if e.namespace != policyNS {
				continue
			}
		} else {
			nsSel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil || !nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": e.namespace}) {
				continue
			}
		}
		if peer.PodSelector != nil {
			podSel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil || !podSel.Matches(labels.Set(e.labels)) {
				continue
			}
		}
		return true
	}
	return false
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, p corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, np := range ports {
		proto := corev1.ProtocolTCP
		if np.Protocol != nil {
			proto = *np.Protocol
		}
		if proto != protocolOf(p.Protocol) {
			continue
		}
		switch {
		case np.Port == nil:
			return true
		case np.Port.Type == intstr.String:
			if np.Port.StrVal == p.Name {
				return true
			}
		case np.EndPort != nil:
			if p.ContainerPort >= np.Port.IntVal && p.ContainerPort <= *np.EndPort {
				return true
			}
		case np.Port.IntVal == p.ContainerPort:
			return true
		}
	}
	return false
}

func prefixContains(cidr string, ip netip.Addr) bool {
	p, err := netip.ParsePrefix(cidr)
	return err == nil && ip.IsValid() && p.Contains(ip)
}

// TestNetworkPolicyGraph asserts the whole graph of allowed connections:
// exactly the calls of the architecture, nothing more.
func TestNetworkPolicyGraph(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		natsEdges := []string{
			"orchestrator -> nats:4222/TCP",
			"validator -> nats:4222/TCP",
			"executor -> nats:4222/TCP",
			"tracer -> nats:4222/TCP",
			"xct-nats-provision -> nats:4222/TCP", // the admin's Job
			"nats -> nats:6222/TCP",               // cluster routes
		}
		if _, inCluster := m.workload("nats"); !inCluster {
			natsEdges = []string{
				"orchestrator -> external-nats:4222/TCP",
				"validator -> external-nats:4222/TCP",
				"executor -> external-nats:4222/TCP",
				"tracer -> external-nats:4222/TCP",
				"xct-nats-provision -> external-nats:4222/TCP",
			}
		}
		want := slices.Concat(natsEdges, []string{
			// clients in the namespace: runs, approvals, chains
			"client -> orchestrator:7701/TCP",
			"client -> validator:7702/TCP",
			"client -> tracer:7704/TCP",
			// the loop
			"orchestrator -> validator:7702/TCP",
			"orchestrator -> executor:7703/TCP",
			// the model endpoint: public HTTPS only
			"orchestrator -> internet:443/TCP",
			"orchestrator -> internet6:443/TCP",
			// the debugger's approvals
			"tracer -> validator:7702/TCP",
			// spans
			"tracer -> otel-collector:4317/TCP",
			"tracer -> otel-collector:4318/TCP",
		})
		for _, src := range world(m) {
			if src.namespace == namespace {
				want = append(want, src.name+" -> kube-dns:53/UDP", src.name+" -> kube-dns:53/TCP")
			}
		}
		slices.Sort(want)
		got := graph(m)
		for _, e := range got {
			if !slices.Contains(want, e) {
				t.Errorf("allowed, but not a call of the architecture: %s", e)
			}
		}
		for _, e := range want {
			if !slices.Contains(got, e) {
				t.Errorf("a call of the architecture is blocked: %s", e)
			}
		}
		// The edges that matter most, said outright.
		for _, e := range []struct {
			edge string
			want bool
		}{
			{"orchestrator -> validator:7702/TCP", true},
			{"orchestrator -> executor:7703/TCP", true},
			{"executor -> validator:7702/TCP", false},
			{"tracer -> validator:7702/TCP", true},
			{"tracer -> executor:7703/TCP", false},
			{"tracer -> orchestrator:7701/TCP", false},
			{"executor -> orchestrator:7701/TCP", false},
			{"executor -> internet:443/TCP", false},
			{"executor -> metadata:80/TCP", false},
			{"client -> executor:7703/TCP", false},
			{"bystander -> orchestrator:7701/TCP", false},
			{"orchestrator -> metadata:80/TCP", false},
			{"orchestrator -> private:443/TCP", false},
		} {
			if slices.Contains(got, e.edge) != e.want {
				t.Errorf("%s: allowed is %v, want %v", e.edge, !e.want, e.want)
			}
		}
		if t.Failed() {
			t.Logf("allowed connections:\n  %s", strings.Join(got, "\n  "))
		}
	})
}

// TestNetworkPolicyDefaultDeny checks that the namespace denies both
// directions to every pod unless a policy allows it.
func TestNetworkPolicyDefaultDeny(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		for _, p := range m.NetworkPolicies {
			if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
				len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 &&
				slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
				slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				return
			}
		}
		t.Error("no default-deny NetworkPolicy (every pod, both directions, no rules)")
	})
}
