package app

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/testutil"
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

// TestNATSCredentials: where each target's NATS user and password come
// from, and the configurations that cannot work.
func TestNATSCredentials(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	none := env(nil)
	var c Config
	if got, err := c.natsCredentials([]string{TargetExecutor}, none); err != nil || got != nil {
		t.Errorf("nothing given: %v %v, want an anonymous connection", got, err)
	}
	got, err := c.natsCredentials([]string{TargetExecutor}, env(map[string]string{EnvNATSPassword: "pw"}))
	if err != nil || got[TargetExecutor].User != "executor" || got[TargetExecutor].Password != "pw" {
		t.Errorf("%s: %v %v", EnvNATSPassword, got, err)
	}
	got, err = c.natsCredentials([]string{TargetTracer}, env(map[string]string{EnvNATSPassword: "pw", EnvNATSUser: "admin"}))
	if err != nil || got[TargetTracer].User != "admin" {
		t.Errorf("%s: %v %v", EnvNATSUser, got, err)
	}
	if _, err := c.natsCredentials(StartOrder, env(map[string]string{EnvNATSPassword: "pw"})); err == nil {
		t.Error("one password for four targets accepted")
	}
	c.NATSCredentialsFile = testutil.NATSCredentialsFile(t, "executor", "validator")
	got, err = c.natsCredentials([]string{TargetExecutor, TargetValidator}, none)
	if err != nil || got[TargetExecutor].Password != testutil.NATSUsers()["executor"] || got[TargetValidator].User != "validator" {
		t.Errorf("file: %v %v", got, err)
	}
	if _, err := c.natsCredentials(StartOrder, none); !errors.Is(err, natsauth.ErrNoUser) || !strings.Contains(err.Error(), "tracer") {
		t.Errorf("a target without a password in the file: %v", err)
	}
	c.NATSCredentialsFile = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := c.natsCredentials([]string{TargetExecutor}, none); err == nil {
		t.Error("a missing credentials file accepted")
	}
}
