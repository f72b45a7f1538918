package app

import (
	"slices"
	"testing"
)

func TestParseTargets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"all", StartOrder, false},
		{"", StartOrder, false},
		// Start order does not depend on the order given.
		{"orchestrator,executor", []string{TargetExecutor, TargetOrchestrator}, false},
		{" tracer , validator ", []string{TargetValidator, TargetTracer}, false},
		{"executor,planner", nil, true},
	}
	for _, tc := range tests {
		got, err := ParseTargets(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTargets(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
