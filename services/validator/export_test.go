package validator

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WithIndexMarkerTTL sets how long a removed pending index key's marker
// is kept (DefaultIndexMarkerTTL otherwise), where the bucket lets
// markers expire.
func WithIndexMarkerTTL(d time.Duration) Option {
	return func(s *Service) { s.indexMarkerTTL = d }
}

// WrapApprovalsKV replaces the started service's approvals bucket with
// wrap's (a counting one, say). Call it between calls, not during one.
func WrapApprovalsKV(s *Service, wrap func(jetstream.KeyValue) jetstream.KeyValue) {
	st := *s.approvals.Load()
	st.kv = wrap(st.kv)
	s.approvals.Store(&st)
}
