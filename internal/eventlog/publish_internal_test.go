package eventlog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The stream's answers to a conditional write: a stored write's sequence
// (in the server's own form, read without decoding, and in any other), a
// duplicate of an earlier write, the stream's errors (a lost conditional
// write among them), and anything else refused.
func TestPublisherAck(t *testing.T) {
	t.Parallel()
	p := &Publisher{stream: "KV_XCT_STEPS"}
	for _, c := range []struct {
		ack     string
		want    PubAck
		code    jetstream.ErrorCode // errors.As *jetstream.APIError with this code
		invalid bool
	}{
		{ack: `{"stream":"KV_XCT_STEPS","seq":42}`, want: PubAck{Seq: 42}},
		{ack: `{"stream":"KV_XCT_STEPS","seq":18446744073709551615}`, want: PubAck{Seq: 18446744073709551615}},
		{ack: `{"stream":"KV_XCT_STEPS", "seq": 7, "domain":"hub"}`, want: PubAck{Seq: 7}},
		{ack: `{"stream":"KV_XCT_STEPS","seq":9,"duplicate":true}`, want: PubAck{Seq: 9, Duplicate: true}},
		{ack: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_XCT_STEPS","seq":0}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{ack: `{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`, code: jetstream.JSErrCodeStreamWrongLastSequenceConstant},
		{ack: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, code: 10077},
		{ack: `{"stream":"OTHER","seq":5}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":0}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":-1}`, invalid: true},
		{ack: `{"stream":"KV_XCT_STEPS","seq":1`, invalid: true},
		{ack: ``, invalid: true},
		{ack: `not json`, invalid: true},
	} {
		got, err := p.ack([]byte(c.ack))
		var apiErr *jetstream.APIError
		switch {
		case c.invalid:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("ack %s = %+v, %v; want an invalid acknowledgement", c.ack, got, err)
			}
		case c.code != 0:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != c.code {
				t.Errorf("ack %s = %+v, %v; want the stream's error %d", c.ack, got, err, c.code)
			}
		default:
			if err != nil || got != c.want {
				t.Errorf("ack %s = %+v, %v; want %+v", c.ack, got, err, c.want)
			}
		}
	}
}

// inProcess is asked after every write: a write that succeeded costs no
// allocation, and the answer is still true only for a refusal as in
// process (10164), wrapped or not.
func TestInProcessOnlyForTheInProcessRefusal(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		if inProcess(nil) {
			t.Fatal("a write that succeeded taken as refused")
		}
	}); n != 0 {
		t.Fatalf("inProcess(nil) allocates %v times, want 0", n)
	}
	refused := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("nats: %w", refused), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 3"}, false},
		{jetstream.ErrNoStreamResponse, false},
		{errors.New("wrong last sequence"), false},
	} {
		if got := inProcess(c.err); got != c.want {
			t.Errorf("inProcess(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
