package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// faultKind is one kind of fault the injector knows.
type faultKind string

const (
	faultKill            faultKind = "sigkill"          // SIGKILL any process, restart it after the hold
	faultTerm            faultKind = "sigterm"          // SIGTERM any process, wait for its exit, restart
	faultStop            faultKind = "sigstop"          // SIGSTOP any process, SIGCONT after the hold
	faultLeaderKill      faultKind = "leader-sigkill"   // SIGKILL the LCTL stream leader (R3)
	faultLeaderStop      faultKind = "leader-sigstop"   // SIGSTOP the stream leader (R3)
	faultLeaderPartition faultKind = "leader-partition" // cut the stream leader off the NATS net (R3, netns)
	faultPartition       faultKind = "partition"        // cut a service off NATS (netns)
	faultSlow            faultKind = "latency"          // slow a service's link to NATS (netns)
	faultDiskFull        faultKind = "disk-full"        // fill a NATS node's store or the tracer's files (disk_test.go)
	// faultReload rewrites the validator's policy file (a comment: a new
	// version, the same rules): allows in flight signed under the old
	// version are refused by the executor as replaced, and the
	// orchestrator judges them again (session 17).
	faultReload faultKind = "policy-reload"
)

// processKinds need only processes; the others need R3 or namespaces.
var processKinds = []faultKind{faultKill, faultTerm, faultStop}

// faultEvent is one injected fault, for the report.
type faultEvent struct {
	n        int
	kind     faultKind
	target   string
	from, to time.Time
	note     string
}

func (f faultEvent) String() string {
	s := fmt.Sprintf("#%d %s %s at %s for %v", f.n, f.kind, f.target, f.from.UTC().Format("15:04:05.000"), f.to.Sub(f.from).Round(time.Millisecond))
	if f.note != "" {
		s += " (" + f.note + ")"
	}
	return s
}

// injector injects the phase's faults one at a time, in an order and with
// targets and durations drawn from the seed.
type injector struct {
	c   *cluster
	rng *rand.Rand

	mu      sync.Mutex
	events  []faultEvent
	crashes []string
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func newInjector(c *cluster, seed int64) *injector {
	return &injector{c: c, rng: rand.New(rand.NewPCG(uint64(seed), 0x6368616f73))} //nolint:gosec // G404: a reproducible schedule, not a secret
}

func (in *injector) dur(min, spread time.Duration) time.Duration {
	return min + time.Duration(in.rng.Int64N(int64(spread)))
}

// pause waits d or until ctx ends: the fault's hold or the gap between
// faults (a duration of the schedule, not a synchronization).
func pause(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// run injects n faults, then heals everything.
func (in *injector) run(ctx context.Context, n int) error {
	for i := 1; i <= n && ctx.Err() == nil; i++ {
		pause(ctx, in.dur(300*time.Millisecond, 1500*time.Millisecond))
		if err := in.one(ctx, i); err != nil {
			return err
		}
	}
	return in.c.heal()
}

// revive notes every process that died on its own (a finding: when says
// when it was seen) and starts it again.
func (in *injector) revive(when string) error {
	for _, m := range in.c.members() {
		if !m.alive() {
			in.mu.Lock()
			in.crashes = append(in.crashes, fmt.Sprintf("%s exited on its own %s: %s", m.name, when, lastLines(m.current().Output(), 3)))
			in.mu.Unlock()
			if err := m.start(120 * time.Second); err != nil {
				return err
			}
		}
	}
	return nil
}

// one injects fault number i and undoes it after its hold.
func (in *injector) one(ctx context.Context, i int) error {
	c := in.c
	if err := in.revive(fmt.Sprintf("before fault #%d", i)); err != nil {
		return err
	}
	kind := c.cfg.kinds[in.rng.IntN(len(c.cfg.kinds))]
	hold := in.dur(200*time.Millisecond, 2500*time.Millisecond)
	ev := faultEvent{n: i, kind: kind}
	var target *member
	switch kind {
	case faultKill, faultTerm, faultStop:
		var all []*member
		for _, m := range c.members() {
			if len(c.cfg.targets) == 0 || slices.Contains(c.cfg.targets, m.name) {
				all = append(all, m)
			}
		}
		if len(all) == 0 {
			return fmt.Errorf("no process is named by the targets %v", c.cfg.targets)
		}
		target = all[in.rng.IntN(len(all))]
	case faultLeaderKill, faultLeaderStop, faultLeaderPartition:
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		leader, err := c.streamLeader(lctx)
		cancel()
		if err != nil {
			// No leader right now (an election): any node takes the fault.
			leader = c.nodes[in.rng.IntN(len(c.nodes))]
			ev.note = "no leader known: " + err.Error()
		}
		target = leader
	case faultPartition, faultSlow:
		target = c.svcs[in.rng.IntN(len(c.svcs))]
	case faultDiskFull:
		target = c.disks[in.rng.IntN(len(c.disks))].m
	case faultExecKillBefore, faultExecKillAfter, faultOwnerStop, faultStepsLeaderKill, faultStepsStepdown:
		target = &member{name: "trap:"} // the process is chosen when the trap fires
	case faultReload:
		target = &member{name: "validator-policy"}
	case faultOwnerStopPropose, faultOwnerKillPropose, faultOwnerStopDecide, faultOwnerKillDecide:
		target = &member{name: "trap:"} // the run's owner when the model's (or the approver's) trap is taken
	case faultCancelMidPropose, faultCancelKillOwner, faultCancelMidCall:
		target = &member{name: "trap:"} // the run whose model call or tool call takes the trap
	}
	ev.target, ev.from = target.name, time.Now()
	var err error
	switch kind {
	case faultKill, faultLeaderKill:
		err = in.kill(ctx, target, syscall.SIGKILL, hold, &ev)
	case faultTerm:
		err = in.kill(ctx, target, syscall.SIGTERM, hold, &ev)
	case faultStop, faultLeaderStop:
		if err = target.signal(syscall.SIGSTOP); err == nil {
			target.mu.Lock()
			target.stopped = true
			target.mu.Unlock()
			pause(ctx, hold)
			target.mu.Lock()
			target.stopped = false
			target.mu.Unlock()
			err = target.signal(syscall.SIGCONT)
		}
	case faultPartition, faultLeaderPartition:
		if err = c.lab.partition(target.host, true); err == nil {
			pause(ctx, hold)
			err = c.lab.partition(target.host, false)
		}
	case faultDiskFull:
		for _, d := range c.disks {
			if d.m == target {
				err = in.diskFull(ctx, d, hold, &ev)
			}
		}
	case faultExecKillBefore, faultExecKillAfter, faultOwnerStop, faultStepsLeaderKill, faultStepsStepdown:
		err = in.trapFault(ctx, kind, hold, &ev)
	case faultReload:
		err = c.reloadPolicy(i)
	case faultOwnerStopPropose, faultOwnerKillPropose, faultOwnerStopDecide, faultOwnerKillDecide:
		err = in.proposeFault(ctx, kind, hold, &ev)
	case faultCancelMidPropose, faultCancelKillOwner, faultCancelMidCall:
		err = in.cancelFault(ctx, kind, hold, &ev)
	case faultSlow:
		ev.note = c.lab.slowKind()
		hold = in.dur(2*time.Second, 4*time.Second)
		if err = c.lab.slow(target.host, true); err == nil {
			pause(ctx, hold)
			err = c.lab.slow(target.host, false)
		}
	}
	ev.to = time.Now()
	in.mu.Lock()
	in.events = append(in.events, ev)
	in.mu.Unlock()
	if err != nil {
		return fmt.Errorf("fault %s: %w", ev, err)
	}
	return nil
}

// kill signals the target, waits for its exit, holds, and restarts it.
func (in *injector) kill(ctx context.Context, m *member, sig syscall.Signal, hold time.Duration, ev *faultEvent) error {
	p := m.current()
	if err := m.signal(sig); err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Done()
		ev.note = "did not exit within 60s of " + sig.String() + ": killed"
	}
	pause(ctx, hold)
	return m.start(120 * time.Second)
}

// counts are the faults injected by kind.
func (in *injector) counts() map[faultKind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[faultKind]int{}
	for _, e := range in.events {
		out[e.kind]++
	}
	return out
}

// near lists the faults within window of t.
func (in *injector) near(t time.Time, window time.Duration) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, e := range in.events {
		if t.After(e.from.Add(-window)) && t.Before(e.to.Add(window)) {
			out = append(out, e.String())
		}
	}
	if len(out) == 0 {
		return "no fault within " + window.String()
	}
	return strings.Join(out, "; ")
}

func formatCounts(m map[faultKind]int) string {
	var keys []string
	total := 0
	for k, v := range m {
		keys = append(keys, string(k))
		total += v
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[faultKind(k)]))
	}
	return fmt.Sprintf("%d {%s}", total, strings.Join(parts, " "))
}
