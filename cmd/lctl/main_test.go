package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs the test binary as lctl when asked, so the tests below can
// check the process: arguments, output and exit codes.
func TestMain(m *testing.M) {
	if os.Getenv("LCTL_TEST_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func lctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LCTL_TEST_AS_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

func TestProcessExitCodes(t *testing.T) {
	const chains = "../../lctl/cli/testdata/chains/"
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"verify", chains + "review-v1.lctl.json"}, 0, "Chain verified."},
		{[]string{"verify", chains + "bad/edited.lctl.json"}, 1, "FAILED: event 9 (fact_added by security-reviewer) was edited"},
		{[]string{"replay", chains + "bad/truncated.lctl.json"}, 2, ""},
		{[]string{"diff", chains + "review-v1.lctl.json", chains + "review-v2.lctl.json"}, 1, "Events diverged at seq 9:"},
		{[]string{"help"}, 0, "Usage:"},
		{[]string{}, 2, ""},
	}
	for _, tt := range tests {
		code, out, errOut := lctl(t, tt.args...)
		if code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("lctl %s: exit %d, want %d\n%s%s", strings.Join(tt.args, " "), code, tt.code, out, errOut)
		}
	}
}
