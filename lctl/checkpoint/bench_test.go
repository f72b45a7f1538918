package checkpoint_test

import (
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// BenchmarkSign is what the orchestrator adds every --checkpoint-every
// events: one signed note (the append is extra).
func BenchmarkSign(b *testing.B) {
	skey, _, err := checkpoint.GenerateKey("bench")
	if err != nil {
		b.Fatal(err)
	}
	s, err := checkpoint.ParseSigner([]byte(skey), "bench")
	if err != nil {
		b.Fatal(err)
	}
	head := lctl.Event{Seq: 1000, Hash: strings.Repeat("ab", 32)}
	for b.Loop() {
		if _, err := checkpoint.Sign(s, "xct/lctl/run-1", &head); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify10k proves a 10,000-event chain with a checkpoint every
// 100 events: one pass over the events (each hash recomputed) and 100
// signature checks; the cost grows linearly with the chain.
func BenchmarkVerify10k(b *testing.B) {
	k := newKey(b, "bench")
	events := chain(b, "run-b", 10_000, 100, func(uint64) note.Signer { return k.signer })
	keys := note.VerifierList(k.verifier)
	b.ReportAllocs()
	for b.Loop() {
		if r := checkpoint.Verify("run-b", events, keys, checkpoint.Options{}); !r.OK {
			b.Fatal(r.First)
		}
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
