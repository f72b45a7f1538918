package tracer

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// TestAckPosition reads the stream and stream seq from reply subjects of
// both forms, and refuses what is not one.
func TestAckPosition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reply          string
		stream         string
		seq, delivered uint64
		ok             bool
	}{
		{"$JS.ACK.LCTL.tracer.1.15.12.1764144000000000000.3", "LCTL", 15, 12, true},
		{"$JS.ACK.LCTL_OTEL.tracer.2.18446744073709551615.7.1764144000000000000.0", "LCTL_OTEL", 18446744073709551615, 7, true},
		{"$JS.ACK._.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0.RANDOM", "LCTL", 42, 40, true},
		{"$JS.ACK.hub.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0", "LCTL", 42, 40, true},
		{"$JS.ACK.hub.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0.RANDOM.more", "LCTL", 42, 40, true},
		{"$JS.ACK.LCTL.tracer.1.15.x.1764144000000000000.3", "", 0, 0, false}, // delivery seq not a number
		{"", "", 0, 0, false},
		{"_INBOX.abc", "", 0, 0, false},
		{"$JS.ACK.LCTL.tracer.1.15.12.1764144000000000000", "", 0, 0, false},                      // 8 tokens
		{"$JS.ACK.x.LCTL.tracer.1.15.12.1764144000000000000.3", "", 0, 0, false},                  // 10 tokens
		{"$JS.NAK.LCTL.tracer.1.15.12.1764144000000000000.3", "", 0, 0, false},                    // not an ack subject
		{"$JS.ACK.LCTL.tracer.1.1x5.12.1764144000000000000.3", "", 0, 0, false},                   // not a number
		{"$JS.ACK.LCTL.tracer.1..12.1764144000000000000.3", "", 0, 0, false},                      // empty seq
		{"$JS.ACK..tracer.1.15.12.1764144000000000000.3", "", 0, 0, false},                        // empty stream
		{"$JS.ACK.LCTL.tracer.1.184467440737095516150.12.1764144000000000000.3", "", 0, 0, false}, // 21 digits
		{"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q", "", 0, 0, false},
	}
	for _, tt := range tests {
		stream, seq, delivered, ok := ackPosition(tt.reply)
		if stream != tt.stream || seq != tt.seq || delivered != tt.delivered || ok != tt.ok {
			t.Errorf("ackPosition(%q) = %q, %d, %d, %v; want %q, %d, %d, %v",
				tt.reply, stream, seq, delivered, ok, tt.stream, tt.seq, tt.delivered, tt.ok)
		}
	}
}

// TestPositionAgreesWithMetadata: on messages a real server delivers,
// position reads what the client's Metadata does.
func TestPositionAgreesWithMetadata(t *testing.T) {
	t.Parallel()
	ns := testutil.RunJetStream(t)
	nc := testutil.Connect(t, ns)
	ctx := context.Background()
	l, err := eventlog.Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	js := l.JetStream()
	for i := range 5 {
		if _, err := js.Publish(ctx, eventlog.Subject(fmt.Sprintf("c-%d", i)), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, eventlog.StreamName, jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(5)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok := ackPosition(m.Reply()); !ok {
			t.Errorf("ackPosition does not read the server's reply subject %q", m.Reply())
		}
		stream, seq, delivered, err := position(m)
		if err != nil || stream != meta.Stream || seq != meta.Sequence.Stream || delivered != meta.Sequence.Consumer {
			t.Errorf("position = %q, %d, %d, %v; Metadata has %q, %d, %d",
				stream, seq, delivered, err, meta.Stream, meta.Sequence.Stream, meta.Sequence.Consumer)
		}
	}
	if err := batch.Error(); err != nil || n != 5 {
		t.Fatalf("%d messages, %v", n, err)
	}
}

// TestFallBehindKeepsOneMessageOpen: a chain behind keeps the position
// before its first message not stored, whatever comes after it, with one
// message open per chain and stream however many fall behind; an earlier
// message redelivered moves that one back.
func TestFallBehindKeepsOneMessageOpen(t *testing.T) {
	t.Parallel()
	lctl, otel := &feed{progress: newProgress(10)}, &feed{progress: newProgress(0)}
	s := &Service{behind: map[string]*behindChain{}}
	lctl.progress.done(11)
	s.fallBehind("a", lctl, 12)
	lctl.progress.done(13)
	for seq := uint64(14); seq < 1000; seq++ {
		s.fallBehind("a", lctl, seq)
	}
	otel.progress.done(1)
	otel.progress.done(2)
	s.fallBehind("otel-b", otel, 3)
	otel.progress.done(4)
	if got := lctl.progress.floor(); got != 11 {
		t.Errorf("LCTL floor %d with chain a behind from 12, want 11", got)
	}
	if got := otel.progress.floor(); got != 2 {
		t.Errorf("LCTL_OTEL floor %d with chain otel-b behind from 3, want 2", got)
	}
	if n := len(lctl.progress.open); n != 1 {
		t.Errorf("%d LCTL messages open, want 1", n)
	}
	s.fallBehind("a", lctl, 12) // the same again
	s.fallBehind("a", lctl, 9)  // an earlier one, redelivered
	if got := lctl.progress.floor(); got != 8 {
		t.Errorf("LCTL floor %d after message 9 fell behind, want 8", got)
	}
	if n := len(lctl.progress.open); n != 1 {
		t.Errorf("%d LCTL messages open, want 1", n)
	}
	// Read back: its first message done, the floor is the highest seen.
	for _, r := range s.behind["a"].firsts {
		r.f.progress.done(r.seq)
	}
	if got := lctl.progress.floor(); got != 999 {
		t.Errorf("LCTL floor %d once chain a is read back, want 999", got)
	}
	if got := otel.progress.floor(); got != 2 {
		t.Errorf("LCTL_OTEL floor %d, want 2 (otel-b is still behind)", got)
	}
}
