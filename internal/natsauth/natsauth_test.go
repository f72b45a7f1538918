package natsauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/services/executor"
	"github.com/xct-dev/xct/services/orchestrator"
	"github.com/xct-dev/xct/services/tracer"
	"github.com/xct-dev/xct/services/validator"
)

// conn is a connection as one user that collects the server's permission
// errors.
type conn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connectAs(t *testing.T, url, user string) *conn {
	t.Helper()
	c := &conn{errs: make(chan error, 64)}
	var err error
	c.nc, err = nats.Connect(url, testutil.NATSAs(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(c.nc.Close)
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// refused waits for the server's permissions violation naming subject.
func (c *conn) refused(t *testing.T, what, subject string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-timeout:
			t.Errorf("%s: no permissions violation for %s", what, subject)
			return
		}
	}
}

// cluster is an embedded server with XCT's stream and buckets made by the
// admin, as the services would make them.
type cluster struct {
	url   string
	admin *conn
	lctl  jetstream.Stream
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ns := testutil.RunJetStream(t) // provisioned, as a deployment is
	c := &cluster{url: ns.ClientURL()}
	c.admin = connectAs(t, c.url, natsauth.Admin)
	ctx := context.Background()
	if _, err := eventlog.Open(ctx, c.admin.nc); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.lctl, err = c.admin.js.Stream(ctx, eventlog.StreamName); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{catalog.Bucket, executor.StepsBucket, validator.ApprovalsBucket, orchestrator.OwnersBucket} {
		if _, err := c.admin.js.KeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *cluster) count(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := c.admin.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestAnonymousAccessIsRefused: no user, a wrong password or an unknown
// user is not let in; an embedded server without users is not started.
func TestAnonymousAccessIsRefused(t *testing.T) {
	ns := testutil.RunBareJetStream(t)
	for name, opts := range map[string][]nats.Option{
		"anonymous":      nil,
		"wrong password": {nats.UserInfo(natsauth.Executor, "not-the-password")},
		"unknown user":   {nats.UserInfo("mallory", testutil.NATSUsers()[natsauth.Admin])},
	} {
		nc, err := nats.Connect(ns.ClientURL(), opts...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	if s, err := natsembed.Start(natsembed.Config{Port: -1, StoreDir: t.TempDir()}); err == nil {
		s.Shutdown()
		t.Error("an embedded server without users started")
	}
}

// TestServicesWriteOnlyTheirOwnSubjects publishes, as each user, to the
// data subjects of the others: each is refused by the server and nothing
// reaches the stream; its own subjects take the write.
func TestServicesWriteOnlyTheirOwnSubjects(t *testing.T) {
	c := newCluster(t)
	type attempt struct{ user, subject, stream string }
	tools, steps := "$KV."+catalog.Bucket+".fs.write", "$KV."+executor.StepsBucket+".forged"
	chain := eventlog.Subject("x")
	denied := []attempt{
		{natsauth.Executor, chain, eventlog.StreamName},
		{natsauth.Validator, chain, eventlog.StreamName},
		{natsauth.Reader, chain, eventlog.StreamName},
		{natsauth.Tracer, chain, eventlog.StreamName},
		{natsauth.Orchestrator, eventlog.Subject("otel-1"), eventlog.OTelStreamName},
		{natsauth.Executor, eventlog.Subject("otel-1"), eventlog.OTelStreamName},
		{natsauth.Tracer, tools, "KV_" + catalog.Bucket},
		{natsauth.Orchestrator, tools, "KV_" + catalog.Bucket},
		{natsauth.Validator, tools, "KV_" + catalog.Bucket},
		{natsauth.Reader, tools, "KV_" + catalog.Bucket},
		{natsauth.Orchestrator, steps, "KV_" + executor.StepsBucket},
		{natsauth.Tracer, steps, "KV_" + executor.StepsBucket},
		{natsauth.Validator, steps, "KV_" + executor.StepsBucket},
		{natsauth.Executor, "$KV." + validator.ApprovalsBucket + ".a", "KV_" + validator.ApprovalsBucket},
		{natsauth.Tracer, "$KV." + orchestrator.OwnersBucket + ".r", "KV_" + orchestrator.OwnersBucket},
		{natsauth.Validator, "$KV." + orchestrator.QuotaBucket + ".p", "KV_" + orchestrator.QuotaBucket},
		{natsauth.Executor, "$KV." + orchestrator.QuotaBucket + ".p", "KV_" + orchestrator.QuotaBucket},
		{natsauth.Tracer, "$KV." + orchestrator.QuotaBucket + ".p", "KV_" + orchestrator.QuotaBucket},
		{natsauth.Orchestrator, "$KV." + validator.RateBucket + ".g", "KV_" + validator.RateBucket},
		{natsauth.Executor, "$KV." + validator.RateBucket + ".g", "KV_" + validator.RateBucket},
		{natsauth.Tracer, "$KV." + validator.RateBucket + ".g", "KV_" + validator.RateBucket},
	}
	for _, a := range denied {
		before := c.count(t, a.stream)
		u := connectAs(t, c.url, a.user)
		if err := u.nc.Publish(a.subject, []byte(`{"effect":"read"}`)); err != nil {
			t.Fatal(err)
		}
		u.refused(t, a.user+" publishing to "+a.subject, a.subject)
		// A flush after the violation: the server has handled the
		// publish, and the stream has not stored it.
		if err := u.nc.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Logf("flush: %v", err)
		}
		if after := c.count(t, a.stream); after != before {
			t.Errorf("%s publishing to %s: stream %s went from %d to %d messages", a.user, a.subject, a.stream, before, after)
		}
	}
	allowed := []attempt{
		{natsauth.Orchestrator, chain, eventlog.StreamName},
		{natsauth.Tracer, eventlog.Subject("otel-1"), eventlog.OTelStreamName},
		{natsauth.Executor, tools, "KV_" + catalog.Bucket},
		{natsauth.Executor, steps, "KV_" + executor.StepsBucket},
		{natsauth.Validator, "$KV." + validator.ApprovalsBucket + ".a", "KV_" + validator.ApprovalsBucket},
		{natsauth.Orchestrator, "$KV." + orchestrator.OwnersBucket + ".r", "KV_" + orchestrator.OwnersBucket},
		{natsauth.Orchestrator, "$KV." + orchestrator.QuotaBucket + ".p", "KV_" + orchestrator.QuotaBucket},
		{natsauth.Validator, "$KV." + validator.RateBucket + ".g", "KV_" + validator.RateBucket},
	}
	for _, a := range allowed {
		u := connectAs(t, c.url, a.user)
		if _, err := u.js.Publish(context.Background(), a.subject, []byte(`{}`)); err != nil {
			t.Errorf("%s publishing to %s: %v", a.user, a.subject, err)
		}
	}
}

// TestOnlyTheAdminChangesStreams: no service and not the reader may
// delete, purge or update a stream or delete a message of it; the admin
// may (so the refusals are the permissions, not the request).
func TestOnlyTheAdminChangesStreams(t *testing.T) {
	c := newCluster(t)
	if _, err := c.admin.js.Publish(context.Background(), eventlog.Subject("x"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer, natsauth.Reader} {
		u := connectAs(t, c.url, user)
		ops := map[string]func(ctx context.Context) error{
			"$JS.API.STREAM.DELETE.LCTL": func(ctx context.Context) error { return u.js.DeleteStream(ctx, eventlog.StreamName) },
			"$JS.API.STREAM.PURGE.KV_" + catalog.Bucket: func(ctx context.Context) error {
				s, err := c.admin.js.Stream(ctx, "KV_"+catalog.Bucket)
				if err != nil {
					return err
				}
				// The request as the user: the admin's handle only
				// names the stream.
				_, err = u.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+s.CachedInfo().Config.Name, nil)
				return err
			},
			"$JS.API.STREAM.MSG.DELETE.LCTL": func(ctx context.Context) error {
				_, err := u.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE.LCTL", []byte(`{"seq":1}`))
				return err
			},
			"$JS.API.STREAM.UPDATE.LCTL": func(ctx context.Context) error {
				_, err := u.js.UpdateStream(ctx, jetstream.StreamConfig{Name: eventlog.StreamName, Subjects: []string{eventlog.AllSubjects}, DenyDelete: false, DenyPurge: false})
				return err
			},
		}
		for subject, op := range ops {
			// The server drops the request and says why; the request
			// then waits for an answer that never comes, until cancelled.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- op(ctx) }()
			u.refused(t, user+" requesting "+subject, subject)
			cancel()
			if err := <-done; err == nil {
				t.Errorf("%s: %s answered", user, subject)
			}
		}
	}
	info, err := c.lctl.Info(context.Background())
	if err != nil {
		t.Fatalf("LCTL after the attempts: %v", err)
	}
	if info.State.Msgs != 1 || !info.Config.DenyDelete || !info.Config.DenyPurge {
		t.Errorf("LCTL after the attempts: %d messages, deny delete %v, deny purge %v", info.State.Msgs, info.Config.DenyDelete, info.Config.DenyPurge)
	}
	// The positive control: the admin's request reaches JetStream.
	if err := c.admin.js.DeleteStream(context.Background(), "KV_"+executor.StepsBucket); err != nil {
		t.Errorf("admin deleting a stream: %v", err)
	}
}

// TestNoServiceCreatesAStream: a stream's settings are its first
// creator's, in the request's body, which permissions do not see. A
// service that could create streams could make one with sources copying
// another's records into one it reads (the step records, the approvals),
// or a republish into another's subjects (a run's chain), made after the
// others started, which their start-time checks never see. Only the admin
// creates streams now (provision, `xct nats provision`); as each service
// and the reader, each such stream is refused by the server and does not
// exist, on a provisioned server and on a bare one (XCT's own names
// included); the services bind what the admin made, and on a bare server
// say what to run.
func TestNoServiceCreatesAStream(t *testing.T) {
	ctx := context.Background()
	ns := testutil.RunJetStream(t)
	url := ns.ClientURL()
	admin := connectAs(t, url, natsauth.Admin)
	attempts := map[string]jetstream.StreamConfig{
		"a copy of the step records": {Name: "COPY_STEPS", Sources: []*jetstream.StreamSource{{Name: "KV_" + executor.StepsBucket}}},
		"a copy of the approvals":    {Name: "COPY_APPROVALS", Sources: []*jetstream.StreamSource{{Name: "KV_" + validator.ApprovalsBucket}}},
		"a republish into the chains": {Name: "INTO_CHAINS", Subjects: []string{"mine.*"},
			RePublish: &jetstream.RePublish{Source: "mine.*", Destination: eventlog.SubjectPrefix + "{{wildcard(1)}}"}},
		"a stream of its choosing": {Name: "MINE", Subjects: []string{"mine.>"}},
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer, natsauth.Reader} {
		u := connectAs(t, url, user)
		for what, cfg := range attempts {
			cfg.Name += "_" + strings.ToUpper(user)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := u.js.CreateStream(cctx, cfg)
				done <- err
			}()
			u.refused(t, user+" creating "+what, "$JS.API.STREAM.CREATE."+cfg.Name)
			cancel()
			if err := <-done; err == nil {
				t.Errorf("%s created %s", user, what)
			}
			if _, err := admin.js.Stream(ctx, cfg.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("after %s creating %s, the stream: %v", user, what, err)
			}
		}
	}
	// The services bind what the admin made.
	if _, err := eventlog.Open(ctx, connectAs(t, url, natsauth.Tracer).nc); err != nil {
		t.Errorf("the tracer binding LCTL: %v", err)
	}
	if _, err := executor.OpenStepStore(ctx, connectAs(t, url, natsauth.Executor).nc, executor.StepStoreConfig{}); err != nil {
		t.Errorf("the executor binding its step store: %v", err)
	}

	// A bare server: XCT's own names are refused too, and each service
	// says what to run.
	bare := testutil.RunBareJetStream(t).ClientURL()
	for user, open := range map[string]func(*conn) error{
		natsauth.Orchestrator: func(c *conn) error { _, err := eventlog.Open(ctx, c.nc); return err },
		natsauth.Tracer:       func(c *conn) error { _, err := eventlog.Open(ctx, c.nc); return err },
		natsauth.Executor: func(c *conn) error {
			_, err := executor.OpenStepStore(ctx, c.nc, executor.StepStoreConfig{})
			return err
		},
		natsauth.Validator: func(c *conn) error { _, err := catalog.Watch(ctx, c.js); return err },
	} {
		u := connectAs(t, bare, user)
		if err := open(u); !errors.Is(err, jsguard.ErrMissing) || !strings.Contains(err.Error(), "xct nats provision") {
			t.Errorf("%s on an unprovisioned server: %v, want %v naming the command", user, err, jsguard.ErrMissing)
		}
	}
	ex := connectAs(t, bare, natsauth.Executor)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ex.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: executor.StepsBucket})
		done <- err
	}()
	ex.refused(t, "the executor creating its own bucket", "$JS.API.STREAM.CREATE.KV_"+executor.StepsBucket)
	cancel()
	if err := <-done; err == nil {
		t.Error("the executor created its steps bucket")
	}
	// The attack itself: the orchestrator making its own run owners
	// bucket first, with sources copying the step records (which it may
	// not read) into it.
	if _, err := connectAs(t, bare, natsauth.Admin).js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: executor.StepsBucket}); err != nil {
		t.Fatal(err)
	}
	orch := connectAs(t, bare, natsauth.Orchestrator)
	cctx, cancel = context.WithCancel(ctx)
	go func() {
		_, err := orch.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: orchestrator.OwnersBucket,
			Sources: []*jetstream.StreamSource{{Name: "KV_" + executor.StepsBucket}}})
		done <- err
	}()
	orch.refused(t, "the orchestrator making its bucket with sources", "$JS.API.STREAM.CREATE.KV_"+orchestrator.OwnersBucket)
	cancel()
	if err := <-done; err == nil {
		t.Error("the orchestrator made its bucket with the step records as sources")
	}
	if _, err := orch.js.KeyValue(ctx, orchestrator.OwnersBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("the orchestrator's bucket after its refused create: %v", err)
	}
}

// TestExecutorPutsABlobAgain: putting a blob again under the same name
// purges the old chunks (the object store's own request), which the
// executor may do on its own store only.
func TestExecutorPutsABlobAgain(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	ex := connectAs(t, c.url, natsauth.Executor)
	obs, err := ex.js.ObjectStore(ctx, executor.BlobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"first", "second"} {
		if _, err := obs.PutBytes(ctx, "step-1.1.response", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	// One chunk and one meta entry: the first chunk was purged.
	if n := c.count(t, "OBJ_"+executor.BlobsBucket); n != 2 {
		t.Errorf("the object store holds %d messages, want 2 (the old chunk purged)", n)
	}
	select {
	case err := <-ex.errs:
		t.Errorf("the executor was refused: %v", err)
	default:
	}
}

// TestReaderOnlyReads: the read-only user follows the LCTL stream (lctl
// tail) and can create no stream or bucket.
func TestReaderOnlyReads(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	l, err := eventlog.Open(ctx, connectAs(t, c.url, natsauth.Orchestrator).nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.NewChainWriter("run-1")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.Append(ctx, "step_start", "orchestrator", nil); err != nil {
			t.Fatal(err)
		}
	}
	r := connectAs(t, c.url, natsauth.Reader)
	log, err := eventlog.Bind(ctx, r.nc)
	if err != nil {
		t.Fatalf("reader binding LCTL: %v", err)
	}
	n := 0
	if err := log.Follow(ctx, "run-1", eventlog.FollowOptions{StopAtEnd: true}, func(lctl.Event) error { n++; return nil }); err != nil || n != 3 {
		t.Fatalf("reader following run-1: %d events, %v", n, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := r.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: "READER_MADE"}); err == nil {
		t.Error("the reader created a bucket")
	}
	r.refused(t, "reader creating a bucket", "$JS.API.STREAM.CREATE.KV_READER_MADE")
}

// TestPermissionsNameXCTsSubjects: the subjects the permissions name are
// the real stream and bucket names.
func TestPermissionsNameXCTsSubjects(t *testing.T) {
	want := map[string][]string{
		natsauth.Executor:     {"$KV." + catalog.Bucket + ".>", "$KV." + executor.StepsBucket + ".>", "$O." + executor.BlobsBucket + ".>"},
		natsauth.Orchestrator: {eventlog.SubjectPrefix + ">", "$KV." + orchestrator.OwnersBucket + ".>", "$KV." + orchestrator.QuotaBucket + ".>"},
		natsauth.Validator:    {"$KV." + validator.ApprovalsBucket + ".>", "$KV." + validator.RateBucket + ".>"},
		natsauth.Tracer:       {eventlog.OTelSubjectPrefix + ">", "$JS.ACK." + eventlog.StreamName + ".tracer.>", "$JS.ACK." + eventlog.OTelStreamName + ".tracer.>"},
	}
	for user, subjects := range want {
		p, err := natsauth.Permissions(user)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subjects {
			if !slices.Contains(p.Publish.Allow, s) {
				t.Errorf("%s may not publish to %s: %v", user, s, p.Publish.Allow)
			}
		}
	}
	// The runs' chains are the orchestrator's alone.
	for _, user := range []string{natsauth.Validator, natsauth.Executor, natsauth.Tracer} {
		p, err := natsauth.Permissions(user)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Publish.Allow {
			if strings.HasPrefix(s, "lctl.chain.") || s == "lctl.>" || s == ">" {
				t.Errorf("%s may publish to %s", user, s)
			}
		}
	}
	if _, err := natsauth.Permissions("mallory"); err == nil {
		t.Error("an unknown user has permissions")
	}
}

// TestCredentialsFiles: xct dev's file is made once with every user at
// mode 0600; a file others can read, an unknown user or an empty
// password is refused.
func TestCredentialsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev", "nats.yaml")
	f, err := natsauth.DevFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dev file: %v, mode %v", err, st.Mode().Perm())
	}
	for _, u := range natsauth.Users {
		if len(f[u]) < 40 {
			t.Errorf("user %s: password %d characters", u, len(f[u]))
		}
	}
	again, err := natsauth.DevFile(path)
	if err != nil || again[natsauth.Executor] != f[natsauth.Executor] {
		t.Errorf("second start: %v, same password %v", err, again[natsauth.Executor] == f[natsauth.Executor])
	}
	bad := map[string]struct {
		body string
		mode os.FileMode
		want string
	}{
		"readable": {"executor: x\n", 0o644, "want 0600"},
		"unknown":  {"mallory: x\n", 0o600, "unknown user"},
		"empty":    {"executor: \"\"\n", 0o600, "no password"},
		"none":     {"{}\n", 0o600, "no user"},
	}
	for name, b := range bad {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(b.body), b.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, b.mode); err != nil {
			t.Fatal(err)
		}
		if _, err := natsauth.Load(p); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", name, err, b.want)
		}
	}
	if _, err := f.For("nobody"); !errors.Is(err, natsauth.ErrNoUser) {
		t.Errorf("For(nobody): %v", err)
	}
	// lctl tail's file: the reader's password and nothing else.
	readerPath := filepath.Join(dir, "dev", "nats-reader.yaml")
	if err := natsauth.WriteSubset(readerPath, f, natsauth.Reader); err != nil {
		t.Fatal(err)
	}
	r, err := natsauth.Load(readerPath)
	if err != nil || len(r) != 1 || r[natsauth.Reader] != f[natsauth.Reader] {
		t.Errorf("reader file: %v %v", r, err)
	}
	if st, err := os.Stat(readerPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("reader file mode: %v", err)
	}
}

// TestKubernetesNATSConfig: the NATS configuration of deploy/k8s
// (components/nats) gives each user exactly these permissions, parsed by
// the NATS server's own parser. Regenerate its authorization block from
// Permissions when they change.
func TestKubernetesNATSConfig(t *testing.T) {
	t.Setenv("SERVER_NAME", "nats-0")
	for _, u := range natsauth.Users {
		t.Setenv("XCT_NATS_"+strings.ToUpper(u)+"_PASSWORD", "pw-"+u)
	}
	// The cluster's route user and routes (cluster.conf; deploy/k8s
	// checks them).
	t.Setenv("XCT_NATS_ROUTE_PASSWORD", "pw-route")
	for i := range 3 {
		t.Setenv(fmt.Sprintf("XCT_NATS_ROUTE_%d", i), fmt.Sprintf("nats://route:pw-route@nats-%d.nats-headless:6222", i))
	}
	opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "k8s", "components", "nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Users) != len(natsauth.Users) || opts.NoAuthUser != "" {
		t.Fatalf("deploy/k8s NATS: %d users, no_auth_user %q; want %v and none", len(opts.Users), opts.NoAuthUser, natsauth.Users)
	}
	samePermissions(t, opts.Users)
	if got := opts.JetStreamLimits.DefaultMaxConsumers; got != natsauth.MaxConsumersPerStream {
		t.Errorf("deploy/k8s NATS: default_max_consumers %d, want natsauth.MaxConsumersPerStream (%d)", got, natsauth.MaxConsumersPerStream)
	}
}

// TestServerConfig: the nats-server configuration natsauth renders (the
// separate-process tests run nats-server with it) parses to the same users,
// passwords and permissions.
func TestServerConfig(t *testing.T) {
	block, err := natsauth.ServerConfig(testutil.NATSUsers())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, block)
	}
	if len(opts.Users) != len(natsauth.Users) {
		t.Fatalf("%d users", len(opts.Users))
	}
	for _, u := range opts.Users {
		u.Password = strings.TrimPrefix(strings.TrimSuffix(u.Password, "-password"), "test-")
		u.Password = "pw-" + u.Password
	}
	samePermissions(t, opts.Users)
}

// samePermissions checks that users (passwords "pw-<user>") have
// natsauth's permissions.
func samePermissions(t *testing.T, users []*server.User) {
	t.Helper()
	norm := func(l []string) []string { l = slices.Clone(l); slices.Sort(l); return l }
	for _, u := range users {
		want, err := natsauth.Permissions(u.Username)
		if err != nil {
			t.Errorf("deploy/k8s NATS user %q: %v", u.Username, err)
			continue
		}
		if u.Password != "pw-"+u.Username {
			t.Errorf("user %s: password not from $XCT_NATS_%s_PASSWORD", u.Username, strings.ToUpper(u.Username))
		}
		got := u.Permissions
		if (got == nil) != (want == nil) {
			t.Errorf("user %s: permissions %v, want %v", u.Username, got, want)
			continue
		}
		if want == nil {
			continue
		}
		for _, pair := range []struct {
			what      string
			got, want *server.SubjectPermission
		}{{"publish", got.Publish, want.Publish}, {"subscribe", got.Subscribe, want.Subscribe}} {
			if pair.got == nil && pair.want == nil {
				continue
			}
			if pair.got == nil || pair.want == nil || !slices.Equal(norm(pair.got.Allow), norm(pair.want.Allow)) || !slices.Equal(norm(pair.got.Deny), norm(pair.want.Deny)) {
				t.Errorf("user %s %s: deploy/k8s has %+v, natsauth %+v", u.Username, pair.what, pair.got, pair.want)
			}
		}
	}
}

// Each user takes its replies under its own inbox prefix and may subscribe
// there only: a service cannot listen to the replies to another's requests
// (acknowledgements of its appends, the values it reads), nor learn where
// they go; its own requests are answered.
func TestInboxesArePrivate(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer, natsauth.Reader} {
		u := connectAs(t, c.url, user)
		if _, err := u.js.Stream(ctx, eventlog.StreamName); err != nil {
			t.Fatalf("%s: its own request through its inbox: %v", user, err)
		}
		other := natsauth.InboxPrefix(natsauth.Orchestrator) + ".>"
		if user == natsauth.Orchestrator {
			other = natsauth.InboxPrefix(natsauth.Executor) + ".>"
		}
		for _, subject := range []string{"_INBOX.>", other} {
			if _, err := u.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			u.refused(t, user+" subscribing to "+subject, subject)
		}
	}
}

// TestConsumersAreTheirOwners: the tracer's durable consumer on LCTL
// (tracer.ConsumerName) is the tracer's: no other service and not the
// reader may delete it (the tracer would read the stream again from its
// floor), update it (another filter: the tracer would miss chains), pull
// from it (the events would not reach the tracer until their ack wait
// ends), pause it or move its leader; and no service may list the
// consumers of a stream, which would name the others' ephemeral ones
// (KV watchers, followers) and their deliver subjects. Every request
// names the consumer in its subject, so the permissions can say it.
func TestConsumersAreTheirOwners(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	tr := connectAs(t, c.url, natsauth.Tracer)
	cfg := jetstream.ConsumerConfig{
		Durable:       tracer.ConsumerName,
		FilterSubject: eventlog.AllSubjects,
		AckPolicy:     jetstream.AckExplicitPolicy,
	}
	if _, err := tr.js.CreateConsumer(ctx, eventlog.StreamName, cfg); err != nil {
		t.Fatalf("the tracer creating its consumer: %v", err)
	}
	if _, err := c.admin.js.Publish(ctx, eventlog.Subject("x"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	name := eventlog.StreamName + "." + tracer.ConsumerName
	update := `{"stream_name":"LCTL","config":{"durable_name":"tracer","name":"tracer","filter_subject":"lctl.chain.nothing","ack_policy":"explicit","deliver_policy":"all"}}`
	requests := []struct{ subject, body string }{
		{"$JS.API.CONSUMER.DELETE." + name, ""},
		{"$JS.API.CONSUMER.CREATE." + name, update},
		{"$JS.API.CONSUMER.CREATE." + name + ".lctl.chain.nothing", update},
		{"$JS.API.CONSUMER.DURABLE.CREATE." + name, update},
		{"$JS.API.CONSUMER.MSG.NEXT." + name, `{"batch":1,"expires":1000000000}`},
		{"$JS.API.CONSUMER.PAUSE." + name, `{"pause_until":"2999-01-01T00:00:00Z"}`},
		{"$JS.API.CONSUMER.LEADER.STEPDOWN." + name, ""},
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Reader} {
		u := connectAs(t, c.url, user)
		reqs := slices.Clone(requests)
		if user != natsauth.Reader {
			reqs = append(reqs, struct{ subject, body string }{"$JS.API.CONSUMER.LIST." + eventlog.StreamName, ""},
				struct{ subject, body string }{"$JS.API.CONSUMER.NAMES." + eventlog.StreamName, ""})
		}
		for _, r := range reqs {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := u.nc.RequestWithContext(cctx, r.subject, []byte(r.body))
				done <- err
			}()
			u.refused(t, user+" requesting "+r.subject, r.subject)
			cancel()
			if err := <-done; err == nil {
				t.Errorf("%s: %s answered", user, r.subject)
			}
		}
	}
	info, err := tr.js.Consumer(ctx, eventlog.StreamName, tracer.ConsumerName)
	if err != nil {
		t.Fatalf("the tracer's consumer after the attempts: %v", err)
	}
	ci := info.CachedInfo()
	if ci.Config.FilterSubject != eventlog.AllSubjects || ci.Delivered.Stream != 0 || ci.NumPending != 1 || ci.Paused {
		t.Errorf("the tracer's consumer after the attempts: filter %q, delivered %d, pending %d, paused %v",
			ci.Config.FilterSubject, ci.Delivered.Stream, ci.NumPending, ci.Paused)
	}
	// The positive controls: the tracer reads and deletes its own; a
	// service still makes and deletes an ephemeral consumer of its own.
	if msgs, err := info.Fetch(1, jetstream.FetchMaxWait(5*time.Second)); err != nil {
		t.Fatal(err)
	} else {
		n := 0
		for m := range msgs.Messages() {
			n++
			if err := m.Ack(); err != nil {
				t.Errorf("the tracer acknowledging: %v", err)
			}
		}
		if n != 1 {
			t.Errorf("the tracer fetched %d messages, want 1", n)
		}
	}
	if err := tr.js.DeleteConsumer(ctx, eventlog.StreamName, tracer.ConsumerName); err != nil {
		t.Errorf("the tracer deleting its consumer: %v", err)
	}
	or := connectAs(t, c.url, natsauth.Orchestrator)
	oc, err := or.js.OrderedConsumer(ctx, eventlog.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{eventlog.Subject("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Errorf("an orchestrator's ordered consumer on a chain: %v", err)
	}
}

// TestDeliveriesGoNowhere: a push consumer's deliver subject is in its
// request's body, which subject permissions do not see, so a service may
// aim one at a subject it may not publish to, such as the catalog's
// fs.write key. The server delivers only where a subscription names that
// subject exactly (a stream's wildcard one does not count), and a service
// may subscribe in its own inbox only: the consumer stays inactive and
// the catalog as it was. (A delivery that is made is stored by a stream
// listening there: an operator must never subscribe to a data subject
// exactly, docs/security.md.)
func TestDeliveriesGoNowhere(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	if _, err := c.admin.js.Publish(ctx, eventlog.Subject("x"), []byte(`{"effect":"read"}`)); err != nil {
		t.Fatal(err)
	}
	before := c.count(t, "KV_"+catalog.Bucket)
	tr := connectAs(t, c.url, natsauth.Tracer)
	body := `{"stream_name":"LCTL","config":{"durable_name":"aimed","name":"aimed","filter_subject":"lctl.chain.>","deliver_subject":"$KV.` + catalog.Bucket + `.fs.write","ack_policy":"none","deliver_policy":"all"}}`
	msg, err := tr.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.LCTL.aimed.lctl.chain.>", []byte(body))
	if err != nil {
		t.Fatalf("the tracer creating a push consumer: %v", err)
	}
	var ci jetstream.ConsumerInfo
	if err := json.Unmarshal(msg.Data, &ci); err != nil || ci.Name != "aimed" {
		t.Fatalf("the push consumer was not made: %s (%v)", msg.Data, err)
	}
	m, err := c.admin.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.INFO.LCTL.aimed", nil)
	if err != nil {
		t.Fatal(err)
	}
	ci = jetstream.ConsumerInfo{}
	if err := json.Unmarshal(m.Data, &ci); err != nil {
		t.Fatal(err)
	}
	if ci.PushBound || ci.Delivered.Stream != 0 || ci.NumPending != 1 {
		t.Errorf("the push consumer into the catalog: active %v, delivered %d, pending %d", ci.PushBound, ci.Delivered.Stream, ci.NumPending)
	}
	if after := c.count(t, "KV_"+catalog.Bucket); after != before {
		t.Errorf("the catalog went from %d to %d messages", before, after)
	}
}

// Session 16 (ops16), issue 11: the redaction key is the admin's. The
// three services that redact could each write it (NATS cannot allow
// "create only"): on main a taken-over executor replaced the key, and
// every service started after it marked secrets with a key the attacker
// chose (equal secrets no longer gave equal markers across the cluster,
// and a guess of a low-entropy secret could be tested against markers by
// whoever knew the key without reading it). Now xct nats provision makes
// it and no service may write, update or delete it; each still reads it.
func TestNoServiceWritesTheRedactionKey(t *testing.T) {
	c := newCluster(t) // provisioned: the key is there
	ctx := context.Background()
	adminKV, err := c.admin.js.KeyValue(ctx, redact.KeyBucket)
	if err != nil {
		t.Fatal(err)
	}
	made, err := adminKV.Get(ctx, redact.KeyName)
	if err != nil || len(made.Value()) != 32 {
		t.Fatalf("the provisioned key: %v", err)
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer} {
		u := connectAs(t, c.url, user)
		if user != natsauth.Tracer {
			key, err := redact.ClusterKey(ctx, u.js)
			if err != nil || !bytes.Equal(key, made.Value()) {
				t.Errorf("%s reading the key: %v", user, err)
			}
		}
		subject := "$KV." + redact.KeyBucket + "." + redact.KeyName
		if err := u.nc.Publish(subject, []byte("0123456789abcdef0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
		u.refused(t, user+" writing the redaction key", subject)
	}
	if now, err := adminKV.Get(ctx, redact.KeyName); err != nil || !bytes.Equal(now.Value(), made.Value()) || now.Revision() != made.Revision() {
		t.Fatalf("the key after the services' writes: %v (revision %d, was %d)", err, now.Revision(), made.Revision())
	}
}

// TestServicesReadOnlyWhatTheyNeed: a bucket that holds secrets or
// another service's records is read by the services that need it only:
// the approvals (raw proposals, arguments unredacted) by the validator
// and the orchestrator, the redaction key by the three that redact, the
// step records and their blobs by the executor, the run owners by the
// orchestrator. A taken-over tracer (the OTLP parser, the debugger)
// reads none of them: not by a direct get, a stream get or a consumer.
func TestServicesReadOnlyWhatTheyNeed(t *testing.T) {
	c := newCluster(t) // every bucket provisioned
	ctx := context.Background()
	buckets := map[string][]string{
		validator.ApprovalsBucket: {natsauth.Validator, natsauth.Orchestrator},
		redact.KeyBucket:          {natsauth.Orchestrator, natsauth.Validator, natsauth.Executor},
		executor.StepsBucket:      {natsauth.Executor},
		orchestrator.OwnersBucket: {natsauth.Orchestrator},
		orchestrator.QuotaBucket:  {natsauth.Orchestrator},
		validator.RateBucket:      {natsauth.Validator},
	}
	for bucket := range buckets {
		kv, err := c.admin.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "k", []byte("secret-of-"+bucket)); err != nil {
			t.Fatal(err)
		}
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer} {
		u := connectAs(t, c.url, user)
		for bucket, readers := range buckets {
			stream := "KV_" + bucket
			may := slices.Contains(readers, user)
			if may {
				kv, err := u.js.KeyValue(ctx, bucket)
				if err != nil {
					t.Errorf("%s opening %s: %v", user, bucket, err)
					continue
				}
				if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "secret-of-"+bucket {
					t.Errorf("%s reading %s: %v", user, bucket, err)
				}
				continue
			}
			for _, r := range []struct{ subject, body string }{
				{"$JS.API.DIRECT.GET." + stream + ".$KV." + bucket + ".k", ""},
				{"$JS.API.DIRECT.GET." + stream, `{"last_by_subj":"$KV.` + bucket + `.k"}`},
				{"$JS.API.STREAM.MSG.GET." + stream, `{"last_by_subj":"$KV.` + bucket + `.k"}`},
				{"$JS.API.CONSUMER.CREATE." + stream + ".peek", `{"stream_name":"` + stream + `","config":{"name":"peek","ack_policy":"none","deliver_policy":"all"}}`},
				{"$JS.API.CONSUMER.CREATE." + stream + ".peek.$KV." + bucket + ".k", `{"stream_name":"` + stream + `","config":{"name":"peek","ack_policy":"none","deliver_policy":"all","filter_subject":"$KV.` + bucket + `.k"}}`},
			} {
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					m, err := u.nc.RequestWithContext(cctx, r.subject, []byte(r.body))
					if err == nil && strings.Contains(string(m.Data), "secret-of-") {
						err = errors.New("answered with the secret")
					} else if err == nil {
						err = errors.New("answered: " + string(m.Data))
					}
					done <- err
				}()
				u.refused(t, user+" requesting "+r.subject, r.subject)
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("%s: %s: %v", user, r.subject, err)
				}
			}
		}
	}
}

// TestALogMadeFirstByAnotherIsRefused: the tracer could create LCTL (it
// may start before the orchestrator) until session 8, and the first
// creator's settings stay; now only the admin creates streams
// (TestNoServiceCreatesAStream), and this check stays for an operator's
// mistake: the streams are made here as the admin.
// A tracer taken over before the first start made LCTL republishing its
// chain messages into the tool catalog: a chain event it wrote became the
// catalog's fs.write (effect read), which the validator judges with —
// the stream's republish is the server's own publish, past every
// permission. Or LCTL sourcing the approvals (raw proposals) for every
// reader. eventlog.Open now refuses a LCTL with settings XCT never makes
// (republish, sources, a mirror, a subject transform, rollups, deletes or
// purges allowed, other subjects), so the orchestrator does not run on
// it: no run, no step.
func TestALogMadeFirstByAnotherIsRefused(t *testing.T) {
	for name, cfg := range map[string]jetstream.StreamConfig{
		"republish into the catalog": {RePublish: &jetstream.RePublish{Source: "lctl.chain.otel-x", Destination: "$KV." + catalog.Bucket + ".fs.write"}},
		"sourcing the approvals":     {Sources: []*jetstream.StreamSource{{Name: "KV_" + validator.ApprovalsBucket}}},
		"purges allowed":             {DenyDelete: true},
		"rollups allowed":            {DenyDelete: true, DenyPurge: false, AllowRollup: true},
		"a subject transform":        {DenyDelete: true, DenyPurge: true, SubjectTransform: &jetstream.SubjectTransformConfig{Source: "lctl.chain.*", Destination: "lctl.chain.{{wildcard(1)}}"}},
	} {
		t.Run(name, func(t *testing.T) {
			ns := testutil.RunBareJetStream(t)
			url := ns.ClientURL()
			admin := connectAs(t, url, natsauth.Admin)
			ctx := context.Background()
			for _, b := range []string{catalog.Bucket, validator.ApprovalsBucket} {
				if _, err := admin.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
					t.Fatal(err)
				}
			}
			cfg.Name, cfg.Subjects = eventlog.StreamName, []string{eventlog.AllSubjects}
			if _, err := admin.js.CreateStream(ctx, cfg); err != nil {
				t.Fatalf("making LCTL: %v", err)
			}
			orch := connectAs(t, url, natsauth.Orchestrator)
			if _, err := eventlog.Open(ctx, orch.nc); !errors.Is(err, eventlog.ErrStreamSettings) {
				t.Errorf("the orchestrator opening the tracer's LCTL (%s): %v", name, err)
			}
		})
	}
	// XCT's own LCTL opens, made by the admin, for both.
	ns := testutil.RunJetStream(t)
	ctx := context.Background()
	if _, err := eventlog.Open(ctx, connectAs(t, ns.ClientURL(), natsauth.Tracer).nc); err != nil {
		t.Errorf("the tracer opening XCT's LCTL: %v", err)
	}
	if _, err := eventlog.Open(ctx, connectAs(t, ns.ClientURL(), natsauth.Orchestrator).nc); err != nil {
		t.Errorf("the orchestrator opening XCT's LCTL: %v", err)
	}
}

// TestCatalogRepublishedIntoIsRefused: the tool catalog is written by
// the executor only, but a stream's republish is the server's own
// publish: the orchestrator makes its run owners bucket when it is
// missing, with settings of its choosing, and one republishing into
// $KV.XCT_TOOLS turned what it wrote into the catalog's fs.write with
// effect read, which the validator judges with. The catalog watch now
// refuses to load while a stream republishes into it, and a catalog
// loaded before such a stream appears drops every tool at the next
// change (unknown tools are denied).
func TestCatalogRepublishedIntoIsRefused(t *testing.T) {
	ctx := context.Background()
	write := &xctv1.ToolDescriptor{Name: "fs.write", Effect: xctv1.Effect_EFFECT_REVERSIBLE}
	forged, err := protojson.Marshal(&xctv1.ToolDescriptor{Name: "fs.write", Effect: xctv1.Effect_EFFECT_READ})
	if err != nil {
		t.Fatal(err)
	}
	republishing := jetstream.StreamConfig{Name: "KV_" + orchestrator.OwnersBucket, Subjects: []string{"$KV." + orchestrator.OwnersBucket + ".>"},
		RePublish: &jetstream.RePublish{Source: "$KV." + orchestrator.OwnersBucket + ".>", Destination: "$KV." + catalog.Bucket + ".>"}}
	for _, before := range []bool{true, false} {
		ns := testutil.RunBareJetStream(t)
		url := ns.ClientURL()
		// Made as the admin: no service may create a stream now
		// (TestNoServiceCreatesAStream); the check stays for an
		// operator's mistake.
		admin := connectAs(t, url, natsauth.Admin)
		if _, err := admin.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: catalog.Bucket}); err != nil {
			t.Fatal(err)
		}
		ex := connectAs(t, url, natsauth.Executor)
		if err := catalog.Publish(ctx, ex.js, []*xctv1.ToolDescriptor{write}); err != nil {
			t.Fatal(err)
		}
		orch := connectAs(t, url, natsauth.Orchestrator)
		val := connectAs(t, url, natsauth.Validator)
		if before {
			if _, err := admin.js.CreateStream(ctx, republishing); err != nil {
				t.Fatal(err)
			}
			if _, err := catalog.Watch(ctx, val.js); err == nil || !strings.Contains(err.Error(), "republishes") {
				t.Errorf("the validator's catalog loaded with a stream republishing into it: %v", err)
			}
			continue
		}
		cat, err := catalog.Watch(ctx, val.js)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.js.CreateStream(ctx, republishing); err != nil {
			t.Fatal(err)
		}
		if _, err := orch.js.Publish(ctx, "$KV."+orchestrator.OwnersBucket+".fs.write", forged); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, time.Minute, func() error {
			if d, ok := cat.Get("fs.write"); ok {
				if d.GetEffect() == xctv1.Effect_EFFECT_READ {
					return fmt.Errorf("fs.write is %s in the validator's catalog", d.GetEffect())
				}
				return errors.New("fs.write still there")
			}
			return nil
		})
	}
}

// TestTracerCannotAppendToARunsChain is the attack of a taken-over
// tracer on the audit log: with its own credentials it seals an event
// that follows a run's last one (the right seq and prev_hash, so every
// reader would take it for the orchestrator's) and appends it, raw and
// through a chain writer; it also tries to start a chain in LCTL under an
// otel- name, at the subject otel chains had before. The server refuses
// each publish, and the run's chain is what the orchestrator wrote. The
// tracer's own writes, the otel chains, land on LCTL_OTEL and are read
// back through every reader's path (ReadChain, Chains, Follow of all).
func TestTracerCannotAppendToARunsChain(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	orch, err := eventlog.Open(ctx, connectAs(t, c.url, natsauth.Orchestrator).nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := orch.NewChainWriter("run-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{lctl.TypeRunStarted, lctl.TypeStepStart} {
		if _, err := w.Append(ctx, typ, "orchestrator", nil); err != nil {
			t.Fatal(err)
		}
	}
	tr := connectAs(t, c.url, natsauth.Tracer)
	tlog, err := eventlog.Open(ctx, tr.nc)
	if err != nil {
		t.Fatalf("the tracer opening the log: %v", err)
	}
	// The forged event, sealed after the run's last one.
	last := w.Last()
	forged := lctl.Event{ChainID: "run-1", Seq: last.Seq + 1, Type: lctl.TypeStepEnd, Timestamp: last.Timestamp, Agent: "orchestrator",
		Data: map[string]any{"status": "success", "forged": true}}
	raw, err := forged.SealEncoded(last.Hash)
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[string]func(ctx context.Context) error{
		"a raw publish of the sealed event": func(ctx context.Context) error {
			_, err := tr.js.Publish(ctx, eventlog.LegacySubject("run-1"), raw)
			return err
		},
		"an append through a chain writer": func(ctx context.Context) error {
			fw, err := tlog.ResumeChainWriter(ctx, "run-1")
			if err != nil {
				return err
			}
			_, err = fw.Append(ctx, lctl.TypeStepEnd, "orchestrator", map[string]any{"forged": true})
			return err
		},
		"a new chain at an otel chain's old subject": func(ctx context.Context) error {
			_, err := tr.js.Publish(ctx, eventlog.LegacySubject("otel-0af7651916cd43dd8448eb211c80319c"), raw)
			return err
		},
	}
	for what, attempt := range attempts {
		subject := eventlog.LegacySubject("run-1")
		if strings.Contains(what, "otel") {
			subject = eventlog.LegacySubject("otel-0af7651916cd43dd8448eb211c80319c")
		}
		before := c.count(t, eventlog.StreamName)
		// The server drops the publish and says why; the publish then
		// waits for an acknowledgement that never comes, until cancelled.
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- attempt(actx) }()
		tr.refused(t, "the tracer: "+what, subject)
		cancel()
		if err := <-done; err == nil {
			t.Errorf("the tracer: %s: acknowledged", what)
		}
		if after := c.count(t, eventlog.StreamName); after != before {
			t.Errorf("the tracer: %s: LCTL went from %d to %d messages", what, before, after)
		}
	}
	events, err := orch.ReadChain(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || lctl.Verify(events) != nil || events[1].Hash != last.Hash {
		t.Fatalf("run-1 after the attacks: %d events (%v), want the orchestrator's 2", len(events), lctl.Verify(events))
	}

	// What the tracer may do: write its otel chains, on LCTL_OTEL.
	const otelChain = "otel-4bf92f3577b34da6a3ce929d0e0e4736"
	ow, err := tlog.NewChainWriter(otelChain)
	if err != nil {
		t.Fatal(err)
	}
	var written []lctl.Event
	for _, typ := range []string{lctl.TypeStepStart, lctl.TypeStepEnd} {
		e, err := ow.Append(ctx, typ, "agent", map[string]any{"otel": map[string]any{"span_id": typ}})
		if err != nil {
			t.Fatalf("the tracer writing %s: %v", otelChain, err)
		}
		written = append(written, e)
	}
	if n := c.count(t, eventlog.OTelStreamName); n != 2 {
		t.Errorf("LCTL_OTEL holds %d messages, want the tracer's 2", n)
	}
	reader, err := eventlog.Bind(ctx, connectAs(t, c.url, natsauth.Reader).nc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.ReadChain(ctx, otelChain)
	if err != nil || len(got) != 2 || got[1].Hash != written[1].Hash {
		t.Fatalf("the reader reading %s: %d events, %v", otelChain, len(got), err)
	}
	chains, err := reader.Chains(ctx)
	if err != nil || chains["run-1"] != 2 || chains[otelChain] != 2 || len(chains) != 2 {
		t.Fatalf("the reader listing chains: %v, %v", chains, err)
	}
	seen := map[string]int{}
	if err := reader.Follow(ctx, "", eventlog.FollowOptions{StopAtEnd: true}, func(e lctl.Event) error { seen[e.ChainID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if seen["run-1"] != 2 || seen[otelChain] != 2 {
		t.Fatalf("the reader following every chain saw %v", seen)
	}
}

// TestAnOTelLogMadeFirstByTheTracerIsRefused: the tracer may create
// LCTL_OTEL (it may start first), and a stream's settings are its first
// creator's. Made to republish what the tracer writes there into
// lctl.chain.<token>, it would put the tracer's events on a run's chain
// past every permission (the server's own publish: shown here, the
// forged event lands on LCTL). The orchestrator does not run on it.
func TestAnOTelLogMadeFirstByTheTracerIsRefused(t *testing.T) {
	ns := testutil.RunBareJetStream(t)
	url := ns.ClientURL()
	ctx := context.Background()
	tr := connectAs(t, url, natsauth.Tracer)
	planted := jetstream.StreamConfig{
		Name: eventlog.OTelStreamName, Subjects: []string{eventlog.AllOTelSubjects}, DenyDelete: true, DenyPurge: true,
		RePublish: &jetstream.RePublish{Source: eventlog.AllOTelSubjects, Destination: eventlog.SubjectPrefix + "{{wildcard(1)}}"},
	}
	// The tracer may not make it any more (session 8, provision8); an
	// operator's mistake could, and the check stays for that.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := tr.js.CreateStream(cctx, planted); done <- err }()
	tr.refused(t, "the tracer making LCTL_OTEL", "$JS.API.STREAM.CREATE."+eventlog.OTelStreamName)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the tracer made LCTL_OTEL")
	}
	admin := connectAs(t, url, natsauth.Admin)
	if _, err := admin.js.CreateStream(ctx, planted); err != nil {
		t.Fatal(err)
	}
	lctlStream, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{Name: eventlog.StreamName, Subjects: []string{eventlog.AllSubjects}, DenyDelete: true, DenyPurge: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.js.Publish(ctx, eventlog.OTelSubjectPrefix+"run-1", []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if _, err := lctlStream.GetLastMsgForSubject(ctx, eventlog.LegacySubject("run-1")); err != nil {
			return fmt.Errorf("the republished event is not on run-1's subject: %w", err)
		}
		return nil
	})
	orch := connectAs(t, url, natsauth.Orchestrator)
	if _, err := eventlog.Open(ctx, orch.nc); !errors.Is(err, eventlog.ErrStreamSettings) || !strings.Contains(err.Error(), eventlog.OTelStreamName) {
		t.Errorf("the orchestrator opening the tracer's LCTL_OTEL: %v, want ErrStreamSettings naming it", err)
	}
}

// TestConsumersAreBounded: any service may create consumers (which ones
// is in the request's body), so a taken-over one could make durable
// consumers until the server gave out; every server XCT configures bounds
// them per stream. As the executor, durable consumers are made on LCTL up
// to the bound; the next is refused by the server and the stream keeps
// the bound; one deleted makes room again. The nats-server configuration
// the tests and the chaos suite run carries the same bound.
func TestConsumersAreBounded(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	ex := connectAs(t, c.url, natsauth.Tracer) // it reads the chains with consumers (consumes)
	consumers := func() int {
		info, err := c.lctl.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	durable := func(i int) jetstream.ConsumerConfig {
		return jetstream.ConsumerConfig{Durable: fmt.Sprintf("flood-%d", i), FilterSubject: eventlog.AllSubjects, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true}
	}
	for i := consumers(); i < natsauth.MaxConsumersPerStream; i++ {
		if _, err := ex.js.CreateConsumer(ctx, eventlog.StreamName, durable(i)); err != nil {
			t.Fatalf("consumer %d of %d: %v", i+1, natsauth.MaxConsumersPerStream, err)
		}
	}
	_, err := ex.js.CreateConsumer(ctx, eventlog.StreamName, durable(natsauth.MaxConsumersPerStream))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeMaximumConsumersLimit {
		t.Fatalf("consumer %d: %v, want the maximum consumers limit", natsauth.MaxConsumersPerStream+1, err)
	}
	if n := consumers(); n != natsauth.MaxConsumersPerStream {
		t.Fatalf("LCTL has %d consumers, want %d", n, natsauth.MaxConsumersPerStream)
	}
	if err := ex.js.DeleteConsumer(ctx, eventlog.StreamName, "flood-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.js.CreateConsumer(ctx, eventlog.StreamName, durable(natsauth.MaxConsumersPerStream)); err != nil {
		t.Fatalf("a consumer after one was deleted: %v", err)
	}
	opts, err := server.ProcessConfigFile(testutil.NATSServerConfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := opts.JetStreamLimits.DefaultMaxConsumers; got != natsauth.MaxConsumersPerStream {
		t.Errorf("the tests' nats-server configuration: default_max_consumers %d, want %d", got, natsauth.MaxConsumersPerStream)
	}
}

// TestNobodySubscribesToDataSubjects: a push consumer's deliver subject is
// in the request's body, which permissions do not see, and any service may
// make one; the server delivers only while a subscription names that
// subject exactly, and a delivery that is made is stored by the stream
// listening there. Aimed at the catalog's fs.write or at a run's chain,
// it would write them the day an operator subscribed there to look
// (`nats sub '$KV.XCT_TOOLS.fs.write'`): shown before, the catalog took
// the chain's event as fs.write. Nobody may subscribe to a data subject
// now, the admin included, so such a consumer never delivers.
func TestNobodySubscribesToDataSubjects(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	if _, err := c.admin.js.Publish(ctx, eventlog.Subject("x"), []byte(`{"effect":"read"}`)); err != nil {
		t.Fatal(err)
	}
	before := c.count(t, "KV_"+catalog.Bucket)
	tr := connectAs(t, c.url, natsauth.Tracer)
	body := `{"stream_name":"LCTL","config":{"durable_name":"aimed","name":"aimed","filter_subject":"lctl.chain.>","deliver_subject":"$KV.` + catalog.Bucket + `.fs.write","ack_policy":"none","deliver_policy":"all"}}`
	if _, err := tr.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.LCTL.aimed.lctl.chain.>", []byte(body)); err != nil {
		t.Fatalf("the tracer creating a push consumer: %v", err)
	}
	for _, subject := range []string{"$KV." + catalog.Bucket + ".fs.write", eventlog.Subject("run-1"), eventlog.Subject("otel-1"),
		"$KV." + executor.StepsBucket + ".s", "$KV." + validator.ApprovalsBucket + ".a", "$O." + executor.BlobsBucket + ".C.x"} {
		for _, user := range natsauth.Users {
			u := c.admin
			if user != natsauth.Admin {
				u = connectAs(t, c.url, user)
			}
			if _, err := u.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			u.refused(t, user+" subscribing to "+subject, subject)
		}
	}
	// The admin's subscription was refused: the consumer stays inactive
	// and the catalog as it was.
	if err := c.admin.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := c.admin.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.INFO.LCTL.aimed", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ci jetstream.ConsumerInfo
	if err := json.Unmarshal(m.Data, &ci); err != nil {
		t.Fatal(err)
	}
	if ci.PushBound || ci.Delivered.Stream != 0 {
		t.Errorf("the push consumer into the catalog: active %v, delivered %d", ci.PushBound, ci.Delivered.Stream)
	}
	if after := c.count(t, "KV_"+catalog.Bucket); after != before {
		t.Errorf("the catalog went from %d to %d messages", before, after)
	}
	// The admin still subscribes elsewhere (its own inbox answers its
	// requests above) and watches a bucket through a consumer.
	kv, err := c.admin.js.KeyValue(ctx, catalog.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("the admin watching the catalog: %v", err)
	}
	defer func() { _ = w.Stop() }()
	select {
	case <-w.Updates():
	case <-time.After(10 * time.Second):
		t.Error("the admin's catalog watch delivered nothing")
	}
}

// TestABucketRepublishingIntoTheChainsIsRefused: the general case of
// TestAnOTelLogMadeFirstByTheTracerIsRefused. A service may create its
// buckets when they are missing, with the settings it likes: the executor
// making its step records first, republishing each put into
// lctl.chain.<key>, would put its writes on a run's chain past every
// permission (shown: the put lands on run-1's subject of LCTL). The
// orchestrator does not run while a stream republishes into the chains.
func TestABucketRepublishingIntoTheChainsIsRefused(t *testing.T) {
	ns := testutil.RunBareJetStream(t)
	url := ns.ClientURL()
	ctx := context.Background()
	admin := connectAs(t, url, natsauth.Admin)
	lctlStream, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{Name: eventlog.StreamName, Subjects: []string{eventlog.AllSubjects}, DenyDelete: true, DenyPurge: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{Name: eventlog.OTelStreamName, Subjects: []string{eventlog.AllOTelSubjects}, DenyDelete: true, DenyPurge: true}); err != nil {
		t.Fatal(err)
	}
	ex := connectAs(t, url, natsauth.Executor)
	planted := jetstream.KeyValueConfig{Bucket: executor.StepsBucket,
		RePublish: &jetstream.RePublish{Source: "$KV." + executor.StepsBucket + ".*", Destination: eventlog.SubjectPrefix + "{{wildcard(1)}}"}}
	// The executor may not make it any more (session 8, provision8); an
	// operator's mistake could, and the check stays for that.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := ex.js.CreateKeyValue(cctx, planted); done <- err }()
	ex.refused(t, "the executor making its bucket", "$JS.API.STREAM.CREATE.KV_"+executor.StepsBucket)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the executor made its bucket")
	}
	if _, err := admin.js.CreateKeyValue(ctx, planted); err != nil {
		t.Fatal(err)
	}
	kv, err := ex.js.KeyValue(ctx, executor.StepsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "run-1", []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if _, err := lctlStream.GetLastMsgForSubject(ctx, eventlog.LegacySubject("run-1")); err != nil {
			return fmt.Errorf("the republished put is not on run-1's subject: %w", err)
		}
		return nil
	})
	for _, user := range []string{natsauth.Orchestrator, natsauth.Tracer} {
		u := connectAs(t, url, user)
		if _, err := eventlog.Open(ctx, u.nc); !errors.Is(err, eventlog.ErrStreamSettings) || !strings.Contains(err.Error(), "KV_"+executor.StepsBucket) {
			t.Errorf("the %s opening the log: %v, want ErrStreamSettings naming the bucket", user, err)
		}
	}
}

// TestConsumerNamedInTheBodyIsTheOwners (session 10, trust10c): a
// consumer may also be made by the five-token request
// $JS.API.CONSUMER.CREATE.<stream>, which names the consumer in its body
// (config.name), where permissions do not look. Given the name of the
// tracer's durable consumer, the server took such a request from any
// service as an update of that consumer: another filter (the tracer then
// misses every run's chain: a hidden record) or an inactive threshold (the
// server deletes it). No service makes a consumer that way (the clients
// name it in the subject), so the short form is denied to all but the
// admin; the tracer's consumer stays as it was, and a service's own
// ephemeral and ordered consumers still work.
func TestConsumerNamedInTheBodyIsTheOwners(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	tr := connectAs(t, c.url, natsauth.Tracer)
	cfg := jetstream.ConsumerConfig{
		Durable:       tracer.ConsumerName,
		FilterSubject: eventlog.AllSubjects,
		AckPolicy:     jetstream.AckExplicitPolicy,
	}
	if _, err := tr.js.CreateConsumer(ctx, eventlog.StreamName, cfg); err != nil {
		t.Fatalf("the tracer creating its consumer: %v", err)
	}
	subject := "$JS.API.CONSUMER.CREATE." + eventlog.StreamName
	bodies := []string{
		`{"stream_name":"LCTL","config":{"name":"tracer","filter_subject":"lctl.chain.nothing","ack_policy":"explicit","deliver_policy":"all"}}`,
		`{"stream_name":"LCTL","config":{"name":"tracer","filter_subject":"lctl.chain.>","ack_policy":"explicit","deliver_policy":"all","inactive_threshold":1000000}}`,
	}
	for _, user := range []string{natsauth.Orchestrator, natsauth.Validator, natsauth.Executor, natsauth.Tracer, natsauth.Reader} {
		u := connectAs(t, c.url, user)
		for _, body := range bodies {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan *nats.Msg, 1)
			go func() {
				msg, _ := u.nc.RequestWithContext(cctx, subject, []byte(body))
				done <- msg
			}()
			u.refused(t, user+" requesting "+subject, subject)
			cancel()
			if msg := <-done; msg != nil {
				t.Errorf("%s: %s answered %s", user, subject, msg.Data)
			}
		}
	}
	info, err := tr.js.Consumer(ctx, eventlog.StreamName, tracer.ConsumerName)
	if err != nil {
		t.Fatalf("the tracer's consumer after the attempts: %v", err)
	}
	if ci := info.CachedInfo(); ci.Config.FilterSubject != eventlog.AllSubjects || ci.Config.InactiveThreshold != 0 {
		t.Errorf("the tracer's consumer after the attempts: filter %q, inactive threshold %v", ci.Config.FilterSubject, ci.Config.InactiveThreshold)
	}
	// The positive controls: a service's own consumers, named in the
	// subject as the clients name them.
	or := connectAs(t, c.url, natsauth.Orchestrator)
	if _, err := c.admin.js.Publish(ctx, eventlog.Subject("x"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	chain := jetstream.OrderedConsumerConfig{FilterSubjects: []string{eventlog.Subject("x")}}
	oc, err := or.js.OrderedConsumer(ctx, eventlog.StreamName, chain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Errorf("an orchestrator's ordered consumer on a chain: %v", err)
	}
	eph, err := or.js.CreateConsumer(ctx, eventlog.StreamName, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, FilterSubject: eventlog.Subject("x")})
	if err != nil {
		t.Fatalf("an orchestrator's ephemeral consumer on a chain: %v", err)
	}
	if err := or.js.DeleteConsumer(ctx, eventlog.StreamName, eph.CachedInfo().Name); err != nil {
		t.Errorf("the orchestrator deleting its ephemeral consumer: %v", err)
	}
}

// TestDeliveriesIntoTheAPIGoNowhere (session 13): a push consumer's
// deliver subject is its creator's choice, in the request's body; the
// JetStream API listens on $JS.API.> inside the account, so a delivery
// there would be a request made with no user's permissions. The tracer
// aims consumers of LCTL at the purge of LCTL and the delete of the tool
// catalog's stream: the server (2.15) counts no delivery interest on
// those subjects, the consumers stay inactive and nothing is purged or
// deleted. Nothing of XCT's makes this hold: the test is there to say so
// if a server upgrade changes it.
func TestDeliveriesIntoTheAPIGoNowhere(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	for range 3 {
		if _, err := c.admin.js.Publish(ctx, eventlog.Subject("x"), []byte(`{"effect":"read"}`)); err != nil {
			t.Fatal(err)
		}
	}
	before := c.count(t, eventlog.StreamName)
	tr := connectAs(t, c.url, natsauth.Tracer)
	for name, target := range map[string]string{"purge": "$JS.API.STREAM.PURGE." + eventlog.StreamName, "delete": "$JS.API.STREAM.DELETE.KV_" + catalog.Bucket} {
		body := `{"stream_name":"LCTL","config":{"name":"` + name + `","filter_subject":"lctl.chain.>","deliver_subject":"` + target + `","ack_policy":"none","deliver_policy":"all"}}`
		msg, err := tr.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.LCTL."+name+".lctl.chain.>", []byte(body))
		if err != nil {
			t.Fatalf("the tracer creating a push consumer into %s: %v", target, err)
		}
		var ci jetstream.ConsumerInfo
		if err := json.Unmarshal(msg.Data, &ci); err != nil || ci.Name != name {
			t.Fatalf("the push consumer into %s was not made: %s (%v)", target, msg.Data, err)
		}
		m, err := c.admin.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.INFO.LCTL."+name, nil)
		if err != nil {
			t.Fatal(err)
		}
		ci = jetstream.ConsumerInfo{}
		if err := json.Unmarshal(m.Data, &ci); err != nil {
			t.Fatal(err)
		}
		if ci.PushBound || ci.Delivered.Stream != 0 || ci.NumPending != before {
			t.Errorf("the push consumer into %s: active %v, delivered %d, pending %d", target, ci.PushBound, ci.Delivered.Stream, ci.NumPending)
		}
	}
	if after := c.count(t, eventlog.StreamName); after != before {
		t.Errorf("LCTL went from %d to %d messages", before, after)
	}
	if _, err := c.admin.js.Stream(ctx, "KV_"+catalog.Bucket); err != nil {
		t.Errorf("the catalog's stream: %v", err)
	}
}
