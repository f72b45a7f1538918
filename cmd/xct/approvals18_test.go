package main

import (
	"bytes"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Session 18 (attack18c): xct approvals shows what the approval binds,
// the digest of the entry the preview was made from (keyed when the
// preview was redacted), not the preview alone.
func TestPrintApprovalShowsWhatItBinds(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"sha256:" + strings.Repeat("ab", 32), "bound to: sha256:" + strings.Repeat("ab", 32) + ": the step acts only on the entry with this digest"},
		{"[REDACTED hmac-sha256:0123456789abcdef]", "bound to: [REDACTED hmac-sha256:0123456789abcdef] (the digest of a redacted preview's entry, keyed)"},
		{"absent", "bound to: no entry at the path (absent)"},
		{"", ""},
	} {
		var b bytes.Buffer
		printApproval(&b, &xctv1.Approval{RunId: "run-1", Step: 1, Proposal: &xctv1.NextStep{Tool: "fs.write"},
			Preview: &xctv1.Preview{Kind: "diff", Content: "+x\n", BaseDigest: tc.base}})
		out := b.String()
		if tc.want == "" && strings.Contains(out, "bound to") || tc.want != "" && !strings.Contains(out, tc.want) {
			t.Errorf("base %q: the output does not say %q:\n%s", tc.base, tc.want, out)
		}
	}
}
