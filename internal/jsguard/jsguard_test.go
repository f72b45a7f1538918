package jsguard

import "testing"

func TestSubjectsCollide(t *testing.T) {
	const approvals = "$KV.XCT_APPROVALS.>"
	for _, c := range []struct {
		a    string
		want bool
	}{
		{"$KV.XCT_APPROVALS.>", true},
		{"$KV.XCT_APPROVALS.run.step", true},
		{"$KV.*.run.step", true},
		{"$KV.>", true},
		{">", true},
		{"*.*.*", true},
		{"$KV.XCT_APPROVALS", false},
		{"$KV.XCT_TOOLS.>", false},
		{"$KV.XCT_APPROVALSX.a", false},
		{"*.*", false},
	} {
		if got := SubjectsCollide(c.a, approvals); got != c.want {
			t.Errorf("subjectsCollide(%q, %q) = %v, want %v", c.a, approvals, got, c.want)
		}
	}
}
