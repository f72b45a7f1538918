package cli_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/testutil"
)

// TestTailNeverCreatesTheStream: a read-only command against a NATS
// server without the LCTL stream says so and leaves the stream absent.
func TestTailNeverCreatesTheStream(t *testing.T) {
	ns := testutil.RunBareJetStream(t)
	nc := testutil.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	creds := "--nats-credentials=" + testutil.NATSCredentialsFile(t, "reader")
	for _, args := range [][]string{
		{"tail", "--nats=" + ns.ClientURL(), creds, "--all", "--no-follow"},
		{"tail", "--nats=" + ns.ClientURL(), creds, "--chain", "run-1", "--no-follow"},
		{"tail", "--nats=" + ns.ClientURL(), creds, "--chain", "run-1", "--count", "1"},
	} {
		code, out, errOut := run(t, nil, args...)
		if code != 2 || !strings.Contains(errOut, "has no LCTL event stream") || !strings.Contains(errOut, "nothing was created") {
			t.Errorf("lctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
		if _, err := js.Stream(context.Background(), "LCTL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("after lctl %v the stream exists (or cannot be read): %v", args, err)
		}
	}
}

// TestLiveCommandsWithoutALiveSource: an lctl built without XCT's live
// source says what to do instead of failing obscurely.
func TestLiveCommandsWithoutALiveSource(t *testing.T) {
	for _, args := range [][]string{
		{"tail", "--all"},
		{"stats", "--chain", "run-1"},
	} {
		var stdout, stderr strings.Builder
		code := runEnv(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "no live source") {
			t.Errorf("lctl %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
	}
}
