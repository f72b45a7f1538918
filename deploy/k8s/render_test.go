package k8s

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Overlays are the kustomizations an operator applies. Every test renders
// and checks each of them; testdata/external-nats stands for an overlay
// built on components/external-nats.
var overlays = []string{"overlays/dev", "overlays/prod", "testdata/external-nats", "testdata/deps-ready"}

// namespace is where every overlay puts XCT.
const namespace = "xct"

// strictYAML decodes one object into its Kubernetes API type, failing on
// unknown and duplicate fields and on kinds the scheme does not know: a new
// kind in the manifests must be added to newScheme on purpose.
var strictYAML = func() *kjson.Serializer {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		appsv1.AddToScheme,
		policyv1.AddToScheme,
		networkingv1.AddToScheme,
		autoscalingv2.AddToScheme,
		batchv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
}()

// manifests is one rendered overlay, decoded, by kind.
type manifests struct {
	dir             string
	Namespaces      []*corev1.Namespace
	ServiceAccounts []*corev1.ServiceAccount
	ConfigMaps      []*corev1.ConfigMap
	Services        []*corev1.Service
	PVCs            []*corev1.PersistentVolumeClaim
	Deployments     []*appsv1.Deployment
	StatefulSets    []*appsv1.StatefulSet
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	Jobs            []*batchv1.Job
}

// render builds the kustomization in dir with the kustomize API (what
// `kubectl apply -k` runs) and decodes every object strictly. All decoding
// errors are reported together, each naming its object.
func render(dir string) (*manifests, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	m := &manifests{dir: dir}
	var errs []error
	for _, r := range resMap.Resources() {
		what := r.GetKind() + " " + r.GetName()
		y, err := r.AsYAML()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		obj, _, err := strictYAML.Decode(y, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		if err := m.add(obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

func (m *manifests) add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Namespace:
		m.Namespaces = append(m.Namespaces, o)
	case *corev1.ServiceAccount:
		m.ServiceAccounts = append(m.ServiceAccounts, o)
	case *corev1.ConfigMap:
		m.ConfigMaps = append(m.ConfigMaps, o)
	case *corev1.Service:
		m.Services = append(m.Services, o)
	case *corev1.PersistentVolumeClaim:
		m.PVCs = append(m.PVCs, o)
	case *appsv1.Deployment:
		m.Deployments = append(m.Deployments, o)
	case *appsv1.StatefulSet:
		m.StatefulSets = append(m.StatefulSets, o)
	case *policyv1.PodDisruptionBudget:
		m.PDBs = append(m.PDBs, o)
	case *networkingv1.NetworkPolicy:
		m.NetworkPolicies = append(m.NetworkPolicies, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		m.HPAs = append(m.HPAs, o)
	case *batchv1.Job:
		m.Jobs = append(m.Jobs, o)
	default:
		return fmt.Errorf("kind %T is not checked by these tests: add it to newScheme and to the checks", obj)
	}
	return nil
}

// workload is what the checks need of a Deployment or a StatefulSet.
type workload struct {
	kind, name, namespace string
	replicas              int32
	selector              *metav1.LabelSelector
	template              *corev1.PodTemplateSpec
	claimTemplates        []corev1.PersistentVolumeClaim
}

func (w workload) String() string { return w.kind + " " + w.name }

func (m *manifests) workloads() []workload {
	var out []workload
	for _, d := range m.Deployments {
		out = append(out, workload{kind: "Deployment", name: d.Name, namespace: d.Namespace,
			replicas: replicas(d.Spec.Replicas), selector: d.Spec.Selector, template: &d.Spec.Template})
	}
	for _, s := range m.StatefulSets {
		out = append(out, workload{kind: "StatefulSet", name: s.Name, namespace: s.Namespace,
			replicas: replicas(s.Spec.Replicas), selector: s.Spec.Selector, template: &s.Spec.Template,
			claimTemplates: s.Spec.VolumeClaimTemplates})
	}
	return out
}

// replicas is the count the API server defaults a nil replicas to.
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

func (m *manifests) workload(name string) (workload, bool) {
	for _, w := range m.workloads() {
		if w.name == name {
			return w, true
		}
	}
	return workload{}, false
}

func (m *manifests) configMap(name string) *corev1.ConfigMap {
	for _, c := range m.ConfigMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.Services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (m *manifests) hpa(name string) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range m.HPAs {
		if h.Spec.ScaleTargetRef.Name == name {
			return h
		}
	}
	return nil
}

var (
	renderMu    sync.Mutex
	renderCache = map[string]*manifests{}
)

// mustRender renders dir once per test binary and fails the test if it
// does not render or decode.
func mustRender(t testing.TB, dir string) *manifests {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if m, ok := renderCache[dir]; ok {
		return m
	}
	m, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	renderCache[dir] = m
	return m
}

// forEachOverlay runs f as a subtest for every overlay.
func forEachOverlay(t *testing.T, f func(t *testing.T, m *manifests)) {
	t.Helper()
	for _, dir := range overlays {
		t.Run(dir, func(t *testing.T) { f(t, mustRender(t, dir)) })
	}
}

func TestOverlaysRender(t *testing.T) {
	forEachOverlay(t, func(t *testing.T, m *manifests) {
		if len(m.workloads()) == 0 {
			t.Fatal("no workloads rendered")
		}
		for _, ns := range m.Namespaces {
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("Namespace %s does not enforce the restricted Pod Security Standard", ns.Name)
			}
		}
		for _, o := range m.objectsMeta() {
			if o.ns != namespace {
				t.Errorf("%s is in namespace %q, want %q", o.what, o.ns, namespace)
			}
		}
	})
}

type objectMeta struct{ what, ns string }

// objectsMeta lists the namespaced objects with their namespaces.
func (m *manifests) objectsMeta() []objectMeta {
	var out []objectMeta
	add := func(kind string, o metav1.Object) {
		out = append(out, objectMeta{what: kind + " " + o.GetName(), ns: o.GetNamespace()})
	}
	for _, o := range m.ServiceAccounts {
		add("ServiceAccount", o)
	}
	for _, o := range m.ConfigMaps {
		add("ConfigMap", o)
	}
	for _, o := range m.Services {
		add("Service", o)
	}
	for _, o := range m.PVCs {
		add("PersistentVolumeClaim", o)
	}
	for _, o := range m.Deployments {
		add("Deployment", o)
	}
	for _, o := range m.StatefulSets {
		add("StatefulSet", o)
	}
	for _, o := range m.PDBs {
		add("PodDisruptionBudget", o)
	}
	for _, o := range m.NetworkPolicies {
		add("NetworkPolicy", o)
	}
	for _, o := range m.HPAs {
		add("HorizontalPodAutoscaler", o)
	}
	return out
}

// TestRenderRejectsTypos shows that a misspelt field fails the render with
// an error that names the object and the field, instead of being dropped
// silently by the API server's decoder.
func TestRenderRejectsTypos(t *testing.T) {
	base, err := filepath.Abs("base")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		files    map[string]string
		wantErrs []string
	}{
		{
			name: "patch with a misspelt probe field",
			files: map[string]string{"kustomization.yaml": `
resources: [BASE]
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: orchestrator
      spec:
        template:
          spec:
            containers:
              - name: orchestrator
                readinessProbe:
                  grcp:
                    port: 7701
`},
			wantErrs: []string{"Deployment orchestrator", `unknown field "spec.template.spec.containers[0].readinessProbe.grcp"`},
		},
		{
			name: "resource with a misspelt spec field",
			files: map[string]string{
				"kustomization.yaml": "resources: [BASE, extra.yaml]\n",
				"extra.yaml": `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: extra
spec:
  maxUnavailable: 1
  selectr:
    matchLabels: {app: extra}
`},
			wantErrs: []string{"PodDisruptionBudget extra", `unknown field "spec.selectr"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rel, err := filepath.Rel(dir, base)
			if err != nil {
				t.Fatal(err)
			}
			for name, content := range tt.files {
				content = strings.ReplaceAll(content, "BASE", filepath.ToSlash(rel))
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err = render(dir)
			if err == nil {
				t.Fatal("an overlay with a misspelt field rendered without error")
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}
