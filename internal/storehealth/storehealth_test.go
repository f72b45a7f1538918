package storehealth

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestIsFull(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return fmt.Errorf("append event 3 to chain c: %w", &jetstream.APIError{Code: 503, ErrorCode: code, Description: desc})
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
		own  bool
	}{
		{"max bytes", api(10077, "maximum bytes exceeded"), true, true},
		{"max messages", api(10077, "maximum messages exceeded"), true, true},
		{"disk", api(10077, "write /data/jetstream/x.blk: no space left on device"), true, false},
		{"insufficient resources", api(10023, "insufficient resources"), true, false},
		{"storage resources", api(10047, "insufficient storage resources available"), true, false},
		{"account resources", api(10002, "resource limits exceeded for account"), true, false},
		{"per subject", api(10077, "maximum messages per subject exceeded"), false, false},
		{"wrong last sequence", api(jetstream.JSErrCodeStreamWrongLastSequence, "wrong last sequence: 4"), false, false},
		{"too large", api(jetstream.JSErrCodeStreamMessageExceedsMaximum, "message size exceeds maximum allowed"), false, false},
		{"timeout", errors.New("context deadline exceeded"), false, false},
		{"nil", nil, false, false},
	} {
		full, own := classify(c.err)
		if full != c.want || own != c.own {
			t.Errorf("%s: full %v own limit %v, want %v %v", c.name, full, own, c.want, c.own)
		}
	}
}

// A full stream is logged once, however many writes fail, and cleared by
// a write that stores; other errors change nothing; nil monitors nothing.
func TestMonitorMarksAndClears(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	changes := 0
	m := New(slog.New(slog.NewTextHandler(&b, nil)), nil, func() { changes++ })
	full := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum bytes exceeded"}
	for range 5 {
		m.Wrote("KV_XCT_STEPS", full)
	}
	m.Wrote("LCTL", errors.New("nats: timeout"))
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "KV_XCT_STEPS cannot store: nats: API error: code=503 err_code=10077 description=maximum bytes exceeded") || strings.Contains(err.Error(), "LCTL") {
		t.Fatalf("Err = %v", err)
	}
	if n := strings.Count(b.String(), "cannot store in stream KV_XCT_STEPS"); n != 1 || changes != 1 {
		t.Fatalf("%d log lines, %d changes after five failed writes, want 1 and 1:\n%s", n, changes, b.String())
	}
	m.Wrote("LCTL", nil)
	if m.Err() == nil {
		t.Fatal("a write to another stream cleared KV_XCT_STEPS")
	}
	m.Wrote("KV_XCT_STEPS", nil)
	if err := m.Err(); err != nil || changes != 2 || !strings.Contains(b.String(), "stores in stream KV_XCT_STEPS again") {
		t.Fatalf("after a write stored: %v, %d changes:\n%s", err, changes, b.String())
	}
	var none *Monitor
	none.Wrote("LCTL", full)
	if none.Err() != nil || none.KeyValue(nil) != nil {
		t.Fatal("a nil monitor monitors")
	}
}
