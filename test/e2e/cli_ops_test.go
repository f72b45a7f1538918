package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil/browser"
	"github.com/xct-dev/xct/internal/testutil/proctest"
)

// devCluster is `xct dev` started as a user would, on free ports, with its
// data directory.
type devCluster struct {
	xct, dataDir string
	proc         *proc
}

// startDev starts the built xct dev with a data directory outside the
// working directory and every service on a free port (so only the files
// it writes tell clients where it is), with the given extra flags.
func startDev(t *testing.T, extra ...string) *devCluster {
	t.Helper()
	xct, _ := binaries(t)
	data := filepath.Join(t.TempDir(), "data")
	args := append([]string{"dev", "--data-dir", data, "--nats-port", "-1",
		"--orchestrator-listen", "127.0.0.1:0", "--validator-listen", "127.0.0.1:0",
		"--executor-listen", "127.0.0.1:0", "--tracer-listen", "127.0.0.1:0",
		"--tracer-http-listen", "127.0.0.1:0"}, extra...)
	p := startProc(t, "xct dev", xct, args...)
	p.waitFor(t, regexp.MustCompile(`serving; press Ctrl-C to stop`), 60*time.Second)
	return &devCluster{xct: xct, dataDir: data, proc: p}
}

// cliResult is one CLI command's exit code and output.
type cliResult struct {
	code int
	out  string
}

// cli runs the built xct in dir (a fresh temporary directory when empty)
// with env added to a minimal environment.
func (d *devCluster) cli(t *testing.T, dir string, env []string, args ...string) cliResult {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	full := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	p, err := proctest.Start("xct "+strings.Join(args, " "), dir, d.xct, full, args...)
	if err != nil {
		t.Fatal(err)
	}
	code, out, err := p.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return cliResult{code: code, out: out}
}

// want fails unless the command exited with code and printed every one
// of subs.
func (r cliResult) want(t *testing.T, what string, code int, subs ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d; output:\n%s", what, r.code, code, r.out)
	}
	for _, s := range subs {
		if !strings.Contains(r.out, s) {
			t.Fatalf("%s: output lacks %q:\n%s", what, s, r.out)
		}
	}
}

// The CLI finds a cluster started with --data-dir on other ports through
// XCT_DATA_DIR alone (credentials and addresses), says which file it
// tried when it finds none, and resolve's help no longer panics.
func TestCLIFindsTheDevClusterByDataDir(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	env := []string{"XCT_DATA_DIR=" + d.dataDir}

	d.cli(t, "", env, "runs").want(t, "runs with XCT_DATA_DIR", 0, "RUN", "STATUS")
	d.cli(t, "", nil, "runs", "--data-dir", d.dataDir).want(t, "runs with --data-dir", 0, "RUN")

	// No data directory here: the file tried is named (and nothing is
	// dialled for a principal without a token).
	d.cli(t, "", nil, "runs", "--as", "bob").want(t, "runs without credentials", 1,
		filepath.Join(".xct", "dev", "credentials.yaml")+" does not exist", "XCT_DATA_DIR")
	missing := filepath.Join(t.TempDir(), "nowhere")
	d.cli(t, "", []string{"XCT_DATA_DIR=" + missing}, "runs").want(t, "runs with a wrong data dir", 2,
		filepath.Join(missing, "dev", "addresses.yaml"))

	// One addresses file for a cluster xct dev did not start.
	addrs := filepath.Join(d.dataDir, "dev", "addresses.yaml")
	d.cli(t, "", []string{"XCT_CLUSTER=" + addrs, "XCT_CREDENTIALS=" + filepath.Join(d.dataDir, "dev", "credentials.yaml")}, "runs").
		want(t, "runs with XCT_CLUSTER", 0, "RUN")

	// resolve -h prints its flags: --outcome for the outcome, --as for
	// the principal.
	d.cli(t, "", nil, "resolve", "-h").want(t, "resolve -h", 0, "-outcome", "-as")
	d.cli(t, "", env, "resolve", "run-1", "2", "--outcome", "maybe").want(t, "resolve with a wrong outcome", 2, `--outcome "maybe"`)
}

// xct tools prints the catalog the model sees, with each tool's source and
// effect class and where it comes from.
func TestCLITools(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	d.cli(t, "", env, "tools").want(t, "tools", 0, "TOOL", "SOURCE", "EFFECT FROM", "fs.read", "builtin")
	r := d.cli(t, "", env, "tools", "--json")
	r.want(t, "tools --json", 0)
	var rows []struct {
		Name, Source, Effect, Timeout string
		EffectFrom                    string `json:"effect_from"`
		Idempotent                    bool
		InputSchema                   map[string]any `json:"input_schema"`
	}
	if err := json.Unmarshal([]byte(r.out), &rows); err != nil {
		t.Fatalf("tools --json: %v\n%s", err, r.out)
	}
	found := false
	for _, row := range rows {
		if row.Name == "fs.read" {
			found = true
			if row.Source != "builtin" || row.Effect != "read" || row.EffectFrom != "builtin" || !row.Idempotent || row.Timeout == "" || row.InputSchema["type"] != "object" {
				t.Fatalf("fs.read: %+v", row)
			}
		}
	}
	if !found {
		t.Fatalf("no fs.read in %s", r.out)
	}
}

// xct cancel stops a run waiting for an approval: its step is closed, the
// approval withdrawn (approving it afterwards is refused, saying why), and
// xct show says cancelled for the run and the step.
func TestCLICancel(t *testing.T) {
	t.Parallel()
	d, env, runID := startWaitingForApproval(t)
	d.cli(t, "", env, "cancel", runID, "--reason", "wrong ticket", "--as", "carol").
		want(t, "cancel", 0, "run "+runID+" cancelled: cancelled by carol: wrong ticket")
	d.cli(t, "", env, "cancel", runID).want(t, "cancel again", 1, "FailedPrecondition")
	show := d.cli(t, "", env, "show", runID)
	show.want(t, "show", 0, "status     cancelled", "cancelled by carol: wrong ticket")
	if !regexp.MustCompile(`(?m)^1\s+cancelled\s+fs\.write\s+needs_approval\s+- \(the run was cancelled`).MatchString(show.out) {
		t.Fatalf("show: step 1 not cancelled:\n%s", show.out)
	}
	d.cli(t, "", env, "approve", runID, "1", "--as", "bob").want(t, "approve after cancel", 1,
		"FailedPrecondition", "withdrawn", "cancelled by carol")
	d.cli(t, "", env, "approvals", "--run", runID, "--all").want(t, "approvals --all", 0, "withdrawn", "decided by    carol: wrong ticket")
}

// lctlDir holds the lctl lctlBin built; TestMain removes it.
var lctlDir string

// lctlBinary builds lctl once for the package.
var lctlBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "xct-e2e-lctl-")
	if err != nil {
		return "", err
	}
	lctlDir = dir
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/xct-dev/xct/cmd/lctl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build lctl: %w\n%s", err, out)
	}
	return filepath.Join(dir, "lctl"), nil
})

// devToken is a principal's token from the dev cluster's credentials.
func (d *devCluster) token(t *testing.T, principal string) string {
	t.Helper()
	tok, err := auth.ClientToken("", principal, filepath.Join(d.dataDir, "dev", "credentials.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// devAddrs reads the addresses xct dev wrote.
func (d *devCluster) addrs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(d.dataDir, "dev", "addresses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A run's tokens are one number everywhere: xct show, lctl stats, the
// debugger's chain list and its state at the chain's end all count the
// final done turn (on run_finished only) too.
func TestTokenTotalsAgree(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	script := `name: tokens
steps:
  - next_step: {tool: fs.list, arguments: {path: "."}, goal: look}
    tokens: {input: 400, output: 40}
  - next_step: {tool: fs.list, arguments: {path: "."}, goal: look again}
    tokens: {input: 600, output: 60}
  - done: true
    message: seen
    tokens: {input: 200, output: 20}
`
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	runID := d.startScript(t, "tokens.yaml", script)
	deadline := time.Now().Add(30 * time.Second)
	var show cliResult
	for {
		show = d.cli(t, "", env, "show", runID)
		if strings.Contains(show.out, "status     done") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run did not end:\n%s", show.out)
		}
	}
	show.want(t, "show", 0, "tokens     1200 in / 120 out")

	lctl, err := lctlBin()
	if err != nil {
		t.Fatal(err)
	}
	addrs := d.addrs(t)
	// The tracer materializes the chain asynchronously: poll until its
	// stats see the end.
	for {
		p, err := proctest.Start("lctl stats", t.TempDir(), lctl, []string{"PATH=" + os.Getenv("PATH"), "LCTL_TOKEN=" + d.token(t, "dave")},
			"stats", "--tracer", addrs["tracer"], "--chain", runID)
		if err != nil {
			t.Fatal(err)
		}
		code, out, err := p.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code == 0 && strings.Contains(out, "Tokens: 1,320 (in: 1,200 / out: 120)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lctl stats (exit %d):\n%s", code, out)
		}
	}

	get := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(addrs["debugger"], "/")+path, nil)
		req.Header.Set("Authorization", "Bearer "+d.token(t, "dave"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Chains []struct {
			ID     string `json:"id"`
			Tokens struct{ Input, Output int64 }
		} `json:"chains"`
	}
	get("/api/chains", &list)
	found := false
	for _, c := range list.Chains {
		if c.ID == runID {
			found = true
			if c.Tokens.Input != 1200 || c.Tokens.Output != 120 {
				t.Fatalf("chain list tokens %+v", c.Tokens)
			}
		}
	}
	if !found {
		t.Fatalf("chain %s not listed", runID)
	}
	var state struct {
		State struct {
			Tokens struct{ Input, Output int64 }
		} `json:"state"`
	}
	get("/api/chains/"+runID+"/state", &state)
	if state.State.Tokens.Input != 1200 || state.State.Tokens.Output != 120 {
		t.Fatalf("debugger state tokens %+v", state.State.Tokens)
	}
}

// writeScript puts a scripted model's file where xct dev reads it.
func (d *devCluster) writeScript(t *testing.T, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d.dataDir, "scripts", name), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startScript starts a script's run through the CLI (--detach) and
// returns the run id.
func (d *devCluster) startScript(t *testing.T, name, script string) string {
	t.Helper()
	d.writeScript(t, name, script)
	r := d.cli(t, "", []string{"XCT_DATA_DIR=" + d.dataDir}, "run", "--model", "scripted:"+name, "--goal", "g", "--detach")
	r.want(t, "run --detach "+name, 0)
	return strings.TrimSpace(r.out)
}

// runScript runs a script to its end through the CLI and returns the run id.
func (d *devCluster) runScript(t *testing.T, name, script string) string {
	t.Helper()
	d.writeScript(t, name, script)
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	r := d.cli(t, "", env, "run", "--model", "scripted:"+name, "--goal", "g")
	r.want(t, "run "+name, 0)
	m := regexp.MustCompile(`run (run-\S+) started`).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("no run id in:\n%s", r.out)
	}
	return m[1]
}

// xct debug prints a one-time link: a headless browser opening it lands on
// the chain, signed in by a session cookie (no token in the URL or the
// page's storage); the same link is refused the second time.
func TestCLIDebugLinkOpensTheChain(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	runID := d.runScript(t, "look.yaml", `name: look
steps:
  - next_step: {tool: fs.list, arguments: {path: "."}, goal: look}
  - done: true
    message: seen
`)
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	r := d.cli(t, "", env, "debug", runID, "--as", "dave")
	r.want(t, "debug", 0, "/login?code=")
	link := regexp.MustCompile(`http://\S+/login\?code=\S+`).FindString(r.out)
	tok := d.token(t, "dave")
	if link == "" || strings.Contains(link, tok) {
		t.Fatalf("link %q (from %q)", link, r.out)
	}

	b := browser.New(t, 2*time.Minute)
	b.Do(t, "open the link", chromedp.Navigate(link))
	b.Until(t, "the page naming dave", `document.querySelector('#who')?.innerText.includes('as dave')`)
	b.Do(t, "continue", chromedp.Click(chromedp.CSS("#continue")))
	b.Until(t, "the chain's flowchart", `location.hash.split('?')[0] === '#/chain/`+runID+`' && document.querySelectorAll('g.node').length > 0`)
	if stored := browser.Eval[string](t, b, `sessionStorage.getItem('xct-debugger-token') ?? ''`); stored != "" {
		t.Fatalf("a token in the page's storage: %q", stored)
	}
	if cookies := browser.Eval[string](t, b, `document.cookie`); cookies != "" {
		t.Fatalf("the session cookie is readable by scripts: %q", cookies)
	}
	b.Do(t, "open the link again", chromedp.Navigate(link))
	b.Until(t, "the refusal", `document.body.innerText.includes('already used or has expired')`)
	b.Clean(t, "401")
}

// The debugger's Cancel button: offered to a principal who may cancel
// (carol, an operator), not to an auditor (dave); cancelling there ends
// the run as xct cancel does.
func TestDebuggerCancelButton(t *testing.T) {
	t.Parallel()
	d, env, runID := startWaitingForApproval(t)
	link := func(who string) string {
		r := d.cli(t, "", env, "debug", runID, "--as", who)
		r.want(t, "debug as "+who, 0)
		return regexp.MustCompile(`http://\S+/login\?code=\S+`).FindString(r.out)
	}
	b := browser.New(t, 2*time.Minute)

	b.Do(t, "open the chain as dave", chromedp.Navigate(link("dave")))
	b.Do(t, "continue as dave", chromedp.Click(chromedp.CSS("#continue")))
	b.Until(t, "the chain as dave", `!!document.querySelector('#chain-id') && document.querySelectorAll('g.node').length > 0`)
	if n := browser.Eval[int](t, b, `document.querySelectorAll('#cancel-run').length`); n != 0 {
		t.Fatal("an auditor is offered Cancel")
	}

	b.Do(t, "open the chain as carol", chromedp.Navigate(link("carol")))
	b.Until(t, "the page naming both", `document.querySelector('#current')?.innerText.includes('signed in as dave')`)
	b.Do(t, "continue as carol", chromedp.Click(chromedp.CSS("#continue")))
	b.Until(t, "the Cancel button", `!!document.querySelector('#cancel-run')`)
	b.Do(t, "cancel", chromedp.Click(chromedp.CSS("#cancel-run")))
	typeInto(t, b, "#cancel-reason", "wrong ticket")
	b.Do(t, "confirm", chromedp.Click(chromedp.CSS("#cancel-confirm")))
	b.Until(t, "the cancellation", `!!document.querySelector('#cancel-result')`)
	// The live chain shows the step cancelled, as xct show does.
	b.Until(t, "the cancelled step", `!!document.querySelector('g.node[data-status="cancelled"]')`)
	b.Clean(t)

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.cli(t, "", env, "show", runID).out, "status     cancelled") {
		if time.Now().After(deadline) {
			t.Fatalf("run %s not cancelled:\n%s", runID, d.cli(t, "", env, "show", runID).out)
		}
	}
	d.cli(t, "", env, "show", runID).want(t, "show", 0, "cancelled by carol: wrong ticket")
}

// Session 16 (ops16), issue 17: what an operator reads when an approval or
// a resolution names something that is not there, or not in the state the
// command needs: each refusal names the run, the step and why, with an
// exit status of 1.
func TestCLIApprovalAndResolveRefusals(t *testing.T) {
	t.Parallel()
	d, env, runID := startWaitingForApproval(t)
	d.cli(t, "", env, "approve", runID, "7", "--as", "bob").want(t, "approve a step with no approval", 1,
		"run "+runID+" has no approval for step 7")
	d.cli(t, "", env, "approve", "run-nope", "1", "--as", "bob").want(t, "approve in a run that does not exist", 1,
		"run run-nope has no approval for step 1")
	d.cli(t, "", env, "approve", runID, "s-nope", "--as", "bob").want(t, "approve an unknown step id", 1, "NotFound", "no such approval")
	d.cli(t, "", env, "approvals", "--run", "bad.id").want(t, "approvals of a malformed run id", 1, "InvalidArgument")
	d.cli(t, "", env, "approve", runID, "1", "--as", "alice").want(t, "approve as a submitter", 1, "PermissionDenied", "alice may not call")
	d.cli(t, "", env, "resolve", runID, "1", "--outcome", "failed", "--as", "carol").want(t, "resolve a step waiting for its approval", 1,
		"not in doubt on its chain")
	d.cli(t, "", env, "approve", runID, "1", "--as", "bob", "--reason", "ticket 7").want(t, "approve", 0, "approved by bob")
	d.cli(t, "", env, "deny", runID, "1", "--as", "bob", "--reason", "no").want(t, "deny what was approved", 1,
		"FailedPrecondition", "already decided", "approved by bob")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.cli(t, "", env, "show", runID).out, "status     done") {
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not end", runID)
		}
	}
	d.cli(t, "", env, "resolve", runID, "1", "--outcome", "failed", "--as", "carol").want(t, "resolve a settled step", 1,
		"step 1", "of run "+runID+" is not in doubt on its chain")
	d.cli(t, "", env, "resolve", runID, "9", "--outcome", "failed", "--as", "carol").want(t, "resolve a step that does not exist", 1,
		"run "+runID+" has no executed step 9")
	d.cli(t, "", env, "resolve", "run-nope", "1", "--outcome", "failed", "--as", "carol").want(t, "resolve in a run that does not exist", 1,
		"get run", "NotFound")
}

// startWaitingForApproval starts xct dev under the config-approval policy
// and a scripted run whose first step (an fs.write to config/) waits for a
// human; it returns the cluster, the CLI's environment and the run's id
// once `xct approvals` lists the approval pending.
func startWaitingForApproval(t *testing.T) (*devCluster, []string, string) {
	t.Helper()
	d := startDev(t, "--policy", "../../examples/policies/config-approval.yaml")
	script := `name: needs-approval
steps:
  - next_step:
      tool: fs.write
      arguments: {path: config/app.yaml, content: "x: 1\n"}
      goal: change the config
    tokens: {input: 100, output: 10}
  - done: true
    message: changed
    tokens: {input: 50, output: 5}
`
	env := []string{"XCT_DATA_DIR=" + d.dataDir}
	runID := d.startScript(t, "approve.yaml", script)
	// Wait until the step waits for a human.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.cli(t, "", env, "approvals", "--run", runID).out, "state         pending") {
		if time.Now().After(deadline) {
			t.Fatalf("no pending approval for %s", runID)
		}
	}
	return d, env, runID
}
