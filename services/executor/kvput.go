package executor

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
)

// kvPut writes step records to the XCT_STEPS bucket as the generic KV
// client does (a publish to the key's subject with the expected last
// revision of the key in Nats-Expected-Last-Subject-Sequence, acknowledged
// by the stream), through the step path's conditional publisher
// (eventlog.Publisher) instead of the generic client's per-write costs (a
// regular expression per key, options and headers built per call, the
// acknowledgement decoded by reflection). It is the same request, so the
// same conditions hold: a write lands only if the key's last revision is
// the one expected (0: the key has no revision at all).
type kvPut struct {
	pub    *eventlog.Publisher
	prefix string // "$KV.<bucket>."
}

// newKVPut returns the writer for kv, or nil when kv's stream is not a
// plain bucket whose keys are written at "$KV.<bucket>.<key>" (a mirror or
// a bucket with sources writes elsewhere): then the generic client writes.
func newKVPut(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue) *kvPut {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return nil
	}
	cfg := bs.StreamInfo().Config
	prefix := "$KV." + kv.Bucket() + "."
	if cfg.Mirror != nil || len(cfg.Sources) > 0 || !slices.Contains(cfg.Subjects, prefix+">") {
		return nil
	}
	return &kvPut{pub: eventlog.NewPublisher(nc, cfg.Name), prefix: prefix}
}

// write stores data as key's value if key's last revision is rev (0: key
// has none) and returns the new revision. A write that lost against
// another fails with the stream's API error (wrongRevision reports it).
func (p *kvPut) write(ctx context.Context, key string, data []byte, rev uint64) (uint64, error) {
	if !kvKeyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	ack, err := p.pub.Publish(ctx, p.prefix+key, data, "", rev)
	return ack.Seq, err
}

// kvKeyValid is the generic client's rule for a key that may be written:
// one or more of - / _ = . a-z A-Z 0-9, not starting or ending with a dot,
// no two dots in a row.
func kvKeyValid(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '-', c == '/', c == '_', c == '=':
		case c == '.':
			if key[i-1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
