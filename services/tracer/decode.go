package tracer

import (
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/lctl"
)

// decodedMsg is a stream message decoded, with the hash of the event's
// content computed (chain.add checks it against the event's hash).
type decodedMsg struct {
	event    lctl.Event
	err      error
	computed string // "" when the event did not decode or cannot be hashed
}

// parallelDecodeMin is the batch size from which messages are decoded on
// every core: decoding and hashing are most of the cost of ingest, and
// events decode independently; they are then stored in order.
const parallelDecodeMin = 64

// decodeBatch decodes the batch's messages and hashes their events, on
// every core for a large batch, into out (reused when large enough).
func decodeBatch(batch []jetstream.Msg, out []decodedMsg) []decodedMsg {
	if cap(out) < len(batch) {
		out = make([]decodedMsg, len(batch), max(len(batch), batchSize))
	}
	out = out[:len(batch)]
	one := func(i int) {
		d := &out[i]
		d.event, d.computed, d.err = lctl.DecodeEventHashed(batch[i].Data())
	}
	workers := runtime.GOMAXPROCS(0)
	if len(batch) < parallelDecodeMin || workers < 2 {
		for i := range batch {
			one(i)
		}
		return out
	}
	var wg sync.WaitGroup
	chunk := (len(batch) + workers - 1) / workers
	for lo := 0; lo < len(batch); lo += chunk {
		hi := min(lo+chunk, len(batch))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				one(i)
			}
		})
	}
	wg.Wait()
	return out
}
