package validator_test

import (
	"context"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// BenchmarkValidate measures one in-process validation of an allowed
// fs.write proposal: catalog lookup, schema validation of a realistic
// schema (nested object, pattern, enum, array) and the default policy.
func BenchmarkValidate(b *testing.B) {
	s := newService(b, "")
	req := request(b, "fs.write", map[string]any{
		"path":    "reports/2026/summary.md",
		"content": "# Summary\n\nAll checks passed.\n",
		"mode":    "overwrite",
		"options": map[string]any{"mkdirs": true, "permissions": "0644"},
		"tags":    []any{"report", "weekly"},
	})
	ctx := context.Background()
	resp, err := s.Validate(ctx, req)
	if err != nil || resp.GetVerdict().GetDecision() != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW {
		b.Fatalf("Validate: %v, %v", resp, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Validate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
