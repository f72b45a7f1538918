// Package clients tests XCT's clients in other languages against a live
// cluster: the TypeScript and Python examples (examples/clients) run as
// processes with node and Debian's python3, and a Python ToolService and
// ProposerService govern a run. The cluster is `xct dev` as a process, on
// loopback ports, the same as `make run` starts.
//
// The tests need node with the example's npm packages and Debian's python3
// with grpcio, protobuf and yaml (`make clients-deps` installs them). Where
// they are missing the tests skip, saying what is missing, unless
// XCT_REQUIRE_CLIENTS=1 (set by `make test`) makes that a failure.
package clients

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/lctl"
)

// systemPython is Debian's interpreter: the one python3-grpcio and
// python3-protobuf install their modules for.
const systemPython = "/usr/bin/python3"

// python is the interpreter of a virtual environment (over Debian's site
// packages) with the packaged client (gen/python) installed, as a user
// installs it (packages_test.go); the Python examples run on it.
var python string

var (
	root     string // the repository
	tsDir    string // examples/clients/ts
	pyDir    string // examples/clients/python
	setup    sync.Once
	shared   *cluster
	setupErr error
)

func TestMain(m *testing.M) {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tsDir = filepath.Join(root, "examples", "clients", "ts")
	pyDir = filepath.Join(root, "examples", "clients", "python")
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if venvDir != "" {
		_ = os.RemoveAll(venvDir)
	}
	os.Exit(code)
}

// missing lists what the client tests need and this machine lacks.
func missing() []string {
	var out []string
	if _, err := exec.LookPath("node"); err != nil {
		out = append(out, "node (Node.js)")
	}
	if _, err := os.Stat(filepath.Join(tsDir, "node_modules", ".package-lock.json")); err != nil {
		out = append(out, "the npm packages of examples/clients/ts (npm ci there)")
	}
	if err := exec.Command(systemPython, "-c", "import grpc, google.protobuf, yaml, venv, setuptools").Run(); err != nil {
		out = append(out, "Debian's python3 with python3-grpcio, python3-protobuf, python3-yaml, python3-venv and python3-setuptools")
	}
	return out
}

// needCluster skips the test when the clients cannot run here (fails it
// under XCT_REQUIRE_CLIENTS=1), and returns the package's cluster, started
// on first use.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if m := missing(); len(m) > 0 {
		msg := "client tests need " + strings.Join(m, "; ") + " (make clients-deps installs them)"
		if os.Getenv("XCT_REQUIRE_CLIENTS") == "1" {
			t.Fatal(msg + "; XCT_REQUIRE_CLIENTS=1 requires them")
		}
		t.Skip(msg)
	}
	setup.Do(func() {
		if python, setupErr = installPythonClient(); setupErr == nil {
			shared, setupErr = startCluster(true, "")
		}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

// cluster is `xct dev` with the Python agent as its tool server and
// allowed proposer.
type cluster struct {
	dir          string
	xct          *proc
	agent        *proc
	agentAddr    string
	orchestrator string
	validator    string
	tracer       string
	// credentials is the dev credentials file: a token per principal.
	credentials string
}

// The scripted model of the client examples: a change under config/ that
// the config-approval policy sends to a human, then a read.
const clientsScript = `name: client-agent
steps:
  - next_step:
      tool: fs.write
      arguments: {path: config/app.yaml, content: "deployment: green\n"}
      goal: Switch the deployment to green
  - next_step:
      tool: fs.read
      arguments: {path: config/app.yaml}
      goal: Check the change
  - done: true
    message: switched to green
`

var (
	listeningRe = regexp.MustCompile(`^listening on (127\.0\.0\.1:\d+)$`)
	addrRe      = regexp.MustCompile(`^\s+(orchestrator|validator|tracer)\s+(127\.0\.0\.1:\d+)$`)
	servingRe   = regexp.MustCompile(`^serving`)
)

// childEnv is this process's environment without XCT_* variables, so a
// developer's settings (XCT_TOKEN, XCT_ADDR, ...) do not leak into the
// processes under test, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XCT_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

var (
	xctBuild    sync.Once
	binDir      string
	xctBuildErr error
)

// xctBinary builds cmd/xct once for the package (TestMain removes it).
func xctBinary() (string, error) {
	xctBuild.Do(func() {
		if binDir, xctBuildErr = os.MkdirTemp("", "xct-clients-bin-"); xctBuildErr != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", binDir+"/", filepath.Join(root, "cmd", "xct")).CombinedOutput(); err != nil {
			xctBuildErr = fmt.Errorf("go build xct: %w\n%s", err, out)
		}
	})
	return filepath.Join(binDir, "xct"), xctBuildErr
}

// startCluster starts `xct dev` on loopback ports with the config-approval
// policy and the clients' script. withAgent starts the Python agent first
// and makes it the cluster's tool server and allowed proposer; tlsDir (from
// `xct dev certs`) serves TLS with the orchestrator's certificate instead
// of plaintext.
func startCluster(withAgent bool, tlsDir string) (c *cluster, err error) {
	dir, err := os.MkdirTemp("", "xct-clients-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	xct, err := xctBinary()
	if err != nil {
		return c, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "scripts"), 0o750); err != nil {
		return c, err
	}
	if err := os.WriteFile(filepath.Join(data, "scripts", "clients.yaml"), []byte(clientsScript), 0o600); err != nil {
		return c, err
	}
	args := []string{"dev",
		"--data-dir", data, "--nats-port", "-1",
		"--orchestrator-listen", "127.0.0.1:0", "--validator-listen", "127.0.0.1:0",
		"--executor-listen", "127.0.0.1:0", "--tracer-listen", "127.0.0.1:0", "--tracer-http-listen", "127.0.0.1:0",
		"--policy", filepath.Join(root, "examples", "policies", "config-approval.yaml"),
	}
	if withAgent {
		// The agent first: the executor asks its tool servers for their
		// tools when it starts.
		if c.agent, err = startProc("agent.py", pyDir, python, childEnv(), "agent.py", "--listen", "127.0.0.1:0"); err != nil {
			return c, err
		}
		m, err := c.agent.WaitFor(listeningRe, 30*time.Second)
		if err != nil {
			return c, err
		}
		c.agentAddr = m[1]
		tools := filepath.Join(dir, "tools.yaml")
		if err := os.WriteFile(tools, []byte("servers:\n  - name: inventory\n    address: "+c.agentAddr+"\n"), 0o600); err != nil {
			return c, err
		}
		args = append(args, "--tools-config", tools, "--allow-grpc-proposer", c.agentAddr)
	}
	if tlsDir != "" {
		args = append(args, "--tls-cert", filepath.Join(tlsDir, "orchestrator.crt"),
			"--tls-key", filepath.Join(tlsDir, "orchestrator.key"), "--tls-ca", filepath.Join(tlsDir, "ca.crt"))
	}
	if c.xct, err = startProc("xct dev", dir, xct, childEnv(), args...); err != nil {
		return c, err
	}
	if _, err := c.xct.WaitFor(servingRe, 60*time.Second); err != nil {
		return c, err
	}
	for _, l := range c.xct.Matching(addrRe) {
		m := addrRe.FindStringSubmatch(l)
		switch m[1] {
		case "orchestrator":
			c.orchestrator = m[2]
		case "validator":
			c.validator = m[2]
		case "tracer":
			c.tracer = m[2]
		}
	}
	if c.orchestrator == "" || c.validator == "" || c.tracer == "" {
		return c, fmt.Errorf("xct dev did not print its addresses:\n%s", c.xct.Output())
	}
	// Authentication is always on: xct dev writes a token per principal.
	c.credentials = filepath.Join(data, "dev", "credentials.yaml")
	if !fileExists(c.credentials) {
		return c, fmt.Errorf("xct dev wrote no %s:\n%s", c.credentials, c.xct.Output())
	}
	return c, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (c *cluster) stop() {
	for _, p := range []*proc{c.xct, c.agent} {
		if p != nil {
			if err := p.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n%s\n", p.Name, err, p.Output())
			}
		}
	}
	_ = os.RemoveAll(c.dir)
}

// clientArgs are the flags both examples share: where the cluster is, who
// starts the run, who approves, the credentials file.
func (c *cluster) clientArgs(model, goal, as, approver, out string) []string {
	return []string{
		"--addr", c.orchestrator, "--validator-addr", c.validator, "--tracer-addr", c.tracer,
		"--model", model, "--goal", goal, "--as", as, "--approver", approver, "--out", out, "--timeout", "90",
		"--credentials", c.credentials,
	}
}

// orchestratorClient is a Go client of the cluster calling as principal.
func (c *cluster) orchestratorClient(t *testing.T, principal string) (xctv1.OrchestratorServiceClient, func(context.Context) context.Context) {
	t.Helper()
	conn, err := grpcx.Dial(c.orchestrator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	tok, err := auth.ClientToken("", principal, c.credentials)
	if err != nil {
		t.Fatal(err)
	}
	withAuth := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	return xctv1.NewOrchestratorServiceClient(conn), withAuth
}

var (
	startedRe = regexp.MustCompile(`(?m)^run (\S+) started by (\S+)`)
)

// runID is the run an example started, from its first line.
func runID(t *testing.T, out string) string {
	t.Helper()
	m := startedRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no 'run ... started' line in:\n%s", out)
	}
	return m[1]
}

// exportedChain reads and checks a chain file an example exported: it
// decodes as LCTL, its hash chain verifies, and it is the run's chain.
func exportedChain(t *testing.T, path, id string) *lctl.File {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the exported chain: %v", err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(data), lctl.FormatJSON)
	if err != nil {
		t.Fatalf("the exported chain does not decode: %v", err)
	}
	if err := lctl.Verify(f.Events); err != nil {
		t.Fatalf("the exported chain does not verify: %v", err)
	}
	if f.Chain.ID != id || len(f.Events) == 0 {
		t.Fatalf("exported chain %q with %d events, want run %s", f.Chain.ID, len(f.Events), id)
	}
	return f
}

// events returns the events of type typ.
func events(f *lctl.File, typ string) []lctl.Event {
	var out []lctl.Event
	for _, e := range f.Events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// checkApprovedRun checks the chain of a run alice started and bob
// approved: who started it, who was asked, who decided, and that it ended
// done.
func checkApprovedRun(t *testing.T, f *lctl.File, wantTool string) {
	t.Helper()
	started := events(f, lctl.TypeRunStarted)
	if len(started) != 1 || started[0].Data["principal"] != "alice" || fmt.Sprint(started[0].Data["roles"]) != "[submitter]" {
		t.Errorf("run_started = %v, want one, by the authenticated alice with her role", started)
	}
	requested := events(f, "approval_requested")
	if len(requested) != 1 || requested[0].Data["requested_by"] != "alice" || requested[0].Data["tool"] != wantTool {
		t.Errorf("approval_requested = %v, want one for %s requested by alice", requested, wantTool)
	}
	decided := events(f, "approval_decided")
	if len(decided) != 1 || decided[0].Agent != "bob" || decided[0].Data["by"] != "bob" || decided[0].Data["decision"] != "approved" {
		t.Errorf("approval_decided = %v, want one, approved by bob", decided)
	}
	finished := events(f, lctl.TypeRunFinished)
	if len(finished) != 1 || finished[0].Data["status"] != "done" {
		t.Errorf("run_finished = %v, want status done", finished)
	}
	// The approved step ran after the decision, exactly once.
	var calls int
	for _, e := range events(f, lctl.TypeToolCall) {
		if e.Data["tool"] == wantTool {
			calls++
			if len(decided) == 1 && e.Seq < decided[0].Seq {
				t.Errorf("%s ran at seq %d, before its approval at seq %d", wantTool, e.Seq, decided[0].Seq)
			}
		}
	}
	if calls != 1 {
		t.Errorf("%s ran %d times, want once", wantTool, calls)
	}
}

// exampleOutput checks what an example printed for a run alice started and
// bob approved, and returns the run's id.
func exampleOutput(t *testing.T, r result, out string) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	id := runID(t, r.stdout)
	for _, want := range []string{
		"run " + id + " started by alice",
		"approval_requested by orchestrator",
		"approved step",
		"as bob",
		"approval_decided by bob",
		"run " + id + " ended DONE",
		"exported ",
		" to " + out,
		"chain verified: true",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	return id
}

// buildTS compiles the TypeScript example together with gen/ts, once.
var (
	tsBuild    sync.Once
	tsBuildErr error
)

func buildTS(t *testing.T) string {
	t.Helper()
	tsBuild.Do(func() {
		cmd := exec.Command(filepath.Join(tsDir, "node_modules", ".bin", "tsc"), "-p", ".")
		cmd.Dir = tsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			tsBuildErr = fmt.Errorf("tsc (the example against gen/ts): %w\n%s", err, out)
		}
	})
	if tsBuildErr != nil {
		t.Fatal(tsBuildErr)
	}
	return filepath.Join(tsDir, "dist", "examples", "clients", "ts", "src", "main.js")
}

func TestTypeScriptClient(t *testing.T) {
	c := needCluster(t)
	main := buildTS(t)
	out := filepath.Join(t.TempDir(), "ts.lctl.json")
	r := runCmd(t, tsDir, childEnv(), 120*time.Second, "node",
		append([]string{main}, c.clientArgs("scripted:clients.yaml", "switch to green from TypeScript", "alice", "bob", out)...)...)
	id := exampleOutput(t, r, out)
	f := exportedChain(t, out, id)
	checkApprovedRun(t, f, "fs.write")
	if got := events(f, lctl.TypeRunStarted)[0].Data["labels"]; fmt.Sprint(got) != "map[client:typescript]" {
		t.Errorf("labels = %v", got)
	}
}

func TestPythonClient(t *testing.T) {
	c := needCluster(t)
	out := filepath.Join(t.TempDir(), "py.lctl.json")
	r := runCmd(t, pyDir, childEnv(), 120*time.Second, python,
		append([]string{"run_and_approve.py"}, c.clientArgs("scripted:clients.yaml", "switch to green from Python", "alice", "bob", out)...)...)
	id := exampleOutput(t, r, out)
	f := exportedChain(t, out, id)
	checkApprovedRun(t, f, "fs.write")
	if got := events(f, lctl.TypeRunStarted)[0].Data["labels"]; fmt.Sprint(got) != "map[client:python]" {
		t.Errorf("labels = %v", got)
	}
}

// The examples as the callers a security review asks about: no token, a
// token the cluster does not know, principals without the role, and one
// who would approve their own run. Each is refused with the right gRPC
// code, the example says so and exits 1, and nothing is done: no run
// starts, or the run it started is cancelled before its step runs.
func TestClientsRefused(t *testing.T) {
	c := needCluster(t)
	tsMain := buildTS(t)
	orch, withAuth := c.orchestratorClient(t, "admin")
	// Each call gets its own deadline: the ten cases' client processes
	// together took 74 s at load ~38, past a deadline shared by them all.
	call := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return withAuth(ctx)
	}
	runs := func() int {
		list, err := orch.ListRuns(call(), &xctv1.ListRunsRequest{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.GetRuns())
	}
	for _, client := range []struct {
		name string
		dir  string
		cmd  []string
	}{
		{"typescript", tsDir, []string{"node", tsMain}},
		{"python", pyDir, []string{python, "run_and_approve.py"}},
	} {
		for _, tc := range []struct {
			name          string
			env           []string
			as, approver  string
			credentials   string // instead of the cluster's
			want          []string
			startsThenFix bool // a run starts and must end cancelled
		}{
			{name: "no token", as: "alice", approver: "bob", credentials: "/nonexistent/credentials.yaml",
				want: []string{"UNAUTHENTICATED"}},
			{name: "unknown token", env: []string{"XCT_TOKEN=not-a-token-of-this-cluster"}, as: "alice", approver: "bob",
				want: []string{"UNAUTHENTICATED"}},
			{name: "an auditor starts a run", as: "dave", approver: "bob",
				want: []string{"PERMISSION_DENIED"}},
			{name: "an operator approves", as: "alice", approver: "carol",
				want: []string{"PERMISSION_DENIED"}, startsThenFix: true},
			// admin holds every role, so only the rule against deciding
			// one's own run can refuse it.
			{name: "approving one's own run", as: "admin", approver: "admin",
				want: []string{"PERMISSION_DENIED", "cannot decide its approvals"}, startsThenFix: true},
		} {
			t.Run(client.name+"/"+tc.name, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "chain.json")
				args := append(client.cmd[1:], c.clientArgs("scripted:clients.yaml", "refused: "+tc.name, tc.as, tc.approver, out)...)
				if tc.credentials != "" {
					args = append(args, "--credentials", tc.credentials)
				}
				before := runs()
				r := runCmd(t, client.dir, childEnv(tc.env...), 120*time.Second, client.cmd[0], args...)
				if r.code != 1 {
					t.Fatalf("exit %d, want 1:\n%s\n%s", r.code, r.stdout, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
					}
				}
				if fileExists(out) {
					t.Errorf("a refused run's chain was exported")
				}
				if !tc.startsThenFix {
					if startedRe.MatchString(r.stdout) || runs() != before {
						t.Fatalf("a run started:\n%s", r.stdout)
					}
					return
				}
				id := runID(t, r.stdout)
				got, err := orch.GetRun(call(), &xctv1.GetRunRequest{RunId: id})
				if err != nil {
					t.Fatal(err)
				}
				if got.GetRun().GetStatus() != xctv1.RunStatus_RUN_STATUS_CANCELLED {
					t.Errorf("run %s is %s, want cancelled", id, got.GetRun().GetStatus())
				}
				for _, st := range got.GetRun().GetSteps() {
					if st.GetState() == xctv1.StepState_STEP_STATE_SUCCEEDED {
						t.Errorf("step %d of the refused run ran", st.GetNumber())
					}
				}
			})
		}
	}
}

// The examples over TLS: `xct dev certs` makes a CA and certificates, the
// cluster serves TLS and requires a client certificate from that CA, and
// the examples bring it, with the bearer token saying who they are.
// Without a client certificate the handshake fails.
func TestClientsOverTLS(t *testing.T) {
	needCluster(t)
	tsMain := buildTS(t)
	xct, err := xctBinary()
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(t.TempDir(), "certs")
	if r := runCmd(t, root, childEnv(), 60*time.Second, xct, "dev", "certs", certs); r.code != 0 {
		t.Fatalf("xct dev certs: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	c, err := startCluster(false, certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	ca, cert, key := filepath.Join(certs, "ca.crt"), filepath.Join(certs, "client.crt"), filepath.Join(certs, "client.key")
	for _, client := range []struct {
		name string
		dir  string
		cmd  []string
	}{
		{"typescript", tsDir, []string{"node", tsMain}},
		{"python", pyDir, []string{python, "run_and_approve.py"}},
	} {
		t.Run(client.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tls.lctl.json")
			args := append(client.cmd[1:], c.clientArgs("scripted:clients.yaml", "over TLS", "alice", "bob", out)...)
			r := runCmd(t, client.dir, childEnv(), 120*time.Second, client.cmd[0],
				append(args, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key)...)
			id := exampleOutput(t, r, out)
			checkApprovedRun(t, exportedChain(t, out, id), "fs.write")

			// The server's TLS alert, as each runtime reports it (grpcio:
			// UNAVAILABLE; Connect: INTERNAL), names what is missing.
			// The packaged Python client says it in words (xct_client.explain).
			want := "certificate required"
			if client.name == "python" {
				want = "the server requires a client certificate"
			}
			r = runCmd(t, client.dir, childEnv(), 120*time.Second, client.cmd[0], append(args, "--tls-ca", ca)...)
			if r.code != 1 || !strings.Contains(r.stderr, want) || startedRe.MatchString(r.stdout) {
				t.Errorf("without a client certificate: exit %d, want 1 and %q before any run:\n%s\n%s", r.code, want, r.stdout, r.stderr)
			}
		})
	}
}

var invokeRe = regexp.MustCompile(`^invoke (\S+) key=(\S+)`)

// invocations returns what the Python tool server did, as "tool key".
func invocations(c *cluster) map[string]string {
	out := map[string]string{}
	for _, l := range c.agent.Matching(invokeRe) {
		m := invokeRe.FindStringSubmatch(l)
		out[m[2]] = m[1]
	}
	return out
}

// The Python agent proposes, the Python tool server executes, XCT governs:
// the agent's first, schema-invalid proposal is refused before any tool
// runs; the irreversible reservation waits for bob, whom the Python client
// plays; the chain records all of it.
func TestPythonAgentAndToolServerGovernedByXCT(t *testing.T) {
	c := needCluster(t)
	out := filepath.Join(t.TempDir(), "agent.lctl.json")
	r := runCmd(t, pyDir, childEnv(), 120*time.Second, python,
		append([]string{"run_and_approve.py"}, c.clientArgs("grpc:"+c.agentAddr, "reserve 2 of GREEN-1", "alice", "bob", out)...)...)
	id := exampleOutput(t, r, out)
	if !regexp.MustCompile(`ended DONE: reserved 2 of GREEN-1 as R-\d+`).MatchString(r.stdout) {
		t.Errorf("the agent's done message is missing:\n%s", r.stdout)
	}
	f := exportedChain(t, out, id)
	checkApprovedRun(t, f, "inventory.reserve")

	// Step 1: the slip, denied by the validator's schema check.
	verdicts := map[float64]string{}
	for _, e := range events(f, lctl.TypeVerdict) {
		if _, seen := verdicts[e.Data["step"].(float64)]; !seen {
			verdicts[e.Data["step"].(float64)] = fmt.Sprint(e.Data["decision"], " ", e.Data["code"])
		}
	}
	if verdicts[1] != "deny SCHEMA_INVALID" || verdicts[2] != "allow <nil>" || !strings.HasPrefix(verdicts[3], "needs_approval") {
		t.Errorf("first verdict per step = %v", verdicts)
	}
	// The proposer is recorded as the steps' agent, its model and tokens on
	// the run.
	for _, e := range events(f, lctl.TypeStepStart) {
		if e.Agent != "grpc:"+c.agentAddr {
			t.Errorf("step_start agent %q", e.Agent)
		}
	}

	// The tool server ran lookup and reserve once each, with the steps'
	// ids as idempotency keys, and never saw the refused proposal.
	calls := invocations(c)
	steps := map[string]string{}
	for _, e := range events(f, lctl.TypeStepStart) {
		if id, ok := e.Data["step_id"].(string); ok {
			steps[id] = e.Data["tool"].(string)
		}
	}
	var ran []string
	for key, tool := range steps {
		if got, ok := calls[key]; ok {
			ran = append(ran, tool)
			if "inventory."+got != tool {
				t.Errorf("step %s (%s) invoked the server's %s", key, tool, got)
			}
		}
	}
	if len(ran) != 2 {
		t.Errorf("the tool server ran %v for this run's steps, want inventory.lookup and inventory.reserve once each\n%s", ran, c.agent.Output())
	}
	// XCT's own credentials never leave it: neither the executor nor the
	// orchestrator sent the external server an authorization header.
	if sent := c.agent.Matching(regexp.MustCompile(`sent authorization metadata`)); len(sent) > 0 {
		t.Errorf("XCT sent credentials to an external server: %v", sent)
	}
}

// A tool server's structured error reaches the agent as information: an
// unknown SKU is NOT_FOUND at lookup, and the agent stops without
// reserving anything.
func TestPythonToolServerErrorReachesTheAgent(t *testing.T) {
	c := needCluster(t)
	orch, withAuth := c.orchestratorClient(t, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	started, err := orch.StartRun(withAuth(ctx), &xctv1.StartRunRequest{
		Goal: "reserve 1 of RED-9", Model: "grpc:" + c.agentAddr, Principal: "alice",
	})
	if err != nil {
		t.Fatal(err)
	}
	id := started.GetRun().GetRunId()
	run := waitEnded(t, withAuth(ctx), orch, id)
	if run.GetStatus() != xctv1.RunStatus_RUN_STATUS_DONE || run.GetMessage() != "stopped: NOT_FOUND: no SKU RED-9" {
		t.Fatalf("run ended %s: %q", run.GetStatus(), run.GetMessage())
	}
	var states []string
	for _, st := range run.GetSteps() {
		states = append(states, st.GetProposal().GetTool()+" "+st.GetState().String())
	}
	want := []string{"inventory.lookup STEP_STATE_DENIED", "inventory.lookup STEP_STATE_FAILED"}
	if strings.Join(states, ", ") != strings.Join(want, ", ") {
		t.Fatalf("steps = %v, want %v", states, want)
	}
	if got := run.GetSteps()[1].GetResponse().GetError().GetCode(); got != "NOT_FOUND" {
		t.Errorf("step 2 error code %q, want NOT_FOUND", got)
	}
	if tool := invocations(c)[run.GetSteps()[1].GetStepId()]; tool != "lookup" {
		t.Errorf("the tool server did not record step 2 as a lookup (got %q)", tool)
	}
}

// waitEnded follows a run with WatchRun until its stream ends, then
// returns it.
func waitEnded(t *testing.T, ctx context.Context, orch xctv1.OrchestratorServiceClient, id string) *xctv1.Run {
	t.Helper()
	stream, err := orch.WatchRun(ctx, &xctv1.WatchRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := drain(stream); err != nil {
		t.Fatalf("watch %s: %v", id, err)
	}
	got, err := orch.GetRun(ctx, &xctv1.GetRunRequest{RunId: id})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetRun()
}

func drain(stream grpc.ServerStreamingClient[xctv1.WatchRunResponse]) error {
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
