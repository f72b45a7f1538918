package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/storehealth"
)

// Session 19 (ops19), issue 17: on a full disk xct dev's embedded NATS
// server took no more writes and said so only to itself (NoLog): every
// service stayed SERVING, a run's start waited 30 s and failed "claim
// run: context canceled", the log said "watch heartbeat not written:
// context deadline exceeded". Its errors are now logged (a repeat every
// 100th time, with its count), and one naming a stream and "no space
// left on device" marks the stream full in the store health (every
// service NOT_SERVING naming it), with one line saying what to do.
func TestDevSaysItsNATSStoreIsFull(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	d := newDevNATSErrors(log, "/data/nats")
	full := "JetStream failed to store a msg on stream '$G > KV_XCT_RUN_QUOTA': write /data/nats/jetstream/$G/streams/KV_XCT_RUN_QUOTA/msgs/1.blk: no space left on device"
	d.report(full) // before the services started: logged only
	mon := storehealth.New(log, nil, nil)
	d.store.Store(mon)
	for range 149 {
		d.report(full)
	}
	d.report("Error trying to connect to route: dial tcp: connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	count := func(sub string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	if n := count("embedded NATS server: JetStream failed to store a msg on stream"); n != 2 {
		t.Errorf("the store error logged %d times for 150, want 2 (the first and the 100th):\n%s", n, buf.String())
	}
	if count("times=100") != 1 {
		t.Errorf("the 100th repeat does not say its count:\n%s", buf.String())
	}
	if n := count("store (/data/nats) is full: stream KV_XCT_RUN_QUOTA takes no more writes until xct dev is restarted; free space there, then restart it"); n != 1 {
		t.Errorf("what to do said %d times, want once:\n%s", n, buf.String())
	}
	if count("embedded NATS server: Error trying to connect to route") != 1 {
		t.Errorf("another error not logged:\n%s", buf.String())
	}
	err := mon.Err()
	if err == nil || !strings.Contains(err.Error(), "KV_XCT_RUN_QUOTA") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("store health: %v; want KV_XCT_RUN_QUOTA full", err)
	}
}
