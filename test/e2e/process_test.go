package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/internal/testutil/proctest"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// The browser tests share one Chromium, a tab each in a browser context
// of its own (browser.Main).
func TestMain(m *testing.M) {
	code := browser.Main(m)
	for _, d := range []string{binDir, lctlDir} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// binaries builds xct and nats-server once for the package.
func binaries(t testing.TB) (xct, natsServer string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "xct-e2e-bin-")
		if buildErr != nil {
			return
		}
		for _, pkg := range []string{"github.com/xct-dev/xct/cmd/xct", "github.com/nats-io/nats-server/v2"} {
			out, err := exec.Command("go", "build", "-o", binDir+"/", pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "xct"), filepath.Join(binDir, "nats-server")
}

// proc is a child process whose output lines can be waited for, stopped
// (and its output logged if the test failed) when the test ends.
type proc struct {
	*proctest.Proc
	cmd  *exec.Cmd
	done <-chan struct{}
}

func startProc(t testing.TB, name string, bin string, args ...string) *proc {
	t.Helper()
	pp, err := proctest.Start(name, "", bin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Proc: pp, cmd: pp.Cmd, done: pp.Done()}
	t.Cleanup(func() {
		_ = p.stop(t)
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string { return p.Output() }

// waitFor returns the first submatch of the first line matching re.
func (p *proc) waitFor(t testing.TB, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	m, err := p.WaitFor(re, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return m[len(m)-1]
}

// stop sends SIGTERM and waits; a process that does not exit in time is
// killed and reported.
func (p *proc) stop(t testing.TB) error {
	err := p.Stop()
	if errors.Is(err, proctest.ErrKilled) {
		t.Error(err)
	}
	return err
}

func (p *proc) wait(t testing.TB, timeout time.Duration) (int, string) {
	t.Helper()
	code, out, err := p.Wait(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}

// processDirs makes a workspace ("ws") and a scripts directory
// ("scripts") under base for a cluster of processes, with one scripted
// model's script in it, and returns both.
func processDirs(t *testing.T, base, name string, script []byte) (workspace, scripts string) {
	t.Helper()
	workspace, scripts = filepath.Join(base, "ws"), filepath.Join(base, "scripts")
	for _, d := range []string{workspace, scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(scripts, name), script, 0o600); err != nil {
		t.Fatal(err)
	}
	return workspace, scripts
}

// demoScript is the demo's scripted model (examples/demo/script.yaml).
func demoScript(t *testing.T) []byte {
	t.Helper()
	demo, err := os.ReadFile("../../examples/demo/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return demo
}

var listening = regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)$`)

func TestClusterAsSeparateProcesses(t *testing.T) {
	t.Parallel()
	xct, natsBin := binaries(t)
	base := t.TempDir()
	workspace, scripts := processDirs(t, base, "demo.yaml", demoScript(t))

	ns := startProc(t, "nats-server", natsBin, "-c", testutil.NATSServerConfigFile(t), "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(base, "nats"))
	natsURL := "nats://" + ns.waitFor(t, regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`), 30*time.Second)
	provisionNATS(t, xct, natsURL) // the admin makes the streams; the services only bind

	// Every process authenticates with the same tokens file; the
	// services call each other with the service token (plaintext on
	// loopback; TestClusterOverMTLS runs the same over mTLS).
	creds := grpcxtest.New(t)
	natsCreds := testutil.NATSCredentialsFile(t)
	serve := func(target string, extra ...string) (*proc, string) {
		args := append([]string{"serve", "--target", target, "--nats", natsURL, "--" + target + "-listen", "127.0.0.1:0",
			"--plaintext", "--auth-tokens", creds.Path, "--service-token", creds.Token(t, grpcxtest.Service), "--nats-credentials", natsCreds}, extra...)
		p := startProc(t, target, xct, args...)
		return p, p.waitFor(t, listening, 30*time.Second)
	}
	_, valKey, execTrust := verdictKeys(t)
	execP, execAddr := serve("executor", append([]string{"--workspace", workspace}, execTrust...)...)
	valP, valAddr := serve("validator", valKey...)
	trP, trAddr := serve("tracer", "--tracer-data", filepath.Join(base, "tracer"), "--tracer-http-listen", "127.0.0.1:0")
	orchP, orchAddr := serve("orchestrator", "--validator-addr", valAddr, "--executor-addr", execAddr, "--scripts-dir", scripts)

	// The client is a process too.
	runP := startProc(t, "xct run", xct, "run", "--addr", orchAddr, "--model", "scripted:demo.yaml", "--goal", "switch to green",
		"--credentials", creds.Path, "--as", "alice")
	code, out := runP.wait(t, 60*time.Second)
	if code != 0 {
		t.Fatalf("xct run exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"[step 3] error     PERMISSION_DENIED",
		"[step 5] error     SCHEMA_INVALID",
		"[step 6] error     GENERATION_FAILED",
		"[step 8] error     UNKNOWN_TOOL",
		"done: Deployment switched from blue to green in config/app.yaml",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("xct run output lacks %q:\n%s", want, out)
		}
	}
	runID := regexp.MustCompile(`run (run-\S+) started by alice`).FindStringSubmatch(out)
	if runID == nil {
		t.Fatalf("no run id in:\n%s", out)
	}
	cfg, err := os.ReadFile(filepath.Join(workspace, "config", "app.yaml"))
	if err != nil || !strings.Contains(string(cfg), "deployment: green") {
		t.Fatalf("config = %q, %v", cfg, err)
	}

	showP := startProc(t, "xct show", xct, "show", "--addr", orchAddr, runID[1], "--credentials", creds.Path, "--as", "dave")
	if code, out := showP.wait(t, 30*time.Second); code != 0 || !strings.Contains(out, "status     done") || !strings.Contains(out, "principal  alice") {
		t.Fatalf("xct show exited %d:\n%s", code, out)
	}

	// The tracer, in its own process, materialized the chain from NATS.
	tracer := lctlv1.NewTracerServiceClient(creds.Dial(t, trAddr, "dave"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var chain *lctlv1.GetChainResponse
	testutil.Eventually(t, 20*time.Second, func() error {
		var err error
		chain, err = tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: runID[1]})
		if err != nil {
			return err
		}
		if n := len(chain.GetEvents()); n == 0 || chain.GetEvents()[n-1].GetType() != lctl.TypeRunFinished {
			return fmt.Errorf("tracer has %d events, the run's end not yet", n)
		}
		return nil
	})
	var events []lctl.Event
	for _, e := range chain.GetEvents() {
		events = append(events, lctlpb.FromProto(e))
	}
	if len(events) != 37 {
		t.Fatalf("tracer has %d events, want 37", len(events))
	}
	if err := lctl.Verify(events); err != nil {
		t.Fatalf("hash chain across processes: %v", err)
	}

	// SIGTERM: every service shuts down cleanly, in reverse dependency order.
	for _, p := range []*proc{orchP, trP, valP, execP} {
		if err := p.stop(t); err != nil {
			t.Errorf("%s: exit after SIGTERM: %v\n%s", p.Name, err, p.output())
		}
	}
}

func TestProcessErrors(t *testing.T) {
	t.Parallel()
	xct, _ := binaries(t)
	creds := grpcxtest.New(t)
	badPolicy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("rules:\n  - id: r1\n    effect: alow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kf, _, _ := verdictKeys(t)
	trustFile := kf.Public
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"executor trusting no verdict key", []string{"serve", "--target", "executor", "--nats", "nats://127.0.0.1:1", "--executor-listen", "127.0.0.1:0", "--plaintext", "--workspace", t.TempDir()}, 1, "--verdict-trust is required"},
		{"validator without a verdict key", []string{"serve", "--target", "validator", "--nats", "nats://127.0.0.1:1", "--validator-listen", "127.0.0.1:0", "--plaintext"}, 1, "--verdict-key is required"},
		{"unknown target", []string{"serve", "--target", "planner"}, 2, `unknown target "planner"`},
		{"tracer data where no directory can be made", []string{"serve", "--target", "tracer", "--nats", "nats://127.0.0.1:1", "--tracer-listen", "127.0.0.1:0", "--tracer-http-listen", "", "--plaintext", "--tracer-data", "/proc/1/xct-tracer"}, 1, "xct: tracer: create data directory: mkdir /proc/1/xct-tracer"},
		{"NATS URL with a password", []string{"serve", "--target", "orchestrator", "--nats", "nats://orchestrator:pw-in-url@127.0.0.1:1", "--orchestrator-listen", "127.0.0.1:0", "--plaintext"}, 1, "--nats nats://xxxxx@127.0.0.1:1 carries credentials"},
		{"no target", []string{"serve"}, 2, "-target is required"},
		{"unknown flag", []string{"run", "--mdl", "x"}, 2, "flag provided but not defined: -mdl"},
		{"run without goal", []string{"run", "--model", "scripted:x.yaml"}, 2, "-goal and one of -model or -crew are required"},
		{"run with a model and a crew", []string{"run", "--goal", "g", "--model", "scripted:x.yaml", "--crew", "../../examples/crews/demo/crew.yaml"}, 2, "-goal and one of -model or -crew are required"},
		{"crew with an unknown agent type", []string{"run", "--goal", "g", "--crew", "../../internal/crew/testdata/invalid/unknown-type.yaml"}, 2, "unknown-type.yaml:"},
		{"crew with a cycle", []string{"run", "--goal", "g", "--crew", "../../internal/crew/testdata/invalid/cycle.yaml"}, 2, "cycle"},
		{"crew handing to an agent that does not exist", []string{"run", "--goal", "g", "--crew", "../../internal/crew/testdata/invalid/missing-agent.yaml"}, 2, "missing-agent.yaml:"},
		{"crew with confidence 1.7", []string{"run", "--goal", "g", "--crew", "../../internal/crew/testdata/invalid/confidence-above-one.yaml"}, 2, "1.7 is not in [0, 1]"},
		{"crew with a contract no one can satisfy", []string{"run", "--goal", "g", "--crew", "../../internal/crew/testdata/invalid/unsatisfiable-contract.yaml"}, 2, "unsatisfiable-contract.yaml:"},
		{"crew file missing", []string{"run", "--goal", "g", "--crew", "no-such-crew.yaml"}, 2, "crew file: open no-such-crew.yaml"},
		{"unknown command", []string{"deploy"}, 2, `unknown command "deploy"`},
		{"broken policy file", []string{"serve", "--target", "validator", "--nats", "nats://127.0.0.1:1", "--policy", badPolicy}, 1, badPolicy + ":3"},
		{"bad duration", []string{"serve", "--target", "orchestrator", "--call-timeout", "soon"}, 2, `-call-timeout soon is not a duration (a number with a unit: 300ms, 5s, 2m, 1h30m)`},
		{"policy lint ok", []string{"policy", "lint", "../../examples/policies/default.yaml"}, 0, "default.yaml: ok"},
		{"policy lint broken", []string{"policy", "lint", badPolicy}, 1, badPolicy + ":3"},
		{"policy check without chain", []string{"policy", "check", "../../examples/policies/default.yaml"}, 2, "--chain FILE|RUN_ID"},
		{"approve with flags after arguments, validator down", []string{"approve", "run-1", "2", "--as", "bob", "--credentials", creds.Path, "--validator-addr", "127.0.0.1:1"}, 1, "approve (validator 127.0.0.1:1): Unavailable"},
		{"as someone the credentials do not name", []string{"runs", "--as", "mallory", "--credentials", creds.Path, "--addr", "127.0.0.1:1"}, 1, `has no token for "mallory"`},
		{"serve plaintext on every address", []string{"serve", "--target", "executor", "--nats", "nats://127.0.0.1:1", "--plaintext", "--executor-listen", ":0", "--workspace", t.TempDir()}, 1, "--plaintext serves on loopback addresses only"},
		{"serve without transport security", []string{"serve", "--target", "executor", "--nats", "nats://127.0.0.1:1", "--executor-listen", "127.0.0.1:0", "--workspace", t.TempDir()}, 1, "no transport security"},
		{"dev certs without a directory", []string{"dev", "certs"}, 2, "usage: xct dev certs DIR"},
		{"deny without reason", []string{"deny", "run-1", "2"}, 2, "-reason is required"},
		{"orchestrator down", []string{"runs", "--addr", "127.0.0.1:1"}, 1, "list runs (orchestrator 127.0.0.1:1): Unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, "xct", xct, tc.args...)
			code, out := p.wait(t, 30*time.Second)
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d with %q; output:\n%s", code, tc.wantCode, tc.want, out)
			}
			if strings.Contains(out, "pw-in-url") {
				t.Fatalf("the output shows the password of the NATS URL:\n%s", out)
			}
		})
	}
	// NATS unreachable at start: the service does not exit; it waits,
	// saying for what, and stops cleanly when asked.
	t.Run("NATS unreachable at start", func(t *testing.T) {
		p := startProc(t, "xct", xct, "serve", "--target", "executor", "--nats", "nats://127.0.0.1:1", "--executor-listen", "127.0.0.1:0",
			"--plaintext", "--workspace", t.TempDir(), "--verdict-trust", trustFile)
		p.waitFor(t, regexp.MustCompile(`waiting for NATS.*nats://127\.0\.0\.1:1`), 30*time.Second)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, out := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM while waiting for NATS; output:\n%s", code, out)
		}
	})
}

// provisionNATS runs `xct nats provision` as the NATS admin against the
// server at url, as a deployment does before the services start.
func provisionNATS(t *testing.T, xct, url string) {
	t.Helper()
	p := startProc(t, "xct nats provision", xct, "nats", "provision", "--nats", url,
		"--nats-credentials", testutil.NATSCredentialsFile(t, natsauth.Admin))
	if code, out := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("xct nats provision exited %d:\n%s", code, out)
	}
}
