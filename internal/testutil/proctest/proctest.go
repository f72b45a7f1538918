// Package proctest runs child processes for tests — the xct binary, a NATS
// server, clients in other languages — and lets a test wait for a line of
// their output instead of sleeping.
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopTimeout is how long Stop waits after SIGTERM before it kills.
const StopTimeout = 30 * time.Second

// ErrKilled means a process did not stop after SIGTERM and was killed.
var ErrKilled = errors.New("killed")

// Proc is a running child process whose stdout and stderr lines are
// collected as they come.
type Proc struct {
	// Name names the process in messages.
	Name string
	// Cmd is the command, e.g. to send it a signal.
	Cmd *exec.Cmd

	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed and replaced when a line arrives
	done  chan struct{} // closed when the process exited
	err   error         // Cmd.Wait's result, set before done is closed
}

// Start starts bin with args in dir ("": the current directory) with env
// (nil: this process's environment).
func Start(name, dir, bin string, env []string, args ...string) (*Proc, error) {
	// The tests name the binaries they built or found; no shell is involved.
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), grew: make(chan struct{}), done: make(chan struct{})} //nolint:gosec,noctx // G204: argv only, from the test; its life is ended by Stop, not a context
	p.Cmd.Dir, p.Cmd.Env = dir, env
	stdout, err := p.Cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.Cmd.Start(); err != nil {
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
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output is every line printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Matching returns the lines printed so far that match re.
func (p *Proc) Matching(re *regexp.Regexp) []string {
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

// WaitFor returns the submatches of the first line matching re, waiting
// for it until timeout; an exit before it is an error.
func (p *Proc) WaitFor(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
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
			return nil, fmt.Errorf("%s exited (%s) before printing %s:\n%s", p.Name, p.Cmd.ProcessState, re, p.Output())
		case <-deadline:
			return nil, fmt.Errorf("%s did not print %s within %v:\n%s", p.Name, re, timeout, p.Output())
		}
	}
}

// Wait waits until the process exits, at most timeout, and returns its
// exit code and output.
func (p *Proc) Wait(timeout time.Duration) (int, string, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return 0, p.Output(), fmt.Errorf("%s still running after %v:\n%s", p.Name, timeout, p.Output())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		code = ee.ExitCode()
	}
	return code, p.Output(), nil
}

// Stop sends SIGTERM and waits for the exit (returning Cmd.Wait's error);
// a process still running after StopTimeout is killed and reported.
func (p *Proc) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(StopTimeout):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%w: %s did not stop within %v of SIGTERM", ErrKilled, p.Name, StopTimeout)
	}
}

// Build builds the commands of the Go packages pkgs into dir (go build -o
// dir/), for tests that run them as child processes.
func Build(dir string, pkgs ...string) error {
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "build", "-o", dir+"/", pkg).CombinedOutput() //nolint:gosec,noctx // G204: package paths from the test
		if err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}
