package clients

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/testutil/proctest"
)

// proc is a long-running child process (the cluster, the Python agent)
// whose output lines can be waited for.
type proc = proctest.Proc

// startProc starts bin with args in dir (the current directory when
// empty). The caller stops it with Stop.
func startProc(name, dir, bin string, env []string, args ...string) (*proc, error) {
	return proctest.Start(name, dir, bin, env, args...)
}

// result is a finished command.
type result struct {
	code   int
	stdout string
	stderr string
}

// runCmd runs bin to its end (within timeout) and returns its exit code
// and output.
func runCmd(t *testing.T, dir string, env []string, timeout time.Duration, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s did not finish within %v:\n%s\n%s", bin, strings.Join(args, " "), timeout, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", bin, err)
	}
	return r
}
