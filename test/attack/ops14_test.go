package attack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/testutil"
)

// natsUser is a connection as one NATS user that notes the permissions
// violations the server sends it.
type natsUser struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	refused chan error
}

func connectNATSAs(t *testing.T, url, user string) *natsUser {
	t.Helper()
	u := &natsUser{refused: make(chan error, 64)}
	var err error
	u.nc, err = nats.Connect(url, testutil.NATSAs(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case u.refused <- err:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(u.nc.Close)
	if u.js, err = jetstream.New(u.nc); err != nil {
		t.Fatal(err)
	}
	return u
}

// createConsumer makes a durable consumer named name on stream with
// filter: nil when made, the server's answer or its permissions
// violation otherwise.
func (u *natsUser) createConsumer(stream, name, filter string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := u.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
		})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			return err
		case err := <-u.refused:
			if strings.Contains(err.Error(), "CONSUMER.CREATE."+stream+"."+name) {
				return err
			}
		}
	}
}

// TestAttackAServiceFillsTheConsumersOthersNeed: NATS bounds consumers
// per stream (natsauth.MaxConsumersPerStream; 8 on this test's server),
// for every user at once, and any service could create consumers on any
// stream it may read. A taken-over executor or validator made durable
// consumers on LCTL up to the bound (they outlive its connection), and
// lctl tail, WatchRun and the orchestrator's reads of a chain failed for
// everyone ("maximum consumers limit reached"); the executor did the same
// to the tool catalog the validators and orchestrators watch. Now each
// service may create consumers only on the streams it reads with them,
// with the filters it uses (natsauth's consumes, in the request's
// subject since nats-server 2.9): every such create is refused, the
// reader still reads the chain, and each service still makes the
// consumers it reads with. (A filter's wildcard is a token of the
// request's subject, which a permission's * matches too: "one chain"
// cannot be told from "every chain" by permissions.)
func TestAttackAServiceFillsTheConsumersOthersNeed(t *testing.T) {
	t.Parallel()
	const bound = 8
	ns := testutil.RunJetStreamWith(t, natsembed.Config{MaxConsumersPerStream: bound})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := nats.Connect(ns.ClientURL(), testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	log, err := eventlog.Open(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	w, err := log.NewChainWriter("run-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, "run_started", "test", map[string]any{"goal": "g"}); err != nil {
		t.Fatal(err)
	}

	for _, a := range []struct{ user, stream, filter string }{
		{natsauth.Executor, "LCTL", "lctl.chain.>"},
		{natsauth.Executor, "LCTL", "lctl.chain.run-1"},
		{natsauth.Executor, "LCTL_OTEL", "lctl.otel.>"},
		{natsauth.Executor, "KV_XCT_TOOLS", "$KV.XCT_TOOLS.>"},
		{natsauth.Validator, "LCTL", "lctl.chain.>"},
		{natsauth.Validator, "LCTL_OTEL", "lctl.otel.>"},
		{natsauth.Tracer, "KV_XCT_TOOLS", "$KV.XCT_TOOLS.>"},
		{natsauth.Orchestrator, "LCTL_OTEL", "lctl.otel.>"},
	} {
		u := connectNATSAs(t, ns.ClientURL(), a.user)
		made := 0
		for i := range bound {
			if err := u.createConsumer(a.stream, fmt.Sprintf("flood-%s-%d", a.user, i), a.filter); err != nil {
				break
			}
			made++
		}
		if made > 0 {
			t.Errorf("the %s made %d consumers on %s (filter %s), which it does not read with", a.user, made, a.stream, a.filter)
		}
		u.nc.Close()
	}

	// lctl tail still reads the chain.
	reader, err := nats.Connect(ns.ClientURL(), testutil.NATSAs(natsauth.Reader))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	rlog, err := eventlog.Bind(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	if events, err := rlog.ReadChain(ctx, "run-1"); err != nil || len(events) != 1 {
		t.Fatalf("lctl tail reading run-1: %d events, %v", len(events), err)
	}
	// What the services do read with still works.
	for _, a := range []struct{ user, stream, filter string }{
		{natsauth.Orchestrator, "LCTL", "lctl.chain.run-1"},
		{natsauth.Orchestrator, "KV_XCT_TOOLS", "$KV.XCT_TOOLS.>"},
		{natsauth.Validator, "KV_XCT_APPROVALS", "$KV.XCT_APPROVALS.>"},
		{natsauth.Executor, "KV_XCT_STEPS", "$KV.XCT_STEPS.step-1"},
		{natsauth.Tracer, "LCTL_OTEL", "lctl.otel.>"},
	} {
		u := connectNATSAs(t, ns.ClientURL(), a.user)
		if err := u.createConsumer(a.stream, "own-"+a.user, a.filter); err != nil {
			t.Errorf("the %s making a consumer on %s (filter %s): %v", a.user, a.stream, a.filter, err)
		}
	}
}
