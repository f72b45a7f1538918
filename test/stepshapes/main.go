// Command stepshapes measures shapes of a governed step's durable writes
// against each other and against the floor (../shared/bench/floor/
// stepbench), interleaved in one invocation on the same machine, so that
// the next change of the step path is chosen by evidence (issue 14,
// session 19). It is not XCT: it does a step's calls and writes with
// the same libraries and the same embedded JetStream server, in each
// variant's shape, and nothing else.
//
//	go run ./test/stepshapes -floor ../shared/bench/floor          # interval sync
//	go run ./test/stepshapes -floor ../shared/bench/floor -sync    # and sync always
//
// A step, in every variant but h0: one gRPC call to a validator stand-in
// (which signs a verdict with Ed25519), one to an executor stand-in
// (which verifies it and writes the step's two records, pending and
// outcome, to a KV bucket as the executor does: expected last revision,
// each waited for inside the call), the chain's four events (step_start,
// verdict, tool_call, step_end) on the run's subject of an LCTL-like
// stream (message id <chain>/<seq>, expected last subject sequence), and
// a tracer stand-in: a durable pull consumer of every chain event, acked
// in batches (AckAll), which checks each message is JSON. The variants
// differ only in how the writes are made:
//
//	h0  the floor's work in this harness: 4 appends waited, no records,
//	    verdicts or tracer (calibrates the harness against the floor)
//	a   today's shape: 4 appends + 2 records, each waited for
//	b   step_start sent before Validate and waited for after it, step_end
//	    sent after tool_call and waited for at the next step's start
//	c   one message per decision point: [step_start, verdict] as one
//	    message, [tool_call, step_end] as another (NDJSON: events
//	    separated by newlines, each event's bytes as today)
//	d   group commit: one orchestrator-level batcher sends every run's
//	    waiting append at once and releases them when all are acked;
//	    the executor's records likewise through its own batcher
//	cd  c's two messages through d's batchers
//	dA  d with each flush one atomic batch (Nats-Batch-*) across runs
//
// Figures: steps/s, p50 and p99 per step, CPU per step (this process's
// user+system time, which holds every part, over the steps in the
// window; for the floor, its process's over its steps), ratios to the
// floor at the same concurrency, medians of the repetitions.
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/internal/eventlog"
)

const (
	chainStream = "LCTL"
	chainPrefix = "lctl.chain."
	stepsBucket = "XCT_STEPS"
	stepsStream = "KV_" + stepsBucket
	stepsPrefix = "$KV." + stepsBucket + "."
	writeBound  = 5 * time.Second
)

func main() {
	floorDir := flag.String("floor", "../shared/bench/floor", "the floor's module")
	reps := flag.Int("reps", 3, "interleaved repetitions")
	d := flag.Duration("d", 3*time.Second, "measured time per variant and level")
	warm := flag.Duration("warm", 500*time.Millisecond, "time run before the measured window")
	levelsFlag := flag.String("c", "1,64,256", "concurrent runs")
	variantsFlag := flag.String("variants", "h0,a,b,c,d,cd,dA", "variants to run")
	syncAlways := flag.Bool("sync", false, "also measure with an fsync per write (sync always; floor -syncalways)")
	onlySync := flag.Bool("onlysync", false, "measure only with sync always")
	replicas := flag.Int("replicas", 1, "stream replicas: 1 (one embedded server), or 3 (a cluster of three in this process; the floor, which makes its stream with one replica, is not run)")
	flag.Parse()
	if *replicas != 1 && *replicas != 3 {
		fmt.Fprintln(os.Stderr, "stepshapes: -replicas 1 or 3")
		os.Exit(2)
	}
	if *replicas > 1 {
		*floorDir = ""
	}
	if err := run(*floorDir, *reps, *d, *warm, *levelsFlag, *variantsFlag, *syncAlways, *onlySync, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "stepshapes:", err)
		os.Exit(1)
	}
}

// errNoStep is a measurement in whose window no step ended.
var errNoStep = errors.New("no step in the window")

// result is one measurement.
type result struct {
	steps     float64 // per second
	p50, p99  float64 // ms
	cpuPerOp  float64 // µs
	completed int
	lagged    bool    // the tracer had not caught up 10 s after the window
	syscalls  float64 // read and write system calls per step (this process's; 0 for the floor)
}

func run(floorDir string, reps int, d, warm time.Duration, levelsFlag, variantsFlag string, syncAlways, onlySync bool, replicas int) error {
	var levels []int
	for _, s := range strings.Split(levelsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: %q", s)
		}
		levels = append(levels, n)
	}
	var vs []variant
	for _, name := range strings.Split(variantsFlag, ",") {
		i := slices.IndexFunc(variants, func(v variant) bool { return v.name == name })
		if i < 0 {
			return fmt.Errorf("-variants: no variant %q", name)
		}
		vs = append(vs, variants[i])
	}
	modes := []bool{false}
	switch {
	case onlySync:
		modes = []bool{true}
	case syncAlways:
		modes = append(modes, true)
	}
	floorBin := ""
	if floorDir != "" {
		abs, err := filepath.Abs(floorDir)
		if err != nil {
			return err
		}
		tmp, err := os.MkdirTemp("", "stepshapes-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		floorBin = filepath.Join(tmp, "stepbench")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", floorBin, "./stepbench") //nolint:gosec // go with this program's own arguments
		cmd.Dir, cmd.Stderr = abs, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build the floor in %s: %w", abs, err)
		}
	}
	h, err := newHarness(modes, replicas)
	if err != nil {
		return err
	}
	defer h.close()
	fmt.Println(machineLine())
	fmt.Printf("streams of %d replica(s)\n", replicas)
	// got[sync][level][variant] holds one result per repetition.
	got := map[bool]map[int]map[string][]result{}
	for _, sync := range modes {
		got[sync] = map[int]map[string][]result{}
		for _, l := range levels {
			got[sync][l] = map[string][]result{}
		}
	}
	for rep := 1; rep <= reps; rep++ {
		for _, sync := range modes {
			for _, l := range levels {
				fmt.Fprintf(os.Stderr, "rep %d/%d sync=%v runs=%d load %s\n", rep, reps, sync, l, loadavg())
				if floorBin != "" {
					r, err := runFloor(floorBin, l, d, sync)
					if err != nil {
						return err
					}
					got[sync][l]["floor"] = append(got[sync][l]["floor"], r)
				}
				for _, v := range vs {
					r, err := h.measure(v, l, sync, warm, d)
					if errors.Is(err, errNoStep) {
						// (a loaded machine: the figure is left out
						// of the medians, and said)
						fmt.Fprintf(os.Stderr, "  %-5s runs=%-4d no step ended in the window: left out\n", v.name, l)
						continue
					}
					if err != nil {
						return fmt.Errorf("%s at %d runs (sync always %v): %w", v.name, l, sync, err)
					}
					got[sync][l][v.name] = append(got[sync][l][v.name], r)
				}
			}
		}
	}
	fmt.Printf("load after: %s\n", loadavg())
	names := []string{}
	if floorBin != "" {
		names = append(names, "floor")
	}
	for _, v := range vs {
		names = append(names, v.name)
	}
	for _, sync := range modes {
		printTable(sync, reps, levels, names, got[sync])
	}
	return nil
}

func printTable(sync bool, reps int, levels []int, names []string, got map[int]map[string][]result) {
	mode := "interval sync (the default)"
	if sync {
		mode = "sync always (an fsync per write; floor -syncalways)"
	}
	fmt.Printf("\n%s; medians of %d interleaved repetitions\n", mode, reps)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "runs\tvariant\tsteps/s\t/floor\tp50 ms\tp50/floor\tp99 ms\tCPU µs/step\tCPU/floor\tsyscalls/step\ttracer behind\t")
	for _, l := range levels {
		floor := got[l]["floor"]
		fs := median(floor, func(r result) float64 { return r.steps })
		fp := median(floor, func(r result) float64 { return r.p50 })
		for _, n := range names {
			rs := got[l][n]
			s, p50 := median(rs, func(r result) float64 { return r.steps }), median(rs, func(r result) float64 { return r.p50 })
			ratio, pratio := "-", "-"
			if fs > 0 {
				ratio, pratio = fmt.Sprintf("%.2f", s/fs), fmt.Sprintf("%.2f", p50/fp)
			}
			behind := 0
			for _, r := range rs {
				if r.lagged {
					behind++
				}
			}
			cpu, cratio := median(rs, func(r result) float64 { return r.cpuPerOp }), "-"
			if fc := median(floor, func(r result) float64 { return r.cpuPerOp }); fc > 0 {
				cratio = fmt.Sprintf("%.2f", cpu/fc)
			}
			fmt.Fprintf(w, "%d\t%s\t%.0f\t%s\t%.3f\t%s\t%.3f\t%.0f\t%s\t%.1f\t%d/%d\t\n", l, n, s, ratio, p50, pratio,
				median(rs, func(r result) float64 { return r.p99 }), cpu, cratio, median(rs, func(r result) float64 { return r.syscalls }), behind, len(rs))
		}
	}
	_ = w.Flush()
}

func median(rs []result, f func(result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	switch n := len(xs); {
	case n == 0:
		return 0
	case n%2 == 1:
		return xs[n/2]
	default:
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

// floorLine matches stepbench's report.
var floorLine = regexp.MustCompile(`runs=(\d+)\s+n=(\d+)\s+p50=([\d.]+)us\s+p99=([\d.]+)us\s+p999=[\d.]+us\s+ops/s=([\d.]+)`)

// runFloor runs the floor at one level in a process of its own, whose CPU
// time over its steps is the floor's CPU per step (its start and stream
// creation included: a slight overestimate).
func runFloor(bin string, runs int, d time.Duration, sync bool) (result, error) {
	args := []string{"-k", "4", "-c", strconv.Itoa(runs), "-d", d.String()}
	if sync {
		args = append(args, "-syncalways")
	}
	cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // the floor this program built, with its own arguments
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("the floor: %w", err)
	}
	m := floorLine.FindStringSubmatch(string(out))
	if m == nil {
		return result{}, fmt.Errorf("the floor printed no result:\n%s", out)
	}
	n, _ := strconv.Atoi(m[2])
	p50, _ := strconv.ParseFloat(m[3], 64)
	p99, _ := strconv.ParseFloat(m[4], 64)
	ops, _ := strconv.ParseFloat(m[5], 64)
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return result{steps: ops, p50: p50 / 1e3, p99: p99 / 1e3, cpuPerOp: float64(cpu.Microseconds()) / float64(max(n, 1)), completed: n}, nil
}

// harness is the embedded servers (one per sync setting) and the gRPC
// stand-ins, kept for the whole invocation.
type harness struct {
	dirs    []string
	servers map[bool]*server.Server
	grpcs   []*grpc.Server
	valAddr string
	exeAddr string
	exe     *executor
	val     *validator
	priv    ed25519.PrivateKey
	// replicas of the streams: 1, one server per sync setting; 3, a
	// cluster of three in this process on loopback per sync setting
	// (every client on its first node).
	replicas int
	others   []*server.Server // the clusters' other nodes
}

// start starts the server (replicas 1) or cluster (3) of one sync setting.
func (h *harness) start(sync bool, replicas int) ([]*server.Server, error) {
	n := 1
	var routes []string
	var ports []int
	if replicas > 1 {
		n = replicas
		for range n {
			var lc net.ListenConfig
			l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			port := l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
			ports = append(ports, port)
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", port))
		}
	}
	var nodes []*server.Server
	for i := range n {
		dir, err := os.MkdirTemp("", "stepshapes-store-")
		if err != nil {
			return nil, err
		}
		h.dirs = append(h.dirs, dir)
		opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, SyncAlways: sync}
		if n > 1 {
			opts.ServerName = fmt.Sprintf("n%d-%v", i, sync)
			opts.Cluster = server.ClusterOpts{Name: fmt.Sprintf("c-%v", sync), Host: "127.0.0.1", Port: ports[i]}
			opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			return nil, err
		}
		srv.Start()
		if i == 0 {
			h.servers[sync] = srv
		} else {
			h.others = append(h.others, srv)
		}
		nodes = append(nodes, srv)
	}
	for _, srv := range nodes {
		if !srv.ReadyForConnections(10 * time.Second) {
			return nil, errors.New("an embedded server did not start")
		}
	}
	// A cluster serves JetStream once it elected a meta leader.
	for until := time.Now().Add(time.Minute); n > 1; time.Sleep(100 * time.Millisecond) {
		if slices.ContainsFunc(nodes, (*server.Server).JetStreamIsLeader) {
			break
		}
		if time.Now().After(until) {
			return nil, errors.New("the cluster elected no JetStream meta leader in a minute")
		}
	}
	return nodes, nil
}

func newHarness(modes []bool, replicas int) (*harness, error) {
	h := &harness{servers: map[bool]*server.Server{}, replicas: replicas}
	for _, sync := range modes {
		nodes, err := h.start(sync, replicas)
		if err != nil {
			h.close()
			return nil, err
		}
		h.servers[sync] = nodes[0]
	}
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	h.priv = priv
	h.exe = &executor{}
	h.val = &validator{priv: priv}
	if h.valAddr, err = h.serve(h.val); err != nil {
		return nil, err
	}
	if h.exeAddr, err = h.serve(h.exe); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) serve(svc healthpb.HealthServer) (string, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, svc)
	go func() { _ = s.Serve(lis) }()
	h.grpcs = append(h.grpcs, s)
	return lis.Addr().String(), nil
}

func (h *harness) close() {
	for _, s := range h.grpcs {
		s.Stop()
	}
	for _, s := range h.servers {
		s.Shutdown()
	}
	for _, s := range h.others {
		s.Shutdown()
	}
	for _, d := range h.dirs {
		_ = os.RemoveAll(d)
	}
}

// validator stands in for Validate: it signs a verdict (when asked to).
type validator struct {
	healthpb.UnimplementedHealthServer
	priv ed25519.PrivateKey
	sign atomic.Bool
}

var serving = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}

func (v *validator) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if v.sign.Load() {
		msg := make([]byte, 0, 256)
		msg = append(msg, req.GetService()...)
		msg = append(msg, verdictBody[:256-len(msg)]...)
		_ = ed25519.Sign(v.priv, msg)
	}
	return serving, nil
}

// executor stands in for Execute: it verifies the verdict and writes the
// step's pending and outcome records, each waited for.
type executor struct {
	healthpb.UnimplementedHealthServer
	cfg atomic.Pointer[execCfg]
}

type execCfg struct {
	pub    ed25519.PublicKey
	msg    []byte
	sig    []byte
	verify bool
	write  func(subject string, data []byte, expect uint64) (uint64, error) // nil: no records
}

func (e *executor) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	c := e.cfg.Load()
	if c.verify && !ed25519.Verify(c.pub, c.msg, c.sig) {
		return nil, errors.New("verdict does not verify")
	}
	if c.write != nil {
		subj := stepsPrefix + req.GetService()
		rev, err := c.write(subj, pendingBody, 0)
		if err != nil {
			return nil, fmt.Errorf("pending record: %w", err)
		}
		if _, err := c.write(subj, outcomeBody, rev); err != nil {
			return nil, fmt.Errorf("outcome record: %w", err)
		}
	}
	return serving, nil
}

// Bodies of the sizes a step's messages have (sealed LCTL events with
// their hashes; the executor's protojson records), padded JSON.
var (
	startBody   = body("step_start", 520)
	verdictBody = body("verdict", 700)
	toolBody    = body("tool_call", 650)
	endBody     = body("step_end", 450)
	pendingBody = body("pending", 350)
	outcomeBody = body("outcome", 450)
)

func body(kind string, size int) []byte {
	b := []byte(`{"type":"` + kind + `","chain_id":"run-0000","seq":1,"hash":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","pad":"`)
	b = append(b, bytes.Repeat([]byte("x"), max(0, size-len(b)-2))...)
	return append(b, `"}`...)
}

// pack is several events as one stored message: their bodies separated
// by newlines (an event's canonical JSON holds none).
func pack(events ...[]byte) []byte {
	return bytes.Join(events, []byte("\n"))
}

// writer is how a variant's caller makes one waited write.
type writer interface {
	write(subject string, data []byte, msgID string, expect uint64) (uint64, error)
}

// direct is today's write: eventlog.Publisher, one request each.
type direct struct{ p *eventlog.Publisher }

func (d direct) write(subject string, data []byte, msgID string, expect uint64) (uint64, error) {
	ack, err := d.p.PublishWithin(writeBound, subject, data, msgID, expect)
	return ack.Seq, err
}

// refusedInProcess counts the writes a replicated stream refused with
// "wrong last sequence" (10164) although the run's previous write was
// acknowledged: nats-server (2.15.2, jetstream_cluster.go) sends a write's
// ack from processJetStreamMsg before it clears the subject's
// expected-sequence-in-process mark, so a next write that arrives in
// between is refused as if another were in flight. It was not stored,
// so it is sent again.
var refusedInProcess atomic.Int64

// retrying sends a write again while a replicated stream refuses it for
// its subject's previous write still marked in process.
type retrying struct{ w writer }

func (r retrying) write(subject string, data []byte, msgID string, expect uint64) (uint64, error) {
	for try := 0; ; try++ {
		seq, err := r.w.write(subject, data, msgID, expect)
		if err == nil || try == 1000 || !inProcess(err) {
			return seq, err
		}
		refusedInProcess.Add(1)
		time.Sleep(50 * time.Microsecond)
	}
}

func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return strings.Contains(err.Error(), "refused: 10164 ")
}

// measure runs v at runs concurrent runs for warm+d on a fresh stream and
// bucket, and reports the window d.
func (h *harness) measure(v variant, runs int, syncAlways bool, warm, d time.Duration) (result, error) {
	srv := h.servers[syncAlways]
	conns := make([]*nats.Conn, 3) // orchestrator, executor, tracer
	for i := range conns {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		conns[i] = nc
	}
	oc, ec, tc := conns[0], conns[1], conns[2]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := jetstream.New(oc)
	if err != nil {
		return result{}, err
	}
	for _, s := range []string{chainStream, stepsStream} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return result{}, err
		}
	}
	// (a cluster just started has no meta leader yet: retried)
	for try := 0; ; try++ {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: chainStream, Subjects: []string{chainPrefix + "*"},
			Storage: jetstream.FileStorage, Duplicates: time.Hour, DenyDelete: true, DenyPurge: true,
			AllowAtomicPublish: v.atomic, Replicas: h.replicas})
		if err == nil || try == 60 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return result{}, err
	}
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: stepsBucket, History: 16, TTL: 24 * time.Hour, Storage: jetstream.FileStorage, Replicas: h.replicas})
	if err != nil {
		return result{}, err
	}
	if v.atomic {
		st, err := js.Stream(ctx, stepsStream)
		if err != nil {
			return result{}, err
		}
		cfg := st.CachedInfo().Config
		cfg.AllowAtomicPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return result{}, err
		}
	}

	// The tracer stand-in.
	var consumed atomic.Int64
	tracerDone := make(chan error, 1)
	if v.tracer {
		tjs, err := jetstream.New(tc)
		if err != nil {
			return result{}, err
		}
		cons, err := tjs.CreateConsumer(ctx, chainStream, jetstream.ConsumerConfig{Durable: "tracer", FilterSubject: chainPrefix + "*",
			DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckAllPolicy, AckWait: time.Minute, MaxAckPending: 20000})
		if err != nil {
			return result{}, err
		}
		iter, err := cons.Messages(jetstream.PullMaxMessages(1024))
		if err != nil {
			return result{}, err
		}
		stop := context.AfterFunc(ctx, iter.Stop)
		defer stop()
		go func() {
			n := 0
			for {
				m, err := iter.Next()
				if err != nil {
					tracerDone <- nil
					return
				}
				for ev := range bytes.SplitSeq(m.Data(), []byte("\n")) {
					if !json.Valid(ev) {
						tracerDone <- errors.New("tracer: an event is not JSON")
						return
					}
				}
				consumed.Add(1)
				if n++; n%256 == 0 {
					_ = m.Ack()
				}
			}
		}()
	} else {
		tracerDone <- nil
	}

	// The writers.
	var chainW, recW writer
	switch {
	case v.batched:
		ob := newBatcher(oc, chainStream, v.atomic)
		defer ob.stop()
		eb := newBatcher(ec, stepsStream, v.atomic)
		defer eb.stop()
		chainW, recW = ob, eb
	default:
		chainW, recW = direct{eventlog.NewPublisher(oc, chainStream)}, direct{eventlog.NewPublisher(ec, stepsStream)}
	}
	if h.replicas > 1 {
		chainW, recW = retrying{chainW}, retrying{recW}
	}
	var async *asyncPub
	if v.name == "b" {
		if async, err = newAsyncPub(oc, chainStream); err != nil {
			return result{}, err
		}
		defer async.stop()
	}
	msg := verdictBody[:256]
	cfg := &execCfg{pub: h.priv.Public().(ed25519.PublicKey), msg: msg, sig: ed25519.Sign(h.priv, msg), verify: v.verdicts}
	if v.records {
		cfg.write = func(subject string, data []byte, expect uint64) (uint64, error) {
			return recW.write(subject, data, "", expect)
		}
	}
	h.exe.cfg.Store(cfg)
	h.val.sign.Store(v.verdicts)

	vconn, err := grpc.NewClient(h.valAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer vconn.Close()
	econn, err := grpc.NewClient(h.exeAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer econn.Close()
	st := &stepper{val: healthpb.NewHealthClient(vconn), exe: healthpb.NewHealthClient(econn), chain: chainW, async: async}
	var published atomic.Int64
	if v.tracer {
		st.published = &published
	}

	// Run: every run goroutine steps until stop; only steps that end
	// inside [winStart, winEnd) count.
	var (
		stopFlag   atomic.Bool
		inWindow   atomic.Bool
		wg         sync.WaitGroup
		mu         sync.Mutex
		lats       []time.Duration
		firstErr   error
		errOnce    sync.Once
		windowDone atomic.Int64
	)
	for g := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := &runState{chain: fmt.Sprintf("run-%d-%d", runs, g)}
			rs.subject = chainPrefix + rs.chain
			local := make([]time.Duration, 0, 4096)
			for !stopFlag.Load() {
				t := time.Now()
				if err := v.step(st, rs); err != nil {
					errOnce.Do(func() { firstErr = err })
					stopFlag.Store(true)
					break
				}
				st.steps.Add(1)
				if inWindow.Load() {
					local = append(local, time.Since(t))
					windowDone.Add(1)
				}
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	// CPU per step: from the window's start until every run stopped and
	// the tracer consumed as many messages as were written since the
	// window's start (it may lag: its backlog at the start is left as
	// it found it), over every step made since the window's start.
	time.Sleep(warm)
	ru0, sc0, steps0, pub0, cons0, ref0 := cpuNow(), syscallsNow(), st.steps.Load(), published.Load(), consumed.Load(), refusedInProcess.Load()
	t0 := time.Now()
	inWindow.Store(true)
	time.Sleep(d)
	inWindow.Store(false)
	elapsed := time.Since(t0)
	n := windowDone.Load()
	stopFlag.Store(true)
	wg.Wait()
	lagged := false
	// (a tracer ahead of the count at the start, which counts a write
	// once its ack is read, is taken as level)
	lag0 := max(pub0-cons0, 0)
	for until := time.Now().Add(10 * time.Second); consumed.Load() < published.Load()-lag0; {
		if time.Now().After(until) {
			lagged = true
			break
		}
		time.Sleep(time.Millisecond)
	}
	ru1, sc1, steps1, ref1 := cpuNow(), syscallsNow(), st.steps.Load(), refusedInProcess.Load()
	cancel()
	if err := <-tracerDone; err != nil {
		return result{}, err
	}
	if firstErr != nil {
		return result{}, firstErr
	}
	if n == 0 {
		return result{}, errNoStep
	}
	slices.Sort(lats)
	q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) / 1e3 }
	r := result{steps: float64(n) / elapsed.Seconds(), p50: q(0.5), p99: q(0.99), cpuPerOp: float64((ru1 - ru0).Microseconds()) / float64(steps1-steps0), completed: int(n), lagged: lagged,
		syscalls: float64(sc1-sc0) / float64(steps1-steps0)}
	fmt.Fprintf(os.Stderr, "  %-5s runs=%-4d steps/s=%-7.0f p50=%.3fms cpu=%.0fµs/step syscalls=%.1f/step refused-in-process=%d tracer lag at start %d, caught up %v\n",
		v.name, runs, r.steps, r.p50, r.cpuPerOp, r.syscalls, ref1-ref0, pub0-cons0, !lagged)
	return r, nil
}

// syscallsNow is this process's read and write system calls so far
// (/proc/self/io: syscr + syscw; 0 where there is none).
func syscallsNow() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stepper holds what every run's steps share.
type stepper struct {
	val, exe healthpb.HealthClient
	chain    writer
	async    *asyncPub
	// published counts the chain messages written (nil: not counted).
	published *atomic.Int64
	steps     atomic.Int64
}

func (st *stepper) wrote() {
	if st.published != nil {
		st.published.Add(1)
	}
}

// runState is one run's chain.
type runState struct {
	chain   string
	subject string
	seq     uint64 // chain seq of the last event
	last    uint64 // stream seq of the last event
	step    int
	pending *pending // b: the step_end in flight
}

func (rs *runState) append(st *stepper, data []byte) error {
	rs.seq++
	seq, err := st.chain.write(rs.subject, data, rs.chain+"/"+strconv.FormatUint(rs.seq, 10), rs.last)
	if err != nil {
		return fmt.Errorf("append %s/%d: %w", rs.chain, rs.seq, err)
	}
	st.wrote()
	rs.last = seq
	return nil
}

// appendPacked appends k events stored as one message, whose id is that
// of its last event.
func (rs *runState) appendPacked(st *stepper, k int, data []byte) error {
	rs.seq += uint64(k)
	seq, err := st.chain.write(rs.subject, data, rs.chain+"/"+strconv.FormatUint(rs.seq, 10), rs.last)
	if err != nil {
		return fmt.Errorf("append %s/..%d: %w", rs.chain, rs.seq, err)
	}
	st.wrote()
	rs.last = seq
	return nil
}

func (rs *runState) stepID() string {
	rs.step++
	return rs.chain + "-" + strconv.Itoa(rs.step)
}

// variant is one shape of a step.
type variant struct {
	name     string
	tracer   bool
	records  bool
	verdicts bool
	batched  bool
	atomic   bool
	step     func(st *stepper, rs *runState) error
}

func call(c healthpb.HealthClient, id string) error {
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: id})
	return err
}

// stepWaited is today's order: step_start, Validate, verdict, Execute,
// tool_call, step_end, each append waited for.
func stepWaited(st *stepper, rs *runState) error {
	id := rs.stepID()
	if err := rs.append(st, startBody); err != nil {
		return err
	}
	if err := call(st.val, id); err != nil {
		return err
	}
	if err := rs.append(st, verdictBody); err != nil {
		return err
	}
	if err := call(st.exe, id); err != nil {
		return err
	}
	if err := rs.append(st, toolBody); err != nil {
		return err
	}
	return rs.append(st, endBody)
}

// stepPipelined (b): step_start is sent before Validate and its ack
// awaited after it; step_end is sent after tool_call and its ack awaited
// at the next step's start. Each write still names the stream sequence of
// the one before, so each waits for its predecessor's ack before it is
// sent: what is pipelined is the ack's wait with a call.
func stepPipelined(st *stepper, rs *runState) error {
	id := rs.stepID()
	if rs.pending != nil {
		seq, err := rs.pending.wait()
		rs.pending = nil
		if err != nil {
			return fmt.Errorf("step_end of %s: %w", rs.chain, err)
		}
		st.wrote()
		rs.last = seq
	}
	rs.seq++
	ps, err := st.async.send(rs.subject, startBody, rs.chain+"/"+strconv.FormatUint(rs.seq, 10), rs.last)
	if err != nil {
		return err
	}
	if err := call(st.val, id); err != nil {
		return err
	}
	seq, err := ps.wait()
	if err != nil {
		return fmt.Errorf("step_start of %s: %w", rs.chain, err)
	}
	st.wrote()
	rs.last = seq
	if err := rs.append(st, verdictBody); err != nil {
		return err
	}
	if err := call(st.exe, id); err != nil {
		return err
	}
	if err := rs.append(st, toolBody); err != nil {
		return err
	}
	rs.seq++
	rs.pending, err = st.async.send(rs.subject, endBody, rs.chain+"/"+strconv.FormatUint(rs.seq, 10), rs.last)
	return err
}

// c's two messages: step_start goes with the verdict that follows it,
// step_end with the tool_call it follows (both are known when the
// outcome is: today's run.go appends step_end right after tool_call).
var (
	packedStartVerdict = pack(startBody, verdictBody)
	packedToolEnd      = pack(toolBody, endBody)
)

// stepPacked (c): one message per decision point, each waited for:
// [step_start, verdict] after Validate, [tool_call, step_end] after
// Execute.
func stepPacked(st *stepper, rs *runState) error {
	id := rs.stepID()
	if err := call(st.val, id); err != nil {
		return err
	}
	if err := rs.appendPacked(st, 2, packedStartVerdict); err != nil {
		return err
	}
	if err := call(st.exe, id); err != nil {
		return err
	}
	return rs.appendPacked(st, 2, packedToolEnd)
}

var variants = []variant{
	{name: "h0", step: stepWaited},
	{name: "a", tracer: true, records: true, verdicts: true, step: stepWaited},
	{name: "b", tracer: true, records: true, verdicts: true, step: stepPipelined},
	{name: "c", tracer: true, records: true, verdicts: true, step: stepPacked},
	{name: "d", tracer: true, records: true, verdicts: true, batched: true, step: stepWaited},
	{name: "cd", tracer: true, records: true, verdicts: true, batched: true, step: stepPacked},
	{name: "dA", tracer: true, records: true, verdicts: true, batched: true, atomic: true, step: stepWaited},
}

func machineLine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("machine: %s, %d cores, %s %s/%s, load %s", model, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadavg())
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
