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

// Session 20 (crew20): an approval of a crew run's step shows the member
// that proposed it and the hand-overs that gave it control, each name
// printed as text (a terminal control in a crew file's name is shown, not
// obeyed); an approval outside a crew shows neither line.
func TestPrintApprovalShowsTheCrewMember(t *testing.T) {
	var b bytes.Buffer
	printApproval(&b, &xctv1.Approval{RunId: "run-1", Step: 4, RequestedBy: "alice", Proposal: &xctv1.NextStep{Tool: "http.request"},
		Crew: "audit-and-post", Agent: "poster", HandoffPath: []string{"auditor", "poster"}})
	out := b.String()
	for _, want := range []string{"crew member   poster (crew audit-and-post)\n", "handed over   auditor -> poster\n", "requested by  alice"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printApproval(&b, &xctv1.Approval{RunId: "run-1", Step: 1, Proposal: &xctv1.NextStep{Tool: "fs.write"},
		Crew: "c", Agent: "po\x1b[2Kster", HandoffPath: []string{"a\rb", "po\x1b[2Kster"}})
	if out := b.String(); strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("a control character reached the terminal:\n%q", out)
	}
	b.Reset()
	printApproval(&b, &xctv1.Approval{RunId: "run-1", Step: 1, Proposal: &xctv1.NextStep{Tool: "fs.write"}})
	if out := b.String(); strings.Contains(out, "crew member") || strings.Contains(out, "handed over") {
		t.Errorf("an approval outside a crew shows crew lines:\n%s", out)
	}
}
