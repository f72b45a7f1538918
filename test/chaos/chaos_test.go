// Package chaos is XCT's fault-injection suite: every service, the ledger
// tool and nats-server (one node, or a 3-node R3 JetStream cluster) as
// separate OS processes, two orchestrator replicas, concurrent runs driven
// by a model that retries as suggested_action says, and seeded faults:
// SIGKILL, SIGTERM and SIGSTOP of every process, the loss of the LCTL
// stream leader, and (in network namespaces) partitions and latency between
// the services and NATS. After every phase it checks every step: effects in
// the ledger at most one per step id and per operation, the chain and the
// executor's record agree, no event the API acknowledged is missing, every
// chain verifies, every run ended or waits visibly in doubt. See
// docs/chaos.md.
//
// TestChaosShort runs under make test (seconds); TestChaosLong is make
// chaos (-chaos.long, hundreds of runs and faults).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

var (
	flagLong        = flag.Bool("chaos.long", false, "run TestChaosLong (make chaos)")
	flagRuns        = flag.Int("chaos.runs", 300, "TestChaosLong: runs, at least, over both phases")
	flagFaults      = flag.Int("chaos.faults", 150, "TestChaosLong: faults over both phases")
	flagSeed        = flag.Int64("chaos.seed", 0, "seed of the fault schedule and the workload (0: TestChaosShort's fixed seed 10; TestChaosLong: from the clock)")
	flagConcurrency = flag.Int("chaos.concurrency", 4, "TestChaosLong: runs in flight at once")
	flagKinds       = flag.String("chaos.kinds", "", "TestChaosLong: only these fault kinds (comma-separated, e.g. sigkill,partition)")
	flagTargets     = flag.String("chaos.targets", "", "TestChaosLong: only these processes take process faults (comma-separated: executor, validator, tracer, orch-a, orch-b, ledgertool, n1..n3)")
	flagPhases      = flag.String("chaos.phases", "single,r3", "TestChaosLong: the phases to run (single, r3, or loopback: one node without namespaces)")
)

// only keeps the kinds named in list (all when list is empty).
func only(kinds []faultKind, list string) []faultKind {
	if list == "" {
		return kinds
	}
	var out []faultKind
	for _, k := range kinds {
		if slices.Contains(strings.Split(list, ","), string(k)) {
			out = append(out, k)
		}
	}
	return out
}

// settleTimeout is how long runs may take to end once the faults are over.
const settleTimeout = 150 * time.Second

// runPhase starts a cluster, drives runs while the injector injects the
// phase's faults, heals, lets the runs settle and checks them.
func runPhase(t *testing.T, cfg phaseConfig) *report {
	t.Helper()
	c := startCluster(t, cfg)
	m := newModel(cfg.seed, cfg.ops)
	c.model = m
	stopModel := serveModel(c, m)
	defer stopModel()
	d := &driver{
		orch: [2]xctv1.OrchestratorServiceClient{
			xctv1.NewOrchestratorServiceClient(c.dial(t, c.orch[0], "alice")),
			xctv1.NewOrchestratorServiceClient(c.dial(t, c.orch[1], "alice")),
		},
		executor:   c.executor(t),
		tracer:     lctlv1.NewTracerServiceClient(c.dial(t, c.tracer, "alice")),
		modelAddr:  c.modelAddr,
		seed:       cfg.seed,
		approver:   xctv1.NewValidatorServiceClient(c.dial(t, c.val, "bob")),
		decideTrap: m.decideTrap,
	}
	c.canceller = newCanceller(d.orch)
	in := newInjector(c, cfg.seed)
	runCtx, cancelRuns := context.WithCancel(context.Background())
	defer cancelRuns()

	var next atomic.Int64
	var faultsDone atomic.Bool
	faultErr := make(chan error, 1)
	go func() {
		err := in.run(runCtx, cfg.faults)
		faultsDone.Store(true)
		faultErr <- err
	}()
	var wg sync.WaitGroup
	for range cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				i := next.Add(1)
				if int(i) > cfg.runs && faultsDone.Load() {
					return
				}
				d.run(runCtx, fmt.Sprintf("chaos-%d-%s-%d", cfg.seed, cfg.name, i))
			}
		}()
	}
	if err := <-faultErr; err != nil {
		t.Errorf("%s: %v", cfg.name, err)
	}
	settle := time.AfterFunc(settleTimeout, cancelRuns)
	wg.Wait()
	settle.Stop()

	in.mu.Lock()
	for _, e := range in.events {
		t.Logf("%s fault %s", cfg.name, e)
	}
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// A process that died after the last fault (the last heal saw it
	// alive) is a crash too, and is started again for the check: the
	// session 15 end's r3 tracer was not serving at the check (lost=106)
	// and nothing said why.
	if err := in.revive("after the faults, before the check"); err != nil {
		t.Errorf("%s: %v", cfg.name, err)
	}
	rep := &report{phase: cfg.name, seed: cfg.seed, faults: in.counts()}
	if err := c.check(ctx, d, in, rep); err != nil {
		t.Fatalf("%s: check: %v", cfg.name, err)
	}
	in.mu.Lock()
	rep.crashes = len(in.crashes)
	for _, crash := range in.crashes {
		rep.findings = append(rep.findings, "crash: "+crash)
	}
	in.mu.Unlock()
	// The processes' logs are kept when the phase's checks failed (its
	// test fails only at the end, in finish).
	c.keepLogs = rep.failed() || rep.crashes > 0
	t.Log(rep.line())
	return rep
}

// finish prints the summary line and the findings, and fails the test when
// a check failed.
func finish(t *testing.T, rep *report) {
	t.Helper()
	for _, f := range rep.findings {
		t.Log(f)
	}
	for _, d := range rep.doubts {
		t.Log("in doubt (expected, visible): " + d)
	}
	fmt.Println(rep.line())
	fmt.Printf("chaos %s: steps by outcome on the chain %v\n", rep.phase, rep.outcomes)
	for why, n := range rep.failures {
		fmt.Printf("chaos %s: failed %d: %s\n", rep.phase, n, why)
	}
	if rep.failed() {
		t.Errorf("%s\nreproduce with the same seed: see docs/chaos.md", rep.line())
	}
}

// TestChaosShort is the seeded run make test includes: one NATS node on
// loopback, a few runs, SIGKILL, SIGTERM and SIGSTOP of every process.
func TestChaosShort(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		// Seed 10's first fault kills the executor while steps are in
		// flight (issue 12's finding 1), then the tracer and the NATS node.
		seed = 10
	}
	rep := runPhase(t, phaseConfig{name: "short", runs: 6, faults: 5, concurrency: 3, ops: 2, seed: seed, kinds: processKinds})
	rep.phase = "short"
	finish(t, rep)
}

// TestChaosLong is make chaos: a single node and an R3 cluster, each in
// network namespaces, with every fault kind, half the runs and faults each.
func TestChaosLong(t *testing.T) {
	if !*flagLong {
		t.Skip("the long fault-injection run is make chaos (go test ./test/chaos -run TestChaosLong -args -chaos.long)")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000
	}
	process := []faultKind{faultKill, faultKill, faultTerm, faultTerm, faultStop, faultStop, faultReload}
	network := []faultKind{faultPartition, faultPartition, faultSlow, faultDiskFull}
	leader := []faultKind{faultLeaderKill, faultLeaderKill, faultLeaderStop, faultLeaderPartition, faultLeaderPartition}
	r3traps := append(append([]faultKind(nil), trapKinds...), faultStepsStepdown)
	all := []phaseConfig{
		{name: "single", netns: true, kinds: slices.Concat(process, network, trapKinds, proposeKinds, approvalKinds, cancelKinds)},
		{name: "r3", netns: true, r3: true, kinds: slices.Concat(process, network, leader, r3traps, proposeKinds, approvalKinds, cancelKinds)},
		{name: "loopback", kinds: slices.Concat(process, trapKinds, proposeKinds, approvalKinds, cancelKinds)},
	}
	var phases []phaseConfig
	for _, p := range all {
		if slices.Contains(strings.Split(*flagPhases, ","), p.name) {
			if p.kinds = only(p.kinds, *flagKinds); len(p.kinds) == 0 {
				t.Fatalf("phase %s: none of -chaos.kinds=%s applies", p.name, *flagKinds)
			}
			phases = append(phases, p)
		}
	}
	if len(phases) == 0 {
		t.Fatalf("-chaos.phases=%s names no phase (single, r3, loopback)", *flagPhases)
	}
	total := &report{phase: "total", seed: seed}
	for i, p := range phases {
		// The runs and faults are shared out between the phases.
		p.runs = *flagRuns/len(phases) + boolInt(i < *flagRuns%len(phases))
		p.faults = *flagFaults/len(phases) + boolInt(i < *flagFaults%len(phases))
		p.seed, p.concurrency, p.ops = seed, *flagConcurrency, 3
		if *flagTargets != "" {
			p.targets = strings.Split(*flagTargets, ",")
		}
		t.Run(p.name, func(t *testing.T) {
			rep := runPhase(t, p)
			total.add(rep)
			fmt.Println(rep.line())
		})
	}
	finish(t, total)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
