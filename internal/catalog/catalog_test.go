package catalog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/testutil"
)

func TestPublishAndWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := testutil.RunJetStream(t)
	js, err := jetstream.New(testutil.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	read := &xctv1.ToolDescriptor{Name: "fs.read", Effect: xctv1.Effect_EFFECT_READ, InputSchema: `{"type":"object"}`}
	if err := catalog.Publish(ctx, js, []*xctv1.ToolDescriptor{read}); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.Watch(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get("fs.read")
	if !ok || got.GetEffect() != xctv1.Effect_EFFECT_READ {
		t.Fatalf("fs.read = %v, %v", got, ok)
	}
	if _, ok := c.Get("fs.write"); ok {
		t.Fatal("unknown tool found")
	}
	// A tool published later shows up in the live view.
	write := &xctv1.ToolDescriptor{Name: "fs.write", Effect: xctv1.Effect_EFFECT_REVERSIBLE}
	if err := catalog.Publish(ctx, js, []*xctv1.ToolDescriptor{write}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if _, ok := c.Get("fs.write"); !ok {
			return fmt.Errorf("fs.write not seen yet")
		}
		return nil
	})
	if n := len(c.List()); n != 2 {
		t.Fatalf("list has %d tools", n)
	}
}
