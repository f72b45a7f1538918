package main

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
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
	t.Parallel()
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

// TestDebugStopsOnSIGTERM runs `lctl debug` as a process: it serves until
// SIGTERM, then shuts down gracefully and exits 0.
func TestDebugStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "debug", "--addr", "127.0.0.1:0", "--open=false", "../../lctl/cli/testdata/chains/review-v1.lctl.json")
	cmd.Env = append(os.Environ(), "LCTL_TEST_AS_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "Starting LCTL Debugger at "); ok {
				urls <- u
			}
		}
	}()
	var url string
	select {
	case url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatalf("no URL printed; stderr: %s", stderr.String())
	}
	resp, err := http.Get(url + "api/info") //nolint:noctx // a test probe
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("api/info: %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lctl debug did not stop on SIGTERM")
	}
}

// lctl reaches NATS as a client only (tail, through internal/lctllive):
// linking the NATS server's packages too ran their initialisation, about
// a millisecond of serial start-up, before every command (docs/performance.md,
// "Session 12 (lctl12)").
func TestNATSServerNotLinked(t *testing.T) {
	t.Parallel()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	client := false
	for _, d := range info.Deps {
		if strings.HasPrefix(d.Path, "github.com/nats-io/nats-server") {
			t.Errorf("lctl links %s %s", d.Path, d.Version)
		}
		client = client || d.Path == "github.com/nats-io/nats.go"
	}
	if !client {
		t.Error("lctl does not link the NATS client: the check above would hold for any binary without NATS")
	}
}
