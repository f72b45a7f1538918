package validator

import "testing"

func TestSubjectsCollide(t *testing.T) {
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
		if got := subjectsCollide(c.a, approvalsSubjects); got != c.want {
			t.Errorf("subjectsCollide(%q, %q) = %v, want %v", c.a, approvalsSubjects, got, c.want)
		}
	}
}
