package clients

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a long-running child process (the cluster, the Python agent)
// whose output lines can be waited for.
type proc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	grew  chan struct{}
	done  chan struct{}
	err   error
}

// startProc starts bin with args in dir (the current directory when
// empty). The caller stops it with stop.
func startProc(name, dir, bin string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(bin, args...), grew: make(chan struct{}), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = env
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	var readers sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				p.mu.Lock()
				p.lines = append(p.lines, sc.Text())
				close(p.grew)
				p.grew = make(chan struct{})
				p.mu.Unlock()
			}
		}()
	}
	go func() {
		readers.Wait()
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// matching returns the lines matching re so far.
func (p *proc) matching(re *regexp.Regexp) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// waitFor returns the submatches of the first line matching re.
func (p *proc) waitFor(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	deadline := time.After(timeout)
	seen := 0
	for {
		p.mu.Lock()
		lines, grew := p.lines, p.grew
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if m := re.FindStringSubmatch(lines[seen]); m != nil {
				return m, nil
			}
		}
		select {
		case <-grew:
		case <-p.done:
			return nil, fmt.Errorf("%s exited (%s) before printing %s:\n%s", p.name, p.cmd.ProcessState, re, p.output())
		case <-deadline:
			return nil, fmt.Errorf("%s did not print %s within %v:\n%s", p.name, re, timeout, p.output())
		}
	}
}

// stop sends SIGTERM and waits; a process that does not exit in time is
// killed.
func (p *proc) stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM", p.name)
	}
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
