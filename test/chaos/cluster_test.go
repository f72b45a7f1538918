package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/testutil/proctest"
	"github.com/xct-dev/xct/internal/verdict"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds xct, nats-server and the ledger tool once.
func binaries(t testing.TB) (xct, natsServer, ledgertool string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "xct-chaos-bin-"); buildErr != nil {
			return
		}
		buildErr = proctest.Build(binDir, "github.com/xct-dev/xct/cmd/xct", "github.com/nats-io/nats-server/v2",
			"github.com/xct-dev/xct/test/chaos/ledgertool")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "xct"), filepath.Join(binDir, "nats-server"), filepath.Join(binDir, "ledgertool")
}

// phaseConfig is one cluster shape and its workload.
type phaseConfig struct {
	name        string
	netns       bool // every process on its own namespaced test host
	r3          bool // a 3-node JetStream cluster, R3 stream and buckets
	runs        int
	faults      int
	concurrency int
	ops         int // operations (tool calls) per run
	seed        int64
	kinds       []faultKind
	targets     []string // processes that take process faults (all when empty)
}

// member is one process of the cluster, restartable with the same argv
// (same addresses: clients and peers find it again).
type member struct {
	name  string
	kind  string // "nats", "service", "tool"
	host  *netHost
	bin   string
	args  []string
	ready *regexp.Regexp

	mu      sync.Mutex
	proc    *proctest.Proc
	outputs []string // earlier incarnations' output
	stopped bool     // SIGSTOPped
}

func (m *member) current() *proctest.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// start starts a new incarnation and waits until it says it is ready; one
// that exits first (e.g. a service whose NATS is not back yet) is started
// again until timeout.
func (m *member) start(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		bin, args := m.bin, m.args
		if m.host != nil {
			// ip netns exec execs the command in place: the pid is the
			// process itself, so signals reach it.
			bin, args = "ip", append([]string{"netns", "exec", m.host.ns, m.bin}, m.args...)
		}
		p, err := proctest.Start(m.name, "", bin, nil, args...)
		if err != nil {
			return err
		}
		m.mu.Lock()
		if m.proc != nil {
			m.outputs = append(m.outputs, m.proc.Output())
		}
		m.proc, m.stopped = p, false
		m.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			left = time.Second
		}
		_, err = p.WaitFor(m.ready, left)
		if err == nil {
			return nil
		}
		select {
		case <-p.Done():
		default: // not ready in time but running
			return fmt.Errorf("%s not ready: %w", m.name, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start within %v: %w", m.name, timeout, err)
		}
		retry := time.NewTimer(500 * time.Millisecond) // the exit is the event; this paces the next try
		<-retry.C
	}
}

func (m *member) signal(sig syscall.Signal) error {
	p := m.current()
	if p == nil {
		return fmt.Errorf("%s is not running", m.name)
	}
	return p.Cmd.Process.Signal(sig)
}

// alive reports whether the current incarnation runs.
func (m *member) alive() bool {
	p := m.current()
	if p == nil {
		return false
	}
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

func (m *member) stop() {
	if m.alive() {
		_ = m.signal(syscall.SIGCONT)
		_ = m.current().Stop()
	}
}

// log is every incarnation's output.
func (m *member) log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := append([]string(nil), m.outputs...)
	if m.proc != nil {
		all = append(all, m.proc.Output())
	}
	return strings.Join(all, "\n--- restarted ---\n")
}

// cluster is one phase's processes.
type cluster struct {
	cfg     phaseConfig
	base    string
	lab     *netLab
	creds   *grpcxtest.Creds
	nodes   []*member // nats-server
	svcs    []*member // executor, validator, tracer, orch-a, orch-b
	tool    *member
	ledger  string
	trapDir string // the ledger tool's traps (traps_test.go)
	policy  string // the validator's policy file (faultReload rewrites it)
	model   *model // the suite's model (its trap, what it billed)
	// canceller cancels runs for the cancel faults (cancel_test.go).
	canceller *canceller
	natsURL   string // the services' and the test's NATS URLs
	orch      [2]string
	exec      string
	val       string
	tracer    string
	// modelAddr is where the test serves the model (ProposerService).
	modelAddr string
	modelLis  net.Listener

	nc  *nats.Conn
	log *eventlog.Log
	// disks are the stores on file systems of their own, for the
	// disk-full fault (disk_test.go): every node's and the tracer's.
	disks []disk
	// keepLogs: write the processes' output at the end (stopAll), the
	// phase's checks having failed.
	keepLogs bool
}

func (c *cluster) members() []*member {
	all := append(append([]*member(nil), c.nodes...), c.svcs...)
	if c.tool != nil {
		all = append(all, c.tool)
	}
	return all
}

func (c *cluster) byName(name string) *member {
	for _, m := range c.members() {
		if m.name == name {
			return m
		}
	}
	return nil
}

// freePort picks a free loopback port for a process that must come back on
// the same address after a restart.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

var (
	natsReady    = regexp.MustCompile(`Server is ready`)
	serviceReady = regexp.MustCompile(`listening on \S+$`)
	toolReady    = regexp.MustCompile(`ledgertool listening on`)
)

const policy = `rules:
  - id: allow-ledger
    effect: allow
    message: the chaos suite's ledger tools may run
    tools: [ledger.charge, ledger.put]
  - id: allow-crew
    effect: allow
    message: the crew runs' own tools may run
    tools: [facts.add, facts.update, xct.handoff]
  - id: review-ledger
    effect: require_approval
    message: a reviewed ledger operation waits for the suite's approver
    tools: [ledger.charge, ledger.put]
    when: 'has(args.review) && args.review == true'
`

// startCluster starts NATS (one node or three), the ledger tool and the
// services, each its own process (on its own test host with netns).
func startCluster(t *testing.T, cfg phaseConfig) *cluster {
	xct, natsBin, toolBin := binaries(t)
	c := &cluster{cfg: cfg, base: t.TempDir(), creds: grpcxtest.New(t)}
	c.ledger = filepath.Join(c.base, "ledger.jsonl")
	c.trapDir = filepath.Join(c.base, "trap")
	if err := os.MkdirAll(c.trapDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stopAll(t) })

	hostIdx := 10
	host := func(name string, rpc bool) *netHost {
		if c.lab == nil {
			return nil
		}
		hostIdx++
		h, err := c.lab.addHost(name, hostIdx, rpc)
		if err != nil {
			t.Fatalf("test host %s: %v", name, err)
		}
		return h
	}
	if cfg.netns {
		tag := "s"
		if cfg.r3 {
			tag = "r"
		}
		lab, err := newNetLab(tag)
		if err != nil {
			t.Fatalf("%s: the partition and latency faults need network namespaces: %v", cfg.name, err)
		}
		c.lab = lab // closed by stopAll, after the processes in it stopped
	}
	// The model: the test process serves ProposerService.
	modelIP := "127.0.0.1"
	if c.lab != nil {
		modelIP = rpcNet + "1"
	}
	var err error
	if c.modelLis, err = net.Listen("tcp", modelIP+":0"); err != nil {
		t.Fatal(err)
	}
	c.modelAddr = c.modelLis.Addr().String()

	// NATS.
	n := 1
	if cfg.r3 {
		n = 3
	}
	type nodeAddr struct{ ip, client, route string }
	addrs := make([]nodeAddr, n)
	hosts := make([]*netHost, n)
	for i := range n {
		hosts[i] = host(fmt.Sprintf("n%d", i+1), false)
		if hosts[i] != nil {
			addrs[i] = nodeAddr{hosts[i].natsIP, "4222", "6222"}
		} else {
			addrs[i] = nodeAddr{"127.0.0.1", freePort(t), freePort(t)}
		}
	}
	var urls []string
	for i := range n {
		urls = append(urls, "nats://"+addrs[i].ip+":"+addrs[i].client)
	}
	c.natsURL = strings.Join(urls, ",")
	// NATS as in production: a user per service with its permissions,
	// no anonymous access.
	authBlock, err := natsauth.ServerConfig(testutil.NATSUsers())
	if err != nil {
		t.Fatal(err)
	}
	natsCreds := testutil.NATSCredentialsFile(t)
	if cfg.hasKind(faultDiskFull) {
		for i := range n {
			c.disks = append(c.disks, disk{dir: filepath.Join(c.base, fmt.Sprintf("n%d", i+1))})
		}
		c.disks = append(c.disks, disk{dir: filepath.Join(c.base, "tracer")})
		for _, d := range c.disks {
			if err := mountDisk(d.dir); err != nil {
				t.Fatalf("%s: %v", cfg.name, err)
			}
		}
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf("server_name: %s\nlisten: %q\njetstream { store_dir: %q\n %s }\n", name, addrs[i].ip+":"+addrs[i].client, filepath.Join(c.base, name), natsauth.JetStreamLimits())
		if cfg.r3 {
			var routes []string
			for j := range n {
				if j != i {
					routes = append(routes, fmt.Sprintf("%q", "nats://"+addrs[j].ip+":"+addrs[j].route))
				}
			}
			conf += fmt.Sprintf("cluster { name: chaos\n listen: %q\n routes: [%s]\n no_advertise: true }\n", addrs[i].ip+":"+addrs[i].route, strings.Join(routes, ", "))
		}
		conf += authBlock
		file := filepath.Join(c.base, name+".conf")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &member{name: name, kind: "nats", host: hosts[i], bin: natsBin, args: []string{"-c", file}, ready: natsReady})
		if len(c.disks) > 0 {
			c.disks[i].m = c.nodes[i]
		}
	}
	// A cluster forms only with its peers up: start the nodes together.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.start(60 * time.Second) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c.nc, err = nats.Connect(c.natsURL, testutil.Admin(), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nc.Close)
	replicas := 1
	if cfg.r3 {
		replicas = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The streams exist before the services start, made by the admin as a
	// deployment does (a fresh R3 cluster elects its meta leader first;
	// asked again until it answers).
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second) // a fresh cluster may drop the first request
		c.log, err = provisionAndOpen(actx, c.nc, replicas)
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("LCTL stream: %v", err)
		}
		pause := time.NewTimer(300 * time.Millisecond) // JetStream not ready: ask again
		<-pause.C
	}

	// The ledger tool.
	toolHost := host("tool", true)
	toolListen := "127.0.0.1:" + freePort(t)
	if toolHost != nil {
		toolListen = toolHost.rpcIP + ":7800"
	}
	c.tool = &member{name: "ledgertool", kind: "tool", host: toolHost, bin: toolBin, args: []string{"-listen", toolListen, "-ledger", c.ledger, "-trap", c.trapDir}, ready: toolReady}
	if err := c.tool.start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	toolsFile := filepath.Join(c.base, "tools.yaml")
	if err := os.WriteFile(toolsFile, []byte("servers:\n  - name: ledger\n    address: "+toolListen+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(c.base, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	c.policy = policyFile
	// The validator signs its allow verdicts; the executor acts only on
	// verdicts signed by a key it trusts.
	keys, err := verdict.WriteKeyPair(filepath.Join(c.base, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	scripts := filepath.Join(c.base, "scripts")
	if err := os.MkdirAll(scripts, 0o750); err != nil {
		t.Fatal(err)
	}

	// The services, in dependency order.
	listen := map[string]string{}
	svcHosts := map[string]*netHost{}
	for _, name := range []string{"executor", "validator", "tracer", "orch-a", "orch-b"} {
		h := host(name, true)
		svcHosts[name] = h
		if h != nil {
			listen[name] = h.rpcIP + ":7700"
		} else {
			listen[name] = "127.0.0.1:" + freePort(t)
		}
	}
	c.exec, c.val, c.tracer, c.orch = listen["executor"], listen["validator"], listen["tracer"], [2]string{listen["orch-a"], listen["orch-b"]}
	for _, name := range []string{"executor", "validator", "tracer", "orch-a", "orch-b"} {
		target := name
		if strings.HasPrefix(name, "orch-") {
			target = "orchestrator"
		}
		args := []string{"serve", "--target", target, "--nats", c.natsURL, "--" + target + "-listen", listen[name],
			"--replicas", strconv.Itoa(replicas), "--plaintext", "--auth-tokens", c.creds.Path,
			"--service-token", c.creds.Token(t, grpcxtest.Service), "--log-level", "warn", "--nats-credentials", natsCreds}
		if c.lab != nil {
			args = append(args, "--plaintext-any") // private addresses inside the lab
		}
		switch target {
		case "executor":
			args = append(args, "--workspace", filepath.Join(c.base, "ws"), "--tools-config", toolsFile, "--verdict-trust", keys.Public)
		case "validator":
			args = append(args, "--policy", policyFile, "--verdict-key", keys.Private)
		case "tracer":
			args = append(args, "--tracer-data", filepath.Join(c.base, "tracer"), "--tracer-http-listen", "")
		case "orchestrator":
			args = append(args, "--validator-addr", listen["validator"], "--executor-addr", listen["executor"],
				"--scripts-dir", scripts, "--instance", name, "--allow-grpc-proposer", c.modelAddr,
				"--run-lease", "2s", "--drain-timeout", "3s", "--call-timeout", "20s", "--propose-timeout", "20s")
		}
		m := &member{name: name, kind: "service", host: svcHosts[name], bin: xct, args: args, ready: serviceReady}
		c.svcs = append(c.svcs, m)
		if target == "tracer" && len(c.disks) > 0 {
			c.disks[len(c.disks)-1].m = m
		}
		if err := m.start(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// dial connects to a service as principal (plaintext: loopback, or the
// lab's private addresses).
func (c *cluster) dial(t testing.TB, addr, principal string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcx.Dial(addr, grpcx.WithToken(c.creds.Token(t, principal)), grpcx.WithPlaintextAny())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (c *cluster) executor(t testing.TB) xctv1.ExecutorServiceClient {
	return xctv1.NewExecutorServiceClient(c.dial(t, c.exec, grpcxtest.Service))
}

// streamLeader names the nats-server node leading the LCTL stream.
func (c *cluster) streamLeader(ctx context.Context) (*member, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, eventlog.StreamName)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, errors.New("the stream has no leader now")
	}
	m := c.byName(info.Cluster.Leader)
	if m == nil {
		return nil, fmt.Errorf("leader %q is no node of ours", info.Cluster.Leader)
	}
	return m, nil
}

// heal undoes every fault: continues stopped processes, mends the links,
// restarts what is not running.
func (c *cluster) heal() error {
	var errs []error
	for _, m := range c.members() {
		m.mu.Lock()
		stopped := m.stopped
		m.stopped = false
		m.mu.Unlock()
		if stopped {
			_ = m.signal(syscall.SIGCONT)
		}
		if m.host != nil && c.lab != nil {
			errs = append(errs, c.lab.partition(m.host, false), c.lab.slow(m.host, false))
		}
	}
	for _, m := range c.members() {
		if !m.alive() {
			errs = append(errs, m.start(120*time.Second))
		}
	}
	return errors.Join(errs...)
}

// stopAll stops every process (services first) and, when the test
// failed, writes their output where it can be read.
func (c *cluster) stopAll(t *testing.T) {
	if c.modelLis != nil {
		_ = c.modelLis.Close()
	}
	for i := len(c.svcs) - 1; i >= 0; i-- {
		c.svcs[i].stop()
	}
	if c.tool != nil {
		c.tool.stop()
	}
	for _, m := range c.nodes {
		m.stop()
	}
	c.unmountDisks()
	if t.Failed() || c.keepLogs || os.Getenv("XCT_CHAOS_LOGS") != "" {
		dir := os.Getenv("XCT_CHAOS_LOGS")
		if dir == "" {
			dir, _ = os.MkdirTemp("", "xct-chaos-logs-")
		}
		dir = filepath.Join(dir, c.cfg.name)
		_ = os.MkdirAll(dir, 0o750)
		for _, m := range c.members() {
			_ = os.WriteFile(filepath.Join(dir, m.name+".log"), []byte(m.log()), 0o600)
		}
		if b, err := os.ReadFile(c.ledger); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "ledger.jsonl"), b, 0o600)
		}
		t.Logf("%s: process logs and the ledger are in %s", c.cfg.name, dir)
	}
	if c.lab != nil {
		c.lab.Close()
	}
}

// provisionAndOpen makes XCT's streams as the admin (provision.Run, what
// `xct nats provision` does) and opens the log on them.
func provisionAndOpen(ctx context.Context, nc *nats.Conn, replicas int) (*eventlog.Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := provision.Defaults()
	s.Replicas = replicas
	if _, err := provision.Run(ctx, js, s); err != nil {
		return nil, err
	}
	return eventlog.Open(ctx, nc)
}

// reloadPolicy rewrites the validator's policy file with the same rules
// and a comment naming fault n: a new policy version, which the validator
// installs at its next look (--policy-reload, 2 s), recording its epoch.
func (c *cluster) reloadPolicy(n int) error {
	tmp := c.policy + ".new"
	if err := os.WriteFile(tmp, []byte(policy+fmt.Sprintf("# policy-reload fault #%d\n", n)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.policy)
}
