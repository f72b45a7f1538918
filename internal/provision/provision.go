// Package provision is every JetStream stream and bucket XCT uses, with
// the settings XCT makes it with, and their making: an administrator's
// step at deployment (`xct nats provision`, run by `xct dev` before the
// services start, by the Kubernetes Job xct-nats-provision, by the test
// harnesses), after which the services only bind.
//
// Why: a stream's settings are its first creator's, and they are in the
// request's body, which NATS permissions do not see. A service allowed
// to create a stream could make it (or another) with a republish into a
// bucket it may not write, or with sources copying another service's
// records into one it reads (docs/security.md, "Streams made by the
// admin").
package provision

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
)

// The names, spelled out here so that this package depends on none of
// the packages that use them (internal/testutil provisions every test
// server, and those packages' tests use it); the tests check each against
// the user's constant.
const (
	ChainStream     = "LCTL"            // eventlog.StreamName
	ChainSubjects   = "lctl.chain.*"    // eventlog.AllSubjects
	OTelStream      = "LCTL_OTEL"       // eventlog.OTelStreamName
	OTelSubjects    = "lctl.otel.*"     // eventlog.AllOTelSubjects
	ToolsBucket     = "XCT_TOOLS"       // catalog.Bucket
	RedactionBucket = "XCT_REDACTION"   // redact.KeyBucket
	RedactionKey    = "hmac-key"        // redact.KeyName
	StepsBucket     = "XCT_STEPS"       // executor.StepsBucket
	BlobsBucket     = "XCT_STEP_BLOBS"  // executor.BlobsBucket
	ApprovalsBucket = "XCT_APPROVALS"   // validator and orchestrator
	OwnersBucket    = "XCT_RUN_OWNERS"  // orchestrator.OwnersBucket
	QuotaBucket     = "XCT_RUN_QUOTA"   // orchestrator.QuotaBucket
	RateBucket      = "XCT_RATE_LIMITS" // validator.RateBucket
	PolicyBucket    = "XCT_POLICY"      // verdict.PolicyBucket
	// RateTTL is how long a rate limit's count outlives its last call
	// (validator: the longest window, 24 h, and an hour).
	RateTTL = 25 * time.Hour
	// ApprovalHistory is the approvals bucket's history (validator).
	ApprovalHistory = 8
)

// Command is what an operator runs to make the streams; the services'
// errors name it.
const Command = jsguard.ProvisionCommand

// Settings are the deployment's choices among XCT's settings.
type Settings struct {
	// Replicas of every stream and bucket: 1 embedded, 3 in production.
	Replicas int
	// Duplicates is the chains' deduplication window (default 1 h).
	Duplicates time.Duration
	// StepRetention is how long step records and their blobs are kept (0:
	// forever; the executor's --step-retention, default 30 days).
	StepRetention time.Duration
}

// DefaultStepRetention is the executor's default (executor.DefaultStepRetention).
const DefaultStepRetention = 30 * 24 * time.Hour

// Defaults are the embedded (single node) settings.
func Defaults() Settings {
	return Settings{Replicas: 1, Duplicates: time.Hour, StepRetention: DefaultStepRetention}
}

func (s Settings) normal() Settings {
	if s.Replicas < 1 {
		s.Replicas = 1
	}
	if s.Duplicates <= 0 {
		s.Duplicates = time.Hour
	}
	return s
}

// Kind is what a stream is to its users.
type Kind string

// The kinds.
const (
	KindStream      Kind = "stream"
	KindKeyValue    Kind = "bucket"
	KindObjectStore Kind = "object store"
)

// Spec is one stream or bucket XCT needs.
type Spec struct {
	// Stream is the JetStream stream's name (KV_<bucket>, OBJ_<bucket>).
	Stream string
	// Name is what XCT calls it (the bucket's name; the stream's own for
	// a plain stream).
	Name string
	Kind Kind
	// Subjects are the stream's subjects, exactly.
	Subjects []string
	// Users are the services that bind it.
	Users []string

	stream *jetstream.StreamConfig
	kv     *jetstream.KeyValueConfig
	obj    *jetstream.ObjectStoreConfig
	// msgTTL: the stream allows a message its own TTL (the approvals
	// bucket: the validator removes a pending index key,
	// pending.<run>.<step>, with a marker that expires, so the index
	// holds the pending approvals only and a list of them does not read
	// one marker per approval ever closed). No marker is placed when
	// such a message expires (no SubjectDeleteMarkerTTL): the key is
	// then gone. A bucket's config cannot say it (LimitMarkerTTL also
	// places markers); it is turned on once the bucket is made.
	msgTTL bool
}

func (sp Spec) withMsgTTL() Spec { sp.msgTTL = true; return sp }

// Specs are every stream and bucket XCT needs, with s's settings: exactly
// what the services created when they were missing before provisioning
// existed.
func Specs(s Settings) []Spec {
	s = s.normal()
	chain := func(name, subjects, description string, atomic bool) Spec {
		return Spec{Stream: name, Name: name, Kind: KindStream, Subjects: []string{subjects},
			Users: []string{"orchestrator", "tracer"},
			stream: &jetstream.StreamConfig{
				Name:        name,
				Description: description,
				Subjects:    []string{subjects},
				Storage:     jetstream.FileStorage,
				Retention:   jetstream.LimitsPolicy,
				Replicas:    s.Replicas,
				Duplicates:  s.Duplicates,
				DenyDelete:  true,
				DenyPurge:   true,
				// The tracer writes a converted trace's events in
				// atomic batches (eventlog.AppendBatch): all or none,
				// without a round trip per event.
				AllowAtomicPublish: atomic,
			}}
	}
	kv := func(cfg jetstream.KeyValueConfig, users ...string) Spec {
		return Spec{Stream: "KV_" + cfg.Bucket, Name: cfg.Bucket, Kind: KindKeyValue,
			Subjects: []string{"$KV." + cfg.Bucket + ".>"}, Users: users, kv: &cfg}
	}
	obj := func(cfg jetstream.ObjectStoreConfig, users ...string) Spec {
		return Spec{Stream: "OBJ_" + cfg.Bucket, Name: cfg.Bucket, Kind: KindObjectStore,
			Subjects: []string{"$O." + cfg.Bucket + ".C.>", "$O." + cfg.Bucket + ".M.>"}, Users: users, obj: &cfg}
	}
	return []Spec{
		chain(ChainStream, ChainSubjects, "LCTL event chains written by XCT", false),
		chain(OTelStream, OTelSubjects, "LCTL event chains the XCT tracer makes from OpenTelemetry traces", true),
		kv(jetstream.KeyValueConfig{
			Bucket:      ToolsBucket,
			Description: "XCT tool catalog, published by executors",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "executor", "validator", "orchestrator"),
		kv(jetstream.KeyValueConfig{
			Bucket:      StepsBucket,
			Description: "XCT step records: the executor's idempotency keys and outcomes",
			History:     16, // every transition of a step stays readable
			TTL:         s.StepRetention,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "executor"),
		obj(jetstream.ObjectStoreConfig{
			Bucket:      BlobsBucket,
			Description: "XCT step compensations and large step responses",
			TTL:         s.StepRetention,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "executor"),
		kv(jetstream.KeyValueConfig{
			Bucket:      ApprovalsBucket,
			Description: "XCT step approvals, kept by validators",
			History:     ApprovalHistory,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "validator", "orchestrator").withMsgTTL(),
		kv(jetstream.KeyValueConfig{
			Bucket:      OwnersBucket,
			Description: "owner instance of every unfinished XCT run",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "orchestrator"),
		kv(jetstream.KeyValueConfig{
			Bucket:      QuotaBucket,
			Description: "XCT: the runs each principal has in progress (--max-runs) and its open watches (--max-watches)",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "orchestrator"),
		kv(jetstream.KeyValueConfig{
			Bucket:      RateBucket,
			Description: "XCT: the calls counted under the policies' rate limits, shared by the validators",
			History:     1,
			TTL:         RateTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "validator"),
		kv(jetstream.KeyValueConfig{
			Bucket:      PolicyBucket,
			Description: "XCT: the policy each validator key signs under, and since when (signed epochs; executors refuse verdicts they replace)",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.Replicas,
		}, "validator", "executor"),
		kv(jetstream.KeyValueConfig{
			Bucket:      RedactionBucket,
			Description: "XCT: the HMAC key of redaction markers",
			History:     1,
			Replicas:    s.Replicas,
		}, "orchestrator", "validator", "executor"),
	}
}

// Result is what Run did with one stream.
type Result struct {
	Spec    Spec
	Created bool // false: it existed, with settings XCT makes
	// Differs lists the operator's settings of an existing stream that
	// are not what Run was given (replicas, retention, history, the
	// duplicate window): kept as they are, reported.
	Differs []string
	// Updated lists what Run turned on in an existing stream that a
	// later XCT needs (atomic batch publish on LCTL_OTEL).
	Updated []string
}

// ErrSettings means a stream XCT uses exists with settings XCT never makes,
// or another stream reaches into XCT's (a republish into its subjects,
// sources or a mirror of one of its streams). An operator looks at it and
// removes it; nothing is changed by Run.
var ErrSettings = errors.New("a JetStream stream has settings XCT never makes")

// Run makes every stream and bucket of Specs(s) that does not exist and
// checks the ones that do, then checks every other stream on the server.
// It is idempotent: run again on a provisioned server it creates nothing
// and reports each as existing. js must be an administrator's (services
// may not create streams). An existing stream whose size limits, replicas,
// retention or duplicate window differ is kept as it is (those are the
// operator's); one with settings XCT never makes is ErrSettings, as is a
// stream of another name that republishes into XCT's subjects or copies
// one of XCT's streams (sources, mirror).
func Run(ctx context.Context, js jetstream.JetStream, s Settings) ([]Result, error) {
	specs := Specs(s)
	out := make([]Result, 0, len(specs))
	var bad []error
	for _, sp := range specs {
		created, differs, err := make1(ctx, js, sp)
		if errors.Is(err, ErrSettings) {
			bad = append(bad, err)
			continue
		}
		if err != nil {
			return out, err
		}
		// What a bucket's config cannot say is turned on once it is made
		// (said only of one an earlier XCT made).
		updated, err := turnOn(ctx, js, sp)
		if err != nil {
			return out, err
		}
		if created {
			updated = nil
		}
		if sp.Name == RedactionBucket {
			made, err := redactionKey(ctx, js)
			if err != nil {
				return out, err
			}
			if made {
				updated = append(updated, "redaction key made")
			}
		}
		out = append(out, Result{Spec: sp, Created: created, Differs: differs, Updated: updated})
	}
	if err := others(ctx, js, specs); err != nil {
		bad = append(bad, err)
	}
	if len(bad) > 0 {
		return out, errors.Join(bad...)
	}
	return out, nil
}

// redactionKey makes the cluster's redaction key (32 random bytes) in its
// bucket unless one is there, which is kept: the services read it, none
// writes it (internal/natsauth), so a taken-over service cannot replace
// the key the others start with. made reports whether it was made now.
func redactionKey(ctx context.Context, js jetstream.JetStream) (made bool, err error) {
	kv, err := js.KeyValue(ctx, RedactionBucket)
	if err != nil {
		return false, fmt.Errorf("provision the redaction key: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("provision the redaction key: %w", err)
	}
	_, err = kv.Create(ctx, RedactionKey, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	}
	return false, fmt.Errorf("provision the redaction key: %w", err)
}

// make1 creates sp, or finds it and checks it; created reports which,
// differs what an existing one has of the operator's settings other than
// sp's.
func make1(ctx context.Context, js jetstream.JetStream, sp Spec) (created bool, differs []string, err error) {
	if _, err := js.Stream(ctx, sp.Stream); err == nil {
		differs, err := check(ctx, js, sp)
		return false, differs, err
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil, fmt.Errorf("provision %s %s: %w", sp.Kind, sp.Name, err)
	}
	switch {
	case sp.stream != nil:
		_, err = js.CreateStream(ctx, *sp.stream)
	case sp.kv != nil:
		_, err = js.CreateKeyValue(ctx, *sp.kv)
	default:
		_, err = js.CreateObjectStore(ctx, *sp.obj)
	}
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
		// Made meanwhile by someone else: check what it is.
		differs, err := check(ctx, js, sp)
		return false, differs, err
	}
	if err != nil {
		return false, nil, fmt.Errorf("provision %s %s: %w", sp.Kind, sp.Name, err)
	}
	_, err = check(ctx, js, sp)
	return true, nil, err
}

// turnOn turns on in sp's existing stream what XCT makes it with and a
// stream made by an earlier XCT lacks: atomic batch publish on a chain
// stream that asks for it, per-message TTLs on a bucket that asks for
// them (the approvals'). Nothing else of the stream changes.
func turnOn(ctx context.Context, js jetstream.JetStream, sp Spec) ([]string, error) {
	want := func(c jetstream.StreamConfig) (jetstream.StreamConfig, []string) {
		var what []string
		if sp.stream != nil && sp.stream.AllowAtomicPublish && !c.AllowAtomicPublish {
			c.AllowAtomicPublish = true
			what = append(what, "atomic batch publish turned on")
		}
		if sp.msgTTL && !c.AllowMsgTTL {
			c.AllowMsgTTL = true
			what = append(what, "per-message TTLs turned on (the pending index's markers expire)")
		}
		return c, what
	}
	if (sp.stream == nil || !sp.stream.AllowAtomicPublish) && !sp.msgTTL {
		return nil, nil
	}
	st, err := js.Stream(ctx, sp.Stream)
	if err != nil {
		return nil, fmt.Errorf("provision %s %s: %w", sp.Kind, sp.Name, err)
	}
	c, what := want(st.CachedInfo().Config)
	if len(what) == 0 {
		return nil, nil
	}
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return nil, fmt.Errorf("provision %s %s: %s: %w", sp.Kind, sp.Name, strings.Join(what, ", "), err)
	}
	return what, nil
}

// check refuses sp's stream when its settings are not XCT's kind, and
// says which of the operator's settings differ from sp's.
func check(ctx context.Context, js jetstream.JetStream, sp Spec) ([]string, error) {
	st, err := js.Stream(ctx, sp.Stream)
	if err != nil {
		return nil, fmt.Errorf("provision %s %s: %w", sp.Kind, sp.Name, err)
	}
	c := st.CachedInfo().Config
	if err := CheckStream(c, sp); err != nil {
		return nil, err
	}
	return drift(c, sp), nil
}

// drift lists the settings of c that are not sp's, among those Run
// leaves to the operator.
func drift(c jetstream.StreamConfig, sp Spec) []string {
	var replicas int
	var maxAge, dup time.Duration
	var history int64
	switch {
	case sp.stream != nil:
		replicas, dup = sp.stream.Replicas, sp.stream.Duplicates
	case sp.kv != nil:
		replicas, maxAge, history = sp.kv.Replicas, sp.kv.TTL, int64(sp.kv.History)
	default:
		replicas, maxAge = sp.obj.Replicas, sp.obj.TTL
	}
	var out []string
	if c.Replicas != replicas {
		out = append(out, fmt.Sprintf("replicas %d (asked %d)", c.Replicas, replicas))
	}
	if sp.stream == nil && c.MaxAge != maxAge {
		out = append(out, fmt.Sprintf("retention %v (asked %v)", c.MaxAge, maxAge))
	}
	if sp.kv != nil && c.MaxMsgsPerSubject != history {
		out = append(out, fmt.Sprintf("history %d (asked %d)", c.MaxMsgsPerSubject, history))
	}
	if sp.stream != nil && c.Duplicates != dup {
		out = append(out, fmt.Sprintf("duplicate window %v (asked %v)", c.Duplicates, dup))
	}
	return out
}

// CheckStream refuses a stream that is sp's but with settings XCT never
// makes: a republish, sources, a mirror, a subject transform, other
// subjects; for the chains (eventlog's own check) also deletes, purges or
// rollups allowed. Size limits, replicas, retention and the duplicate
// window are the operator's and not looked at.
func CheckStream(c jetstream.StreamConfig, sp Spec) error {
	if bad := jsguard.Unlike(c, sp.Subjects, sp.Kind == KindStream); len(bad) > 0 {
		return fmt.Errorf("%w: %s %s (stream %s): %s; an operator must look at it and remove it (nats stream rm %s), then run %s again",
			ErrSettings, sp.Kind, sp.Name, sp.Stream, strings.Join(bad, "; "), sp.Stream, Command)
	}
	return nil
}

// others refuses a stream not XCT's that reaches into XCT's: a republish
// into their subjects (the server's own publish, past every permission),
// or sources or a mirror of one of them (a copy its creator may read).
func others(ctx context.Context, js jetstream.JetStream, specs []Spec) error {
	ours := map[string]bool{}
	var subjects []string
	for _, sp := range specs {
		ours[sp.Stream] = true
		subjects = append(subjects, sp.Subjects...)
	}
	var bad []string
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		c := info.Config
		if rp := c.RePublish; rp != nil {
			for _, subj := range subjects {
				if jsguard.SubjectsCollide(rp.Destination, subj) {
					bad = append(bad, fmt.Sprintf("stream %s republishes %s to %s, into XCT's %s", c.Name, rp.Source, rp.Destination, subj))
					break
				}
			}
		}
		if ours[c.Name] {
			continue // checked as XCT's above
		}
		for _, src := range c.Sources {
			if ours[src.Name] {
				bad = append(bad, fmt.Sprintf("stream %s sources XCT's %s", c.Name, src.Name))
			}
		}
		if c.Mirror != nil && ours[c.Mirror.Name] {
			bad = append(bad, fmt.Sprintf("stream %s mirrors XCT's %s", c.Name, c.Mirror.Name))
		}
	}
	if err := streams.Err(); err != nil {
		return fmt.Errorf("provision: list streams: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s; an operator must look at each and remove it", ErrSettings, strings.Join(bad, "; "))
	}
	return nil
}
