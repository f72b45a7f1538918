package provision_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
	"github.com/xct-dev/xct/services/validator"
)

// TestNamesAreTheServices: the names spelled out in provision are the
// ones the services and packages bind.
func TestNamesAreTheServices(t *testing.T) {
	for got, want := range map[string]string{
		provision.ChainStream:     eventlog.StreamName,
		provision.ChainSubjects:   eventlog.AllSubjects,
		provision.OTelStream:      eventlog.OTelStreamName,
		provision.OTelSubjects:    eventlog.AllOTelSubjects,
		provision.ToolsBucket:     catalog.Bucket,
		provision.RedactionBucket: redact.KeyBucket,
		provision.RedactionKey:    redact.KeyName,
		provision.StepsBucket:     executor.StepsBucket,
		provision.BlobsBucket:     executor.BlobsBucket,
		provision.ApprovalsBucket: validator.ApprovalsBucket,
		provision.OwnersBucket:    orchestrator.OwnersBucket,
		provision.QuotaBucket:     orchestrator.QuotaBucket,
		provision.RateBucket:      validator.RateBucket,
		provision.PolicyBucket:    verdict.PolicyBucket,
	} {
		if got != want {
			t.Errorf("provision has %q, the user %q", got, want)
		}
	}
	if provision.RateTTL != validator.RateBucketTTL {
		t.Errorf("rate limits' TTL: provision %v, validator %v", provision.RateTTL, validator.RateBucketTTL)
	}
	if orchestrator.ApprovalsBucket != validator.ApprovalsBucket {
		t.Errorf("approvals: orchestrator %q, validator %q", orchestrator.ApprovalsBucket, validator.ApprovalsBucket)
	}
	if provision.DefaultStepRetention != executor.DefaultStepRetention {
		t.Errorf("step retention: %v, executor's %v", provision.DefaultStepRetention, executor.DefaultStepRetention)
	}
}

// TestProvisionTwiceIsANoOp: the first run creates every stream and
// bucket, the second creates nothing and changes nothing.
func TestProvisionTwiceIsANoOp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	s := provision.Defaults()
	first, err := provision.Run(ctx, js, s)
	if err != nil {
		t.Fatal(err)
	}
	specs := provision.Specs(s)
	if len(first) != len(specs) || len(specs) != 11 {
		t.Fatalf("first run: %d results, %d specs, want 11", len(first), len(specs))
	}
	before := map[string]*jetstream.StreamInfo{}
	for _, r := range first {
		if !r.Created {
			t.Errorf("first run: %s not created", r.Spec.Stream)
		}
		st, err := js.Stream(ctx, r.Spec.Stream)
		if err != nil {
			t.Fatal(err)
		}
		before[r.Spec.Stream] = st.CachedInfo()
	}
	second, err := provision.Run(ctx, js, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range second {
		if r.Created {
			t.Errorf("second run created %s", r.Spec.Stream)
		}
		if len(r.Differs) > 0 {
			t.Errorf("second run, same settings: %s differs: %v", r.Spec.Stream, r.Differs)
		}
		st, err := js.Stream(ctx, r.Spec.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		if !info.Created.Equal(before[r.Spec.Stream].Created) || info.Config.Description != before[r.Spec.Stream].Config.Description {
			t.Errorf("%s changed by the second run", r.Spec.Stream)
		}
	}
	if len(second) != len(specs) {
		t.Errorf("second run: %d results", len(second))
	}
	// Asked for another retention: the existing buckets are kept and
	// the difference said.
	other := s
	other.StepRetention = time.Hour
	third, err := provision.Run(ctx, js, other)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range third {
		want := r.Spec.Name == provision.StepsBucket || r.Spec.Name == provision.BlobsBucket
		if got := len(r.Differs) == 1 && strings.Contains(r.Differs[0], "retention 720h0m0s (asked 1h0m0s)"); got != want || r.Created {
			t.Errorf("third run, another retention: %s created %v, differs %v", r.Spec.Stream, r.Created, r.Differs)
		}
	}
	if st, err := js.Stream(ctx, "KV_"+provision.StepsBucket); err != nil || st.CachedInfo().Config.MaxAge != s.StepRetention {
		t.Errorf("the steps bucket's retention changed: %v", err)
	}
	// What the services rely on: the step records keep 16 revisions and
	// expire after the retention, the chains deny deletes and purges.
	steps, err := js.Stream(ctx, "KV_"+provision.StepsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if c := steps.CachedInfo().Config; c.MaxMsgsPerSubject != 16 || c.MaxAge != s.StepRetention || c.Replicas != 1 {
		t.Errorf("steps bucket: history %d, max age %v, replicas %d", c.MaxMsgsPerSubject, c.MaxAge, c.Replicas)
	}
	lctl, err := js.Stream(ctx, provision.ChainStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := lctl.CachedInfo().Config; !c.DenyDelete || !c.DenyPurge || c.Duplicates != time.Hour {
		t.Errorf("LCTL: %+v", c)
	}
}

// TestProvisionRefusesWhatXCTNeverMakes: a bucket of XCT's made first with
// sources copying the step records, another stream sourcing them, one
// republishing into the chains: each is named, nothing is changed.
func TestProvisionRefusesWhatXCTNeverMakes(t *testing.T) {
	for name, plant := range map[string]func(context.Context, jetstream.JetStream) error{
		"XCT's bucket with sources": func(ctx context.Context, js jetstream.JetStream) error {
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.StepsBucket}); err != nil {
				return err
			}
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.OwnersBucket,
				Sources: []*jetstream.StreamSource{{Name: "KV_" + provision.StepsBucket}}})
			return err
		},
		"another stream sourcing the step records": func(ctx context.Context, js jetstream.JetStream) error {
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.StepsBucket}); err != nil {
				return err
			}
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COPY", Sources: []*jetstream.StreamSource{{Name: "KV_" + provision.StepsBucket}}})
			return err
		},
		"a republish into the chains": func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OWN", Subjects: []string{"own.*"},
				RePublish: &jetstream.RePublish{Source: "own.*", Destination: "lctl.chain.{{wildcard(1)}}"}})
			return err
		},
		"LCTL allowing purges": func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: provision.ChainStream, Subjects: []string{provision.ChainSubjects}})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
			if err != nil {
				t.Fatal(err)
			}
			if err := plant(ctx, js); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				_, err = provision.Run(ctx, js, provision.Defaults())
				if !errors.Is(err, provision.ErrSettings) {
					t.Fatalf("Run = %v, want %v", err, provision.ErrSettings)
				}
			}
			for _, want := range map[string][]string{
				"XCT's bucket with sources":                {"KV_XCT_RUN_OWNERS", "sources KV_XCT_STEPS"},
				"another stream sourcing the step records": {"COPY", "sources XCT's KV_XCT_STEPS"},
				"a republish into the chains":              {"OWN", "lctl.chain.{{wildcard(1)}}"},
				"LCTL allowing purges":                     {"LCTL", "deny purge false"},
			}[name] {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
		})
	}
}

// TestProvisionTurnsOnAtomicPublish: LCTL_OTEL made by an earlier XCT
// (without atomic batch publish, which the tracer's batched writes use)
// gets it turned on by the next run, said in the result; nothing else of
// the stream changes, and a run after that changes nothing. LCTL is not
// given it (nobody writes it in batches).
func TestProvisionTurnsOnAtomicPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	old := jetstream.StreamConfig{Name: provision.OTelStream, Subjects: []string{provision.OTelSubjects}, Storage: jetstream.FileStorage,
		Duplicates: time.Hour, DenyDelete: true, DenyPurge: true, MaxBytes: 1 << 30}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	updated := func(res []provision.Result) map[string][]string {
		out := map[string][]string{}
		for _, r := range res {
			if len(r.Updated) > 0 {
				out[r.Spec.Stream] = r.Updated
			}
		}
		return out
	}
	first, err := provision.Run(ctx, js, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if u := updated(first); len(u) != 2 || len(u[provision.OTelStream]) != 1 || !strings.Contains(u[provision.OTelStream][0], "atomic batch publish") ||
		!slices.Equal(u["KV_"+provision.RedactionBucket], []string{"redaction key made"}) {
		t.Fatalf("first run's updates: %v, want LCTL_OTEL's atomic publish and the redaction key", u)
	}
	for name, want := range map[string]bool{provision.OTelStream: true, provision.ChainStream: false} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.AllowAtomicPublish != want {
			t.Errorf("%s: atomic publish %v, want %v", name, c.AllowAtomicPublish, want)
		}
	}
	st, err := js.Stream(ctx, provision.OTelStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxBytes != old.MaxBytes || !c.DenyDelete || !c.DenyPurge {
		t.Errorf("LCTL_OTEL's other settings changed: %+v", c)
	}
	second, err := provision.Run(ctx, js, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if u := updated(second); len(u) != 0 {
		t.Fatalf("second run's updates: %v, want none", u)
	}
}

// Session 16 (ops16), issue 11: the redaction key is the admin's. Each
// service that redacts could write it (NATS cannot allow "create only"),
// so a taken-over one could replace it with a key of its choosing for the
// services started after. Provisioning makes it (32 random bytes), once:
// a second run keeps it, and says nothing; a key already made by an
// earlier XCT's first service is kept too.
func TestProvisionMakesTheRedactionKeyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	key := func() []byte {
		t.Helper()
		kv, err := js.KeyValue(ctx, provision.RedactionBucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, provision.RedactionKey)
		if err != nil {
			t.Fatal(err)
		}
		return e.Value()
	}
	if _, err := provision.Run(ctx, js, provision.Defaults()); err != nil {
		t.Fatal(err)
	}
	first := key()
	if len(first) != 32 || bytes.Equal(first, make([]byte, 32)) {
		t.Fatalf("redaction key %x", first)
	}
	again, err := provision.Run(ctx, js, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if len(r.Updated) > 0 {
			t.Errorf("second run updated %s: %v", r.Spec.Name, r.Updated)
		}
	}
	if !bytes.Equal(key(), first) {
		t.Fatal("the second run replaced the redaction key")
	}
}

// Session 19 (ops19), issue 17: the approvals bucket allows a message
// its own TTL, so the validator's pending index keys leave markers that
// expire; no marker is placed when one does (SubjectDeleteMarkerTTL 0).
// A bucket an earlier XCT made gets it turned on, said in the result;
// a run after that changes nothing, and nothing else of it changes.
func TestProvisionLetsTheApprovalsMarkersExpire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgTTL := func(js jetstream.JetStream) jetstream.StreamConfig {
		t.Helper()
		st, err := js.Stream(ctx, "KV_"+provision.ApprovalsBucket)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	fresh, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := provision.Run(ctx, fresh, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Spec.Name == provision.ApprovalsBucket && (!r.Created || len(r.Updated) != 0) {
			t.Fatalf("a fresh approvals bucket: %+v", r)
		}
	}
	if c := msgTTL(fresh); !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != 0 {
		t.Fatalf("a fresh approvals bucket: per-message TTL %v, marker TTL %v; want true and 0", c.AllowMsgTTL, c.SubjectDeleteMarkerTTL)
	}

	js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.ApprovalsBucket, History: provision.ApprovalHistory,
		Storage: jetstream.FileStorage, MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if c := msgTTL(js); c.AllowMsgTTL {
		t.Fatal("an earlier XCT's bucket allows per-message TTLs already")
	}
	first, err := provision.Run(ctx, js, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, r := range first {
		if r.Spec.Name == provision.ApprovalsBucket {
			said = r.Updated
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], "per-message TTLs turned on") {
		t.Fatalf("the earlier bucket's updates: %v", said)
	}
	c := msgTTL(js)
	if !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != 0 || c.MaxBytes != 1<<30 || c.MaxMsgsPerSubject != provision.ApprovalHistory {
		t.Fatalf("after provisioning: %+v", c)
	}
	second, err := provision.Run(ctx, js, provision.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range second {
		if len(r.Updated) != 0 {
			t.Fatalf("second run updated %s: %v", r.Spec.Name, r.Updated)
		}
	}
}
