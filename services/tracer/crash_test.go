package tracer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
	"github.com/xct-dev/xct/services/tracer"
)

// Environment of a tracer run as a child process of the test binary
// (TestMain): the NATS server's URL, the data dir, and its
// Config.MaxAckPending (unset: the default).
const (
	childNATSEnv       = "XCT_TRACER_TEST_CHILD_NATS"
	childDataEnv       = "XCT_TRACER_TEST_CHILD_DATA"
	childAckPendingEnv = "XCT_TRACER_TEST_CHILD_MAX_ACK_PENDING"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childNATSEnv); url != "" {
		os.Exit(runChildTracer(url, os.Getenv(childDataEnv)))
	}
	os.Exit(m.Run())
}

// runChildTracer runs a tracer until the process is killed (or told to
// stop with SIGTERM, which stops it cleanly). It does not sync its files
// on its own before an hour: whatever it ingests is in its files unsynced
// when it is killed.
func runChildTracer(url, dataDir string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := nats.Connect(url, testutil.NATSAs("tracer"))
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	cfg := tracer.Config{DataDir: dataDir, Replicas: 1, SyncInterval: time.Hour}
	if v := os.Getenv(childAckPendingEnv); v != "" {
		if cfg.MaxAckPending, err = strconv.Atoi(v); err != nil {
			log.Error("max ack pending", "err", err)
			return 1
		}
	}
	svc, err := tracer.New(cfg, nc, log)
	if err != nil {
		log.Error("new tracer", "err", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		log.Error("start tracer", "err", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	if err := svc.Stop(ctx); err != nil {
		log.Error("stop tracer", "err", err)
		return 1
	}
	return 0
}

// startChildTracer starts a tracer process on e's data dir. Its log goes to
// the test's output.
func (e *env) startChildTracer(t *testing.T, url string) *exec.Cmd {
	t.Helper()
	return e.startChildTracerWith(t, url, 0)
}

// startChildTracerWith is startChildTracer with the tracer's
// Config.MaxAckPending (0: the default).
func (e *env) startChildTracerWith(t *testing.T, url string, maxAckPending int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childNATSEnv+"="+url, childDataEnv+"="+e.dataDir,
		childAckPendingEnv+"="+strconv.Itoa(maxAckPending))
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// publishBacklog puts chains of sealed events on the stream (as their
// writers would) and returns their ids ("prefix-00", "prefix-01", …).
func publishBacklog(t testing.TB, e *env, prefix string, chains, perChain int) []string {
	t.Helper()
	return publishBacklogPacked(t, e, prefix, chains, perChain, 1)
}

// publishBacklogPacked is publishBacklog with pack events in a stream
// message (eventlog's packs; 1: one event a message).
func publishBacklogPacked(t testing.TB, e *env, prefix string, chains, perChain, pack int) []string {
	t.Helper()
	js := e.log.JetStream()
	acked := func() {
		t.Helper()
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(waitTimeout):
			t.Fatal("backlog not acknowledged")
		}
	}
	var ids []string
	n := 0
	for c := range chains {
		id := fmt.Sprintf("%s-%02d", prefix, c)
		ids = append(ids, id)
		var msg []byte
		for i, ev := range lctltest.Chain(id, perChain, lctltest.Options{Seal: true}) {
			raw, err := ev.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if len(msg) > 0 {
				msg = append(msg, '\n')
			}
			msg = append(msg, raw...)
			if (i+1)%pack != 0 && i+1 < perChain {
				continue
			}
			if _, err := js.PublishAsync(eventlog.Subject(id), msg); err != nil {
				t.Fatal(err)
			}
			msg = nil
			// More publishes pending than the client allows stall, an
			// error, when a loaded machine's server falls behind: wait
			// for them now and then.
			if n++; n%1000 == 0 {
				acked()
			}
		}
	}
	acked()
	return ids
}

// writeLive appends steps to a chain until stop is closed, the way a run
// does while the tracer is killed.
func writeLive(t *testing.T, e *env, id string, stop <-chan struct{}) (wait func()) {
	t.Helper()
	w, err := e.log.NewChainWriter(id)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		for step := 1; ; step++ {
			for _, ev := range []ev{
				{"step_start", "m1", map[string]any{"step": float64(step)}},
				{"tool_call", "m1", map[string]any{"tool": "fs.read", "duration_ms": 3.0, "step": float64(step)}},
				{"step_end", "m1", map[string]any{"step": float64(step), "duration_ms": 5.0}},
			} {
				if _, err := w.Append(ctx, ev.typ, ev.agent, ev.data); err != nil {
					t.Errorf("append to %s: %v", id, err)
					return
				}
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	return func() { <-done }
}

// recordedPosition reads the position the tracer recorded in its data dir (0
// if none yet).
func recordedPosition(t *testing.T, dataDir string) uint64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "chains", ".stream-position"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var pos struct{ Seq uint64 }
	if err := json.Unmarshal(raw, &pos); err != nil {
		t.Fatalf("position file %q: %v", raw, err)
	}
	return pos.Seq
}

// sameAsStream checks that the tracer serves every chain exactly as the
// stream holds it (same events, same hashes, verified) and that each chain
// file holds each event once, in order.
func sameAsStream(t *testing.T, e *env, tr *running, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		want, err := e.log.ReadChain(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tr.waitFor(t, id, want[len(want)-1].Seq)
		got, err := tr.client.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Summary.Verified || len(got.Events) != len(want) {
			t.Fatalf("chain %s: %d events, verified %v (%s); the stream has %d",
				id, len(got.Events), got.Summary.Verified, got.Summary.VerifyError, len(want))
		}
		for i, pe := range got.Events {
			if pe.Seq != want[i].Seq || pe.Hash != want[i].Hash || pe.PrevHash != want[i].PrevHash {
				t.Fatalf("chain %s, event %d: seq %d hash %s; the stream has seq %d hash %s",
					id, i, pe.Seq, pe.Hash, want[i].Seq, want[i].Hash)
			}
		}
		lines := fileEvents(t, filepath.Join(e.dataDir, "chains", id+".jsonl"))
		if len(lines) != len(want) {
			t.Fatalf("chain file %s has %d events, the stream %d", id, len(lines), len(want))
		}
		for i, le := range lines {
			if le.Seq != want[i].Seq || le.Hash != want[i].Hash {
				t.Fatalf("chain file %s, line %d: seq %d hash %s; the stream has seq %d hash %s",
					id, i+1, le.Seq, le.Hash, want[i].Seq, want[i].Hash)
			}
		}
	}
}

// fileEvents decodes every line of a chain file.
func fileEvents(t *testing.T, path string) []lctl.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []lctl.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		e, err := lctl.DecodeEvent(sc.Bytes())
		if err != nil {
			t.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eventsThrough counts, per chain, the stream's events at stream seqs up to
// seq: what the tracer's files held for sure at its last sync.
func eventsThrough(t *testing.T, e *env, seq uint64) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := e.log.JetStream().Stream(ctx, eventlog.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for seq > 0 {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(waitTimeout))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if meta.Sequence.Stream > seq {
				return counts
			}
			counts[strings.TrimPrefix(m.Subject(), eventlog.SubjectPrefix)]++
			if meta.Sequence.Stream == seq {
				return counts
			}
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("stream ended before seq %d", seq)
		}
	}
	return counts
}

// cutToLines keeps the first n lines of a file (none: the file is removed,
// as a crash can lose a file created after the last sync).
func cutToLines(t *testing.T, path string, n int) {
	t.Helper()
	if n == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for range n {
		i := bytes.IndexByte(raw[off:], '\n')
		if i < 0 {
			t.Fatalf("%s has fewer than %d lines", path, n)
		}
		off += i + 1
	}
	if err := os.Truncate(path, int64(off)); err != nil {
		t.Fatal(err)
	}
}

// TestKilledMidIngest kills a tracer process (SIGKILL, no shutdown) while
// it ingests a backlog and a run keeps writing, then starts a tracer again
// on its data dir: every chain it serves afterwards is the stream's, event
// for event and hash for hash, each event once in its file. The killed
// tracer had acknowledged events it never synced. In the "power loss" case
// the files also lose everything written after the last sync (and files
// created since), the most a crash of the machine can take.
func TestKilledMidIngest(t *testing.T) {
	t.Parallel()
	for _, powerLoss := range []bool{false, true} {
		name := "process killed"
		if powerLoss {
			name = "power loss"
		}
		t.Run(name, func(t *testing.T) {
			ns := testutil.RunJetStream(t)
			nc := testutil.Connect(t, ns)
			l, err := eventlog.Open(context.Background(), nc)
			if err != nil {
				t.Fatal(err)
			}
			e := &env{nc: nc, log: l, dataDir: t.TempDir()}
			chainsDir := filepath.Join(e.dataDir, "chains")

			// A first backlog ingested and synced by a clean stop. (Its
			// size is not the point: 3,000 events here made this test,
			// with the second backlog's 9,000, the package's longest.)
			const perChain = 300
			ids := publishBacklog(t, e, "before", 3, perChain)
			first := e.startTracer(t)
			for _, id := range ids {
				first.waitFor(t, id, perChain)
			}
			first.stop()
			synced := recordedPosition(t, e.dataDir)
			if synced != 3*perChain {
				t.Fatalf("after a clean stop the recorded position is %d, want %d", synced, 3*perChain)
			}

			// A second one, and a run writing, while a tracer process
			// ingests them; it is killed once it has stored some.
			after := publishBacklog(t, e, "after", 6, 1500)
			ids = append(ids, after...)
			stop := make(chan struct{})
			waitLive := writeLive(t, e, "live", stop)
			ids = append(ids, "live")
			child := e.startChildTracer(t, ns.ClientURL())
			testutil.Eventually(t, waitTimeout, func() error {
				n := 0
				for _, id := range after {
					if info, err := os.Stat(filepath.Join(chainsDir, id+".jsonl")); err == nil {
						n += int(info.Size())
					}
				}
				if n < 100_000 {
					return fmt.Errorf("the child stored %d bytes of the second backlog", n)
				}
				cons, err := l.JetStream().Consumer(context.Background(), eventlog.StreamName, tracer.ConsumerName)
				if err != nil {
					return err
				}
				if floor := cons.CachedInfo().AckFloor.Stream; floor <= synced {
					return fmt.Errorf("the child acknowledged through %d, synced through %d", floor, synced)
				}
				return nil
			})
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = child.Wait()
			if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, not killed", child.ProcessState)
			}
			if got := recordedPosition(t, e.dataDir); got != synced {
				t.Fatalf("the killed tracer recorded position %d, want %d (it never synced)", got, synced)
			}
			// (It acknowledged events it had not synced: the consumer's
			// acknowledgements are past the recorded position, checked
			// before the kill.)

			if powerLoss {
				kept := eventsThrough(t, e, synced)
				for _, id := range ids {
					cutToLines(t, filepath.Join(chainsDir, id+".jsonl"), kept[id])
				}
			} else {
				// A write cut short by the kill: half an event, no newline.
				f, err := os.OpenFile(filepath.Join(chainsDir, after[0]+".jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteString(`{"chain_id":"` + after[0] + `","seq":`); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}

			// The run goes on while no tracer runs, then the tracer is back.
			tr := e.startTracer(t)
			close(stop)
			waitLive()
			sameAsStream(t, e, tr, ids)
		})
	}
}

// TestDamagedChainFileRepairedAtStart damages a line in the middle of a
// chain file after a clean stop (a bad disk block, an editor): at start the
// tracer cuts the file there and reads the rest back from the stream,
// though no new event of the chain arrives.
func TestDamagedChainFileRepairedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-d", 3) // 14 events
	first := e.startTracer(t)
	first.waitFor(t, "run-d", 14)
	first.stop()

	path := filepath.Join(e.dataDir, "chains", "run-d.jsonl")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))
	lines[5] = []byte("{\"chain_id\":\"run-d\",\"seq\":6,\x00\x00\x00\n")
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}

	second := e.startTracer(t)
	sameAsStream(t, e, second, []string{"run-d"})
}

// TestSyncedAtStop shows a clean stop leaves nothing to read again: the
// recorded position is the stream's last message.
func TestSyncedAtStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "run-s", 2)
	writeRun(t, e.log, "run-t", 1)
	tr := e.startTracer(t)
	tr.waitFor(t, "run-s", 10)
	tr.waitFor(t, "run-t", 6)
	tr.stop()
	info, err := e.log.JetStream().Stream(context.Background(), eventlog.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := recordedPosition(t, e.dataDir), info.CachedInfo().State.LastSeq; got != want {
		t.Errorf("recorded position %d, the stream's last message %d", got, want)
	}
}

// TestStreamMadeAnew: the recorded position belongs to the stream it was
// recorded from. A stream deleted and made again starts its sequence over;
// the tracer reads the new one from its start instead of skipping its first
// messages.
func TestStreamMadeAnew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeRun(t, e.log, "old-run", 3) // 14 events: the position is 14
	first := e.startTracer(t)
	first.waitFor(t, "old-run", 14)
	first.stop()
	if got := recordedPosition(t, e.dataDir); got != 14 {
		t.Fatalf("recorded position %d, want 14", got)
	}

	ctx := context.Background()
	js := e.log.JetStream()
	// The tracer's durable consumer goes first, as an operator would remove
	// it: deleted with the stream, its store is closed while the stream's
	// directory is moved away, and the server has then refused to make the
	// stream again (CI, once, "error creating store for stream").
	if err := js.DeleteConsumer(ctx, eventlog.StreamName, tracer.ConsumerName); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, eventlog.StreamName); err != nil {
		t.Fatal(err)
	}
	e.log = openAfterDelete(t, e.nc)
	writeRun(t, e.log, "new-run", 2) // 10 events at stream seqs 1..10

	second := e.startTracer(t)
	sameAsStream(t, e, second, []string{"new-run"})
}

// openAfterDelete makes the streams again (provision, as the admin) and
// opens the event log on a stream just deleted. The server
// removes a deleted stream's files in the background; while it does, making
// the stream again can be refused as a store failure (JetStream error
// 10049). That refusal is waited out, for at most a minute; any other
// error fails the test at once.
func openAfterDelete(t *testing.T, nc *nats.Conn) *eventlog.Log {
	t.Helper()
	const storeFailed = jetstream.ErrorCode(10049)
	var l *eventlog.Log
	testutil.Eventually(t, time.Minute, func() error {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		// The admin makes it again, as `xct nats provision` does.
		if _, err = provision.Run(context.Background(), js, provision.Defaults()); err == nil {
			l, err = eventlog.Open(context.Background(), nc)
		}
		var apiErr *jetstream.APIError
		if err != nil && (!errors.As(err, &apiErr) || apiErr.ErrorCode != storeFailed) {
			t.Fatal(err)
		}
		return err
	})
	return l
}
