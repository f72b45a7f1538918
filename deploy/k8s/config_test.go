package k8s

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

func readYAML(t *testing.T, file string) any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// TestPolicyIsTheDefault keeps base's policy ConfigMap what its comment
// says: the validator's built-in default policy, as examples/ ships it.
// Operators change the policy in their overlay (docs/kubernetes.md).
func TestPolicyIsTheDefault(t *testing.T) {
	got := readYAML(t, "base/config/policy.yaml")
	want := readYAML(t, filepath.Join(repoRoot, "examples/policies/default.yaml"))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("base/config/policy.yaml differs from examples/policies/default.yaml:\n got %v\nwant %v", got, want)
	}
}

// TestToolsConfigServesOnlyFSTools checks that the shipped tools
// configuration enables nothing beyond the fs tools (every section is
// opt-in), matching the executor's empty egress policy.
func TestToolsConfigServesOnlyFSTools(t *testing.T) {
	v := readYAML(t, "base/config/tools.yaml")
	if v == nil {
		return
	}
	sections, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("base/config/tools.yaml is not a mapping: %v", v)
	}
	for _, k := range slices.Sorted(maps.Keys(sections)) {
		t.Errorf("base/config/tools.yaml enables %q; the executor's egress policy allows nothing for it", k)
	}
}

// TestDocsManifests decodes, strictly, every Kubernetes object that
// docs/kubernetes.md shows, so the examples stay valid.
func TestDocsManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(data, -1)
	n := 0
	for _, b := range blocks {
		if !bytes.Contains(b[1], []byte("apiVersion:")) {
			continue // a kustomization fragment
		}
		n++
		if _, _, err := strictYAML.Decode(b[1], nil, nil); err != nil {
			t.Errorf("docs/kubernetes.md: %v\n%s", err, b[1])
		}
	}
	if n == 0 {
		t.Error("docs/kubernetes.md shows no Kubernetes object")
	}
}
