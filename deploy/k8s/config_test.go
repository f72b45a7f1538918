package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		if bytes.Contains(b[1], []byte("apiVersion: cert-manager.io/v1")) {
			if err := decodeCertificate(b[1]); err != nil {
				t.Errorf("docs/kubernetes.md: %v\n%s", err, b[1])
			}
			continue
		}
		if _, _, err := strictYAML.Decode(b[1], nil, nil); err != nil {
			t.Errorf("docs/kubernetes.md: %v\n%s", err, b[1])
		}
	}
	if n == 0 {
		t.Error("docs/kubernetes.md shows no Kubernetes object")
	}
}

// certificate is the part of cert-manager's Certificate (cert-manager.io/v1)
// that the docs use. cert-manager's types are a CRD, not in client-go's
// scheme, so the docs' example is decoded strictly into this instead: a
// misspelt or misplaced field fails the test.
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName  string `json:"secretName"`
		CommonName  string `json:"commonName,omitempty"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		URIs        []string `json:"uris,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		IssuerRef   struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

func decodeCertificate(data []byte) error {
	var c certificate
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return fmt.Errorf("cert-manager Certificate: %w", err)
	}
	switch {
	case c.Kind != "Certificate":
		return fmt.Errorf("cert-manager.io/v1 kind %q: only Certificate is checked", c.Kind)
	case c.Spec.SecretName == "", c.Spec.IssuerRef.Name == "":
		return errors.New("cert-manager Certificate: spec.secretName and spec.issuerRef.name are required")
	}
	for _, u := range c.Spec.Usages {
		if !slices.Contains([]string{"server auth", "client auth", "digital signature", "key encipherment"}, u) {
			return fmt.Errorf("cert-manager Certificate: unexpected usage %q", u)
		}
	}
	return nil
}
