package tracer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/lctl"
)

// sealedLines returns the events from..to of chain id sealed as a
// ChainWriter seals them (prev: the hash of event from-1), each as a
// message would hold it alone, and the last one's hash.
func sealedLines(t *testing.T, id string, from, to int, prev string) ([][]byte, string) {
	t.Helper()
	at := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	var out [][]byte
	for seq := from; seq <= to; seq++ {
		e := lctl.Event{ChainID: id, Seq: uint64(seq), Type: "step_start", Timestamp: lctl.FormatTime(at.Add(time.Duration(seq) * time.Millisecond)), Agent: "orchestrator",
			Data: map[string]any{"step": float64(seq), "intent": fmt.Sprintf("line one\nline two %d", seq), "tool": "t"}}
		raw, err := e.SealEncoded(prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		out = append(out, raw)
	}
	return out, prev
}

// publishPacks publishes lines as messages of chain id holding the given
// numbers of events in turn, each followed by one event of chain other.
func publishPacks(t *testing.T, e *env, id string, lines [][]byte, sizes []int, other *chainLines) {
	t.Helper()
	for i, k := 0, 0; i < len(lines); k++ {
		n := min(sizes[k%len(sizes)], len(lines)-i)
		if _, err := e.log.JetStream().Publish(context.Background(), eventlog.Subject(id), bytes.Join(lines[i:i+n], []byte("\n"))); err != nil {
			t.Fatal(err)
		}
		i += n
		other.publishNext(t, e)
	}
}

// chainLines is a chain written one event a message, an event at a time.
type chainLines struct {
	id   string
	seq  int
	prev string
}

func (c *chainLines) publishNext(t *testing.T, e *env) {
	t.Helper()
	lines, last := sealedLines(t, c.id, c.seq+1, c.seq+1, c.prev)
	if _, err := e.log.JetStream().Publish(context.Background(), eventlog.Subject(c.id), lines[0]); err != nil {
		t.Fatal(err)
	}
	c.seq, c.prev = c.seq+1, last
}

// The tracer stores a chain written in packs (several events in one stream
// message) as it stores one written an event a message: every event once,
// in order, verified, in its file one a line; from a backlog, live, and
// after a restart whose chain file lost its end inside a pack (read back
// from the stream).
func TestPackedChainStoredAsOneEventPerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	single := &chainLines{id: "run-single"}
	lines, _ := sealedLines(t, "run-packed", 1, 60, "")
	// A backlog before the tracer starts.
	publishPacks(t, e, "run-packed", lines[:20], []int{3, 1, 4, 1, 5}, single)
	tr := e.startTracer(t)
	tr.waitFor(t, "run-packed", 20)
	// Live, then the tracer stopped and started again on its files.
	publishPacks(t, e, "run-packed", lines[20:41], []int{2, 6, 1}, single)
	tr.waitFor(t, "run-packed", 41)
	sameAsStream(t, e, tr, []string{"run-packed", single.id})
	tr.stop()
	// The chain file loses its end from the middle of event 18 (inside a
	// pack of the stream): read back from the stream at the start.
	path := filepath.Join(e.dataDir, "chains", "run-packed.jsonl")
	cutToLines(t, path, 18)
	if err := os.Truncate(path, fileSize(t, path)-40); err != nil {
		t.Fatal(err)
	}
	publishPacks(t, e, "run-packed", lines[41:], []int{19}, single)
	tr = e.startTracer(t)
	sameAsStream(t, e, tr, []string{"run-packed", single.id})
	got, err := tr.client.GetChain(context.Background(), &lctlv1.GetChainRequest{ChainId: "run-packed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 60 || !got.Summary.Verified {
		t.Fatalf("%d events, verified %v (%s); want 60, verified", len(got.Events), got.Summary.Verified, got.Summary.VerifyError)
	}
	allAcked(t, e)
}

// A message of several lines that are not the chain's consecutive events
// stores none of them: it is recorded on its chain as undecodable, and
// the chain's other events are kept.
func TestBadPackRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := e.startTracer(t)
	lines, _ := sealedLines(t, "run-badpack", 1, 4, "")
	for _, m := range [][]byte{lines[0], bytes.Join([][]byte{lines[1], lines[3]}, []byte("\n"))} {
		if _, err := e.log.JetStream().Publish(context.Background(), eventlog.Subject("run-badpack"), m); err != nil {
			t.Fatal(err)
		}
	}
	writeRun(t, e.log, "healthy", 1)
	tr.waitFor(t, "healthy", 6)
	got, err := tr.client.GetChain(context.Background(), &lctlv1.GetChainRequest{ChainId: "run-badpack"})
	if err != nil {
		t.Fatal(err)
	}
	const want = "stream message 2 does not decode as an event: not an event or a pack of consecutive events: event 2 of the pack is run-badpack/4 after run-badpack/2"
	if len(got.Events) != 1 || got.Summary.Verified || got.Summary.VerifyError != want {
		t.Fatalf("%d events, verified %v, error %q; want 1, false, %q", len(got.Events), got.Summary.Verified, got.Summary.VerifyError, want)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
