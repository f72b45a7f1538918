package main

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xct-dev/xct/internal/storehealth"
)

// devNATSErrors is what xct dev does with the errors its embedded NATS
// server logs once it serves (natsembed.Config.OnError): each is logged
// (the same text again only every repeatEvery-th time, with its count),
// and one that says a stream's write found the disk full marks that
// stream full in the process's store health, so every service reports
// NOT_SERVING naming it and their calls are refused at once, where they
// waited for their own timeouts. The server does not store in that
// stream again until it restarts (its store keeps the write error), so
// the log says to free space and restart xct dev.
type devNATSErrors struct {
	log      *slog.Logger
	storeDir string
	// store is the process's store health, set once the services are
	// started (nil before: the error is logged only).
	store atomic.Pointer[storehealth.Monitor]

	mu    sync.Mutex
	seen  map[string]int
	fullN map[string]bool
}

// repeatEvery is how often a repeated error is logged again.
const repeatEvery = 100

// maxSeen bounds the distinct texts counted (then counting starts over).
const maxSeen = 1024

func newDevNATSErrors(log *slog.Logger, storeDir string) *devNATSErrors {
	return &devNATSErrors{log: log, storeDir: storeDir, seen: map[string]int{}, fullN: map[string]bool{}}
}

// streamOf finds the stream a server error names ("stream '$G > NAME'").
var streamOf = regexp.MustCompile(`stream '[^']* > ([^']+)'`)

func (d *devNATSErrors) report(msg string) {
	stream := ""
	if m := streamOf.FindStringSubmatch(msg); m != nil {
		stream = m[1]
	}
	full := stream != "" && strings.Contains(strings.ToLower(msg), "no space left on device")
	d.mu.Lock()
	if len(d.seen) >= maxSeen {
		d.seen = map[string]int{}
	}
	d.seen[msg]++
	n := d.seen[msg]
	firstFull := full && !d.fullN[stream]
	if firstFull {
		d.fullN[stream] = true
	}
	d.mu.Unlock()
	if n == 1 {
		d.log.Error("embedded NATS server: "+msg, "store", d.storeDir)
	} else if n%repeatEvery == 0 {
		d.log.Error("embedded NATS server: "+msg, "store", d.storeDir, "times", n)
	}
	if firstFull {
		d.log.Error(fmt.Sprintf("the embedded NATS server's store (%s) is full: stream %s takes no more writes until xct dev is restarted; free space there, then restart it (the data stays)", d.storeDir, stream),
			"stream", stream)
	}
	if full {
		d.store.Load().Wrote(stream, errors.New(msg))
	}
}
