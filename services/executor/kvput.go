package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvPut writes step records to the XCT_STEPS bucket as the generic KV
// client does (a publish to the key's subject with the expected last
// revision of the key in Nats-Expected-Last-Subject-Sequence, acknowledged
// by the stream), without its per-write costs on the step path: a regular
// expression per key, options and headers built per call, and the
// acknowledgement decoded by reflection. It is the same request, so the
// same conditions hold: a write lands only if the key's last revision is
// the one expected (0: the key has no revision at all).
type kvPut struct {
	nc      *nats.Conn
	prefix  string // "$KV.<bucket>."
	stream  string // the bucket's stream, as named in acknowledgements
	timeout time.Duration
}

// kvPutTimeout bounds a write whose context has no deadline, as the
// generic client's default API timeout does.
const kvPutTimeout = 5 * time.Second

// Retries of a write nobody answered (a stream leader being elected), as
// the generic client does.
const (
	kvPutRetryWait     = 250 * time.Millisecond
	kvPutRetryAttempts = 2
)

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
	return &kvPut{nc: nc, prefix: prefix, stream: cfg.Name, timeout: kvPutTimeout}
}

// write stores data as key's value if key's last revision is rev (0: key
// has none) and returns the new revision. A write that lost against
// another fails with the stream's API error (wrongRevision reports it).
func (p *kvPut) write(ctx context.Context, key string, data []byte, rev uint64) (uint64, error) {
	if !kvKeyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	m := &nats.Msg{
		Subject: p.prefix + key,
		Data:    data,
		Header:  nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}},
	}
	resp, err := p.nc.RequestMsgWithContext(ctx, m)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < kvPutRetryAttempts; r++ {
		t := time.NewTimer(kvPutRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = p.nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return 0, err
	}
	return p.ack(resp.Data)
}

// ack reads the stream's answer to a write: its sequence, which is the
// key's new revision, or the error it reports.
func (p *kvPut) ack(data []byte) (uint64, error) {
	// What the server sends for a stored write: {"stream":"<name>","seq":N}.
	// Anything else (an error, a domain, a duplicate) is decoded in full.
	if rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`)); ok {
		if rest, ok = bytes.CutPrefix(rest, []byte(p.stream)); ok {
			if rest, ok = bytes.CutPrefix(rest, []byte(`","seq":`)); ok {
				if digits, ok := bytes.CutSuffix(rest, []byte("}")); ok {
					if seq, err := strconv.ParseUint(string(digits), 10, 64); err == nil && seq > 0 {
						return seq, nil
					}
				}
			}
		}
	}
	var a struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	switch {
	case a.Error != nil:
		return 0, fmt.Errorf("nats: %w", a.Error)
	case a.Stream != p.stream || a.Seq == 0:
		return 0, jetstream.ErrInvalidJSAck
	}
	return a.Seq, nil
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
