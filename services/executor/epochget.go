package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/verdict"
)

// epochGet reads the policy epochs bucket as the generic KV client's Get
// does for a bucket that allows direct gets: one request to
// "$JS.API.DIRECT.GET.<stream>.$KV.<bucket>.<key>", which the stream
// answers with the key's last message as it holds it when the request
// arrives (the same request, so the same freshness: nothing is cached or
// watched, a reload recorded before the request is what it answers). It
// leaves out the generic client's per-read costs (a regular expression per
// key, the subject formatted, a JSON request built for a request that
// sends none, a context and timer per read, the timestamp parsed, an
// entry made) which were ~57 allocations of every Execute.
type epochGet struct {
	nc *nats.Conn
	// subj is "$JS.API.DIRECT.GET.<stream>.$KV.<bucket>." (the key follows).
	subj string
	// last is the subject of the last verdict key's epoch read (an
	// executor reads the epoch of the same one or two keys at every
	// Execute).
	last atomic.Pointer[epochSubject]
}

type epochSubject struct{ keyID, subj string }

// newEpochGet returns the reader of kv, or nil when kv's stream is not a
// plain bucket that allows direct gets at "$KV.<bucket>.<key>" (a mirror,
// a bucket with sources, one without direct gets): then the generic
// client reads.
func newEpochGet(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue) *epochGet {
	if nc == nil {
		return nil
	}
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
	if !cfg.AllowDirect || cfg.Mirror != nil || len(cfg.Sources) > 0 || !slices.Contains(cfg.Subjects, prefix+">") {
		return nil
	}
	return &epochGet{nc: nc, subj: "$JS.API.DIRECT.GET." + cfg.Name + "." + prefix}
}

// Answers of a direct get, as the server sends them.
const (
	hdrStatus       = "Status"             // set only on a message with no data: 404 none, 408, 503...
	hdrDescription  = "Description"        // the status's reason
	hdrKVOperation  = "KV-Operation"       // DEL or PURGE on a key's delete or purge marker
	hdrMarkerReason = "Nats-Marker-Reason" // MaxAge, Purge or Remove on the server's own markers
	statusNone      = "404"
)

// errEpochAnswer: the stream's answer to a direct get could not be read.
var errEpochAnswer = errors.New("unreadable answer to a direct get")

// get returns the value of the last revision of verdict key keyID's
// epoch (key verdict.EpochKey(keyID)); jetstream.ErrKeyNotFound when the
// key has none or its last revision deletes or purges it (as the generic
// client's Get). The read is bounded by ctx's
// deadline or epochReadTimeout, whichever comes first.
func (g *epochGet) get(ctx context.Context, keyID string) ([]byte, error) {
	subj, err := g.subject(keyID)
	if err != nil {
		return nil, err
	}
	var m *nats.Msg
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= epochReadTimeout {
		m, err = g.nc.RequestWithContext(ctx, subj, nil)
	} else {
		if err = ctx.Err(); err != nil {
			return nil, err
		}
		m, err = g.nc.Request(subj, nil, epochReadTimeout)
		if errors.Is(err, nats.ErrTimeout) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if len(m.Data) == 0 {
		if s := m.Header.Get(hdrStatus); s == statusNone {
			return nil, jetstream.ErrKeyNotFound
		} else if s != "" {
			return nil, fmt.Errorf("%w: status %s %q", errEpochAnswer, s, m.Header.Get(hdrDescription))
		}
	}
	if m.Header.Get(jetstream.StreamHeader) == "" || m.Header.Get(jetstream.SequenceHeader) == "" {
		return nil, fmt.Errorf("%w: no stream or sequence", errEpochAnswer)
	}
	switch m.Header.Get(hdrKVOperation) {
	case "DEL", "PURGE":
		return nil, jetstream.ErrKeyNotFound
	case "":
		switch m.Header.Get(hdrMarkerReason) {
		case "MaxAge", "Purge", "Remove":
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return m.Data, nil
}

// subject is the direct get's subject for the epoch of keyID.
func (g *epochGet) subject(keyID string) (string, error) {
	if l := g.last.Load(); l != nil && l.keyID == keyID {
		return l.subj, nil
	}
	key := verdict.EpochKey(keyID)
	if !kvKeyValid(key) {
		return "", jetstream.ErrInvalidKey
	}
	s := &epochSubject{keyID: keyID, subj: g.subj + key}
	g.last.Store(s)
	return s.subj, nil
}
