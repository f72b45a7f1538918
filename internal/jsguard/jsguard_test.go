package jsguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/testutil"
)

func TestSubjectsCollide(t *testing.T) {
	const approvals = "$KV.XCT_APPROVALS.>"
	for _, c := range []struct {
		a    string
		want bool
	}{
		{"$KV.XCT_APPROVALS.>", true},
		{"$KV.XCT_APPROVALS.run.step", true},
		{"$KV.*.run.step", true},
		{"$KV.>", true},
		{">", true},
		{"*.*.*", true},
		{"$KV.XCT_APPROVALS", false},
		{"$KV.XCT_TOOLS.>", false},
		{"$KV.XCT_APPROVALSX.a", false},
		{"*.*", false},
		// Mapping functions in a republish destination: a token they make
		// (or several: split) is known only when a message comes.
		{"{{wildcard(1)}}.{{wildcard(2)}}.>", true},
		{"$KV.{{wildcard(1)}}.x", true},
		{"$KV.{{ wildcard(1) }}", true},
		{"$1.$2.>", true},
		{"{{split(1,-)}}", true},
		{"other.{{wildcard(1)}}", false},
	} {
		if got := jsguard.SubjectsCollide(c.a, approvals); got != c.want {
			t.Errorf("subjectsCollide(%q, %q) = %v, want %v", c.a, approvals, got, c.want)
		}
	}
}

// TestMappedDestinationIsSeen: a republish destination made of mapping
// functions writes wherever the message's own subject says, so a stream
// whose destination names no bucket still wrote "forged" into the tool
// catalog, and RepublishedInto did not see it (its tokens were compared
// as literals).
func TestMappedDestinationIsSeen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(testutil.Connect(t, testutil.RunBareJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "XCT_TOOLS"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OWN", Subjects: []string{"own.>"},
		RePublish: &jetstream.RePublish{Source: "own.*.*.>", Destination: "{{wildcard(1)}}.{{wildcard(2)}}.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "own.$KV.XCT_TOOLS.fs.write", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		_, err := kv.Get(ctx, "fs.write")
		return err
	})
	if err := jsguard.RepublishedInto(ctx, js, "$KV.XCT_TOOLS.>"); !errors.Is(err, jsguard.ErrRepublished) || !strings.Contains(err.Error(), "OWN") {
		t.Fatalf("RepublishedInto = %v, want %v naming OWN", err, jsguard.ErrRepublished)
	}
}
