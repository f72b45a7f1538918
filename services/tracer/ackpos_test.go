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
	tests := []struct {
		reply  string
		stream string
		seq    uint64
		ok     bool
	}{
		{"$JS.ACK.LCTL.tracer.1.15.12.1764144000000000000.3", "LCTL", 15, true},
		{"$JS.ACK.LCTL_OTEL.tracer.2.18446744073709551615.7.1764144000000000000.0", "LCTL_OTEL", 18446744073709551615, true},
		{"$JS.ACK._.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0.RANDOM", "LCTL", 42, true},
		{"$JS.ACK.hub.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0", "LCTL", 42, true},
		{"$JS.ACK.hub.ACCOUNTHASH.LCTL.tracer.1.42.40.1764144000000000000.0.RANDOM.more", "LCTL", 42, true},
		{"", "", 0, false},
		{"_INBOX.abc", "", 0, false},
		{"$JS.ACK.LCTL.tracer.1.15.12.1764144000000000000", "", 0, false},                      // 8 tokens
		{"$JS.ACK.x.LCTL.tracer.1.15.12.1764144000000000000.3", "", 0, false},                  // 10 tokens
		{"$JS.NAK.LCTL.tracer.1.15.12.1764144000000000000.3", "", 0, false},                    // not an ack subject
		{"$JS.ACK.LCTL.tracer.1.1x5.12.1764144000000000000.3", "", 0, false},                   // not a number
		{"$JS.ACK.LCTL.tracer.1..12.1764144000000000000.3", "", 0, false},                      // empty seq
		{"$JS.ACK..tracer.1.15.12.1764144000000000000.3", "", 0, false},                        // empty stream
		{"$JS.ACK.LCTL.tracer.1.184467440737095516150.12.1764144000000000000.3", "", 0, false}, // 21 digits
		{"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q", "", 0, false},
	}
	for _, tt := range tests {
		stream, seq, ok := ackPosition(tt.reply)
		if stream != tt.stream || seq != tt.seq || ok != tt.ok {
			t.Errorf("ackPosition(%q) = %q, %d, %v; want %q, %d, %v", tt.reply, stream, seq, ok, tt.stream, tt.seq, tt.ok)
		}
	}
}

// TestStreamSeqAgreesWithMetadata: on messages a real server delivers,
// streamSeq reads what the client's Metadata does.
func TestStreamSeqAgreesWithMetadata(t *testing.T) {
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
		if _, _, ok := ackPosition(m.Reply()); !ok {
			t.Errorf("ackPosition does not read the server's reply subject %q", m.Reply())
		}
		stream, seq, err := streamSeq(m)
		if err != nil || stream != meta.Stream || seq != meta.Sequence.Stream {
			t.Errorf("streamSeq = %q, %d, %v; Metadata has %q, %d", stream, seq, err, meta.Stream, meta.Sequence.Stream)
		}
	}
	if err := batch.Error(); err != nil || n != 5 {
		t.Fatalf("%d messages, %v", n, err)
	}
}
