package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The network lab: every process of a netns phase runs on its own "test
// host", a Linux network namespace with only lo and veth ends. The hosts
// meet on two bridges inside a switch namespace:
//
//   - the NATS net, 169.254.71.0/24: the nats-server nodes and every
//     service (and the test, at .1, to read the chains);
//   - the RPC net, 169.254.72.0/24: the services, the ledger tool, and the
//     test (.1) as the model and the client.
//
// NOTHING LEAVES THIS MACHINE: the addresses are IPv4 link-local
// (169.254.0.0/16, never routed), no namespace has a default route or any
// route beyond its two /24s, the bridges have no uplink, and the root
// namespace only gains the two link-local /24s on veths whose peers sit on
// those bridges. Deleting the namespaces deletes every veth of the lab.
//
// A partition takes a host's port on the NATS bridge down: the service
// still reaches its peers over the RPC net, but not NATS (for a NATS node:
// not its cluster peers nor any client). A slow link shapes a host's NATS
// interface with `tc`: netem delay where the kernel has sch_netem, a token
// bucket (tbf) that queues traffic where it does not.
const (
	natsNet = "169.254.71."
	rpcNet  = "169.254.72."
)

// netLab is one phase's namespaces.
type netLab struct {
	prefix string // namespace and interface name prefix, unique per test process
	sw     string // the switch namespace
	netem  bool   // the kernel has sch_netem

	mu    sync.Mutex
	hosts []*netHost
}

// netHost is one test host.
type netHost struct {
	name   string
	ns     string
	natsIP string
	rpcIP  string
	// natsPort is the host's port on the NATS bridge (in the switch
	// namespace); downing it is the partition.
	natsPort string
	slowed   bool
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput() //nolint:gosec,noctx // G204: argv from the test, no shell
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func nsCmd(ns string, args ...string) error {
	return ipCmd(append([]string{"netns", "exec", ns}, args...)...)
}

// newNetLab creates the switch namespace, its two bridges and the root
// namespace's two veths into them. It fails saying why when network
// namespaces cannot be made here.
func newNetLab(tag string) (*netLab, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root (ip netns add); run make chaos as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the ip command (iproute2) is missing: make chaos-deps installs it")
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return nil, errors.New("the tc command (iproute2) is missing: make chaos-deps installs it")
	}
	cleanStaleLabs()
	l := &netLab{prefix: fmt.Sprintf("xc%d%s", os.Getpid()%100000, tag)}
	l.sw = l.prefix + "-sw"
	steps := [][]string{
		{"netns", "add", l.sw},
		{"-n", l.sw, "link", "set", "lo", "up"},
		{"-n", l.sw, "link", "add", "bnats", "type", "bridge"},
		{"-n", l.sw, "link", "add", "brpc", "type", "bridge"},
		{"-n", l.sw, "link", "set", "bnats", "up"},
		{"-n", l.sw, "link", "set", "brpc", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			l.Close()
			return nil, fmt.Errorf("network namespaces unavailable: %w", err)
		}
	}
	// The root namespace's ends: .1 on both nets.
	for _, n := range []struct{ net, bridge, suffix string }{{natsNet, "bnats", "n"}, {rpcNet, "brpc", "r"}} {
		if err := l.veth("", l.prefix+n.suffix+"0", l.prefix+n.suffix+"0s", n.bridge, "", n.net+"1"); err != nil {
			l.Close()
			return nil, fmt.Errorf("network namespaces unavailable: %w", err)
		}
	}
	l.netem = l.probeNetem()
	return l, nil
}

// veth makes a pair: one end (inName) in namespace ns ("" is the root
// namespace) with address ip/24, renamed to rename when set; the other
// (swName) on the switch's bridge.
func (l *netLab) veth(ns, inName, swName, bridge, rename, ip string) error {
	steps := [][]string{
		{"link", "add", inName, "type", "veth", "peer", "name", swName},
		{"link", "set", swName, "netns", l.sw},
		{"-n", l.sw, "link", "set", swName, "master", bridge},
		{"-n", l.sw, "link", "set", swName, "up"},
	}
	dev := inName
	if ns != "" {
		steps = append(steps, []string{"link", "set", inName, "netns", ns})
		if rename != "" {
			steps = append(steps, []string{"-n", ns, "link", "set", inName, "name", rename})
			dev = rename
		}
	}
	in := func(args ...string) []string {
		if ns == "" {
			return args
		}
		return append([]string{"-n", ns}, args...)
	}
	steps = append(steps, in("addr", "add", ip+"/24", "dev", dev), in("link", "set", dev, "up"))
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// addHost makes a test host with address .idx on the NATS net and, when
// rpc, on the RPC net.
func (l *netLab) addHost(name string, idx int, rpc bool) (*netHost, error) {
	h := &netHost{name: name, ns: l.prefix + "-" + name, natsIP: natsNet + strconv.Itoa(idx), natsPort: fmt.Sprintf("%sa%d", l.prefix, idx)}
	if err := ipCmd("netns", "add", h.ns); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if err := ipCmd("-n", h.ns, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	if err := l.veth(h.ns, fmt.Sprintf("%sb%d", l.prefix, idx), h.natsPort, "bnats", "natsnet", h.natsIP); err != nil {
		return nil, err
	}
	if rpc {
		h.rpcIP = rpcNet + strconv.Itoa(idx)
		if err := l.veth(h.ns, fmt.Sprintf("%sd%d", l.prefix, idx), fmt.Sprintf("%sc%d", l.prefix, idx), "brpc", "rpcnet", h.rpcIP); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// partition cuts (down) or heals (up) a host's link to the NATS net.
func (l *netLab) partition(h *netHost, cut bool) error {
	state := "up"
	if cut {
		state = "down"
	}
	return ipCmd("-n", l.sw, "link", "set", h.natsPort, state)
}

// slow shapes (or restores) the host's NATS interface.
func (l *netLab) slow(h *netHost, on bool) error {
	if !on {
		if !h.slowed {
			return nil
		}
		h.slowed = false
		return nsCmd(h.ns, "tc", "qdisc", "del", "dev", "natsnet", "root")
	}
	h.slowed = true
	if l.netem {
		return nsCmd(h.ns, "tc", "qdisc", "add", "dev", "natsnet", "root", "netem", "delay", "150ms", "50ms")
	}
	// No netem in this kernel: a token bucket of 64 kbit/s queues what
	// exceeds it for up to 2 s (so small requests wait behind bulk reads).
	return nsCmd(h.ns, "tc", "qdisc", "add", "dev", "natsnet", "root", "tbf", "rate", "64kbit", "burst", "1600", "latency", "2s")
}

// slowKind names what slow does on this kernel.
func (l *netLab) slowKind() string {
	if l.netem {
		return "latency(netem 150±50ms)"
	}
	return "latency(tbf 64kbit: no sch_netem in this kernel)"
}

// probeNetem tells whether tc can add a netem qdisc here (in the switch
// namespace, on its loopback, removed at once).
func (l *netLab) probeNetem() bool {
	if nsCmd(l.sw, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") != nil {
		return false
	}
	_ = nsCmd(l.sw, "tc", "qdisc", "del", "dev", "lo", "root")
	return true
}

// Close deletes every namespace of the lab (their veths go with them).
func (l *netLab) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hosts {
		_ = ipCmd("netns", "del", h.ns)
	}
	l.hosts = nil
	_ = ipCmd("netns", "del", l.sw)
}

// cleanStaleLabs deletes the namespaces of labs whose test process is gone
// (a run killed before its cleanup): names are xc<pid>...-<host>.
func cleanStaleLabs() {
	out, err := exec.Command("ip", "netns", "list").Output() //nolint:noctx // a short local command
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, "xc") || !strings.Contains(name, "-") {
			continue
		}
		digits := strings.TrimLeft(name[2:], "0123456789")
		pid, err := strconv.Atoi(name[2 : len(name)-len(digits)])
		if err != nil || pid == os.Getpid()%100000 {
			continue
		}
		if processAlive(pid) {
			continue
		}
		_ = ipCmd("netns", "del", name)
	}
}

// processAlive reports whether a process with this pid runs (pids are
// shortened to 5 digits in names; a live pid with the same digits keeps the
// lab, which is the safe side).
func processAlive(pid int) bool {
	for p := pid; p < 1<<22; p += 100000 {
		if syscall.Kill(p, 0) == nil {
			return true
		}
	}
	return false
}
