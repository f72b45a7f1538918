package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/provision"
	"github.com/xct-dev/xct/internal/testutil"
)

// TestNATSProvision: `xct nats provision` as the admin creates every
// stream and bucket, run again it creates none; as a service it is refused
// (services may not create streams); a bucket made with sources is named
// and the command fails.
func TestNATSProvision(t *testing.T) {
	ns := testutil.RunBareJetStream(t)
	ctx := context.Background()
	admin := testutil.NATSCredentialsFile(t, natsauth.Admin)
	provisionCmd := func(creds string, extra ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"nats", "provision", "--nats", ns.ClientURL(), "--nats-credentials", creds, "--wait", "0s"}, extra...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	// Every stream and bucket XCT makes, each said once.
	want := len(provision.Specs(provision.Defaults()))
	out, err := provisionCmd(admin)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	if n := strings.Count(out, "created "); n != want || strings.Contains(out, "exists ") {
		t.Errorf("first run created %d, want %d:\n%s", n, want, out)
	}
	out, err = provisionCmd(admin)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if n := strings.Count(out, "exists "); n != want || strings.Contains(out, "created ") || strings.Contains(out, "kept as it is") {
		t.Errorf("second run: %d exist, want %d, none created, none different:\n%s", n, want, out)
	}
	out, err = provisionCmd(admin, "--step-retention", "1h")
	if err != nil || strings.Count(out, "kept as it is: retention 720h0m0s (asked 1h0m0s)") != 2 {
		t.Errorf("another retention: %v, want the two step buckets kept and said:\n%s", err, out)
	}

	// Another server where the orchestrator's bucket was made with
	// sources copying the step records.
	bare := testutil.RunBareJetStream(t)
	js, err := jetstream.New(testutil.Connect(t, bare))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.StepsBucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: provision.OwnersBucket,
		Sources: []*jetstream.StreamSource{{Name: "KV_" + provision.StepsBucket}}}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"nats", "provision", "--nats", bare.ClientURL(), "--nats-credentials", admin, "--wait", "0s"}, &stdout, &stderr)
	if !errors.Is(err, provision.ErrSettings) || !strings.Contains(err.Error(), "KV_XCT_RUN_OWNERS") || !strings.Contains(err.Error(), "sources KV_XCT_STEPS") {
		t.Errorf("provision over a bucket with sources: %v", err)
	}

	// No admin password: a usage error naming what is needed.
	if err := run(ctx, []string{"nats", "provision", "--nats", ns.ClientURL()}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Errorf("without credentials: %v", err)
	}
}
