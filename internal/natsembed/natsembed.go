// Package natsembed runs a NATS server with JetStream inside the process: the
// laptop and test shape of the cluster, with a file store under a data
// directory. Clients still connect to it over loopback TCP.
package natsembed

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/xct-dev/xct/internal/natsauth"
)

// Config says where the embedded server listens and stores.
type Config struct {
	// Host to listen on; loopback by default.
	Host string
	// Port to listen on; -1 picks a free one.
	Port int
	// StoreDir holds the JetStream file store.
	StoreDir string
	// SyncAlways makes the store fsync every write before it is
	// acknowledged: the production durability setting ("sync: always").
	// Off, the server syncs on an interval (its default).
	SyncAlways bool
	// Users may connect, each with its permissions
	// (natsauth.ServerUsers). There is no anonymous access: a server
	// without users is refused.
	Users []*server.User
	// MaxConsumersPerStream bounds each stream's consumers (0:
	// natsauth.MaxConsumersPerStream); tests lower it to reach the bound.
	MaxConsumersPerStream int
	// OnError, when set, is told each error the server logs once it
	// serves, from the server's goroutines: a write its store could not
	// make ("JetStream failed to store a msg on stream '$G > LCTL': write
	// …: no space left on device") is said there and nowhere else (a
	// client's publish gets no answer, only its own timeout).
	OnError func(msg string)
}

// Start runs the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: a store directory is required")
	}
	if len(cfg.Users) == 0 {
		return nil, fmt.Errorf("embedded nats: no users: anonymous access is never allowed (natsauth.ServerUsers)")
	}
	maxConsumers := cfg.MaxConsumersPerStream
	if maxConsumers <= 0 {
		maxConsumers = natsauth.MaxConsumersPerStream
	}
	opts := &server.Options{
		Users:      cfg.Users,
		ServerName: "xct-embedded",
		Host:       cfg.Host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20,
		SyncAlways: cfg.SyncAlways,
		// Consumers per stream: bounded, as on every server XCT
		// configures (natsauth.MaxConsumersPerStream).
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: maxConsumers},
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	// The server logs nothing (NoLog), but why it cannot serve (its port
	// taken by another xct dev, its store unusable) is kept for the error.
	failed := &failureLog{onError: cfg.OnError}
	s.SetLoggerV2(failed, false, false, false)
	// Labelled for CPU profiles (app.ProfileLabel): the server's
	// goroutines all descend from this one.
	pprof.Do(context.Background(), pprof.Labels("xct.service", "nats-server"), func(context.Context) {
		go s.Start()
	})
	for deadline := time.Now().Add(readyWait); !s.ReadyForConnections(100 * time.Millisecond); {
		why := failed.fatal()
		if why == "" && time.Now().Before(deadline) {
			continue
		}
		s.Shutdown()
		if why == "" {
			why = failed.last()
		}
		if why == "" {
			return nil, fmt.Errorf("embedded nats: not ready after %s on %s:%d", readyWait, cfg.Host, cfg.Port)
		}
		return nil, fmt.Errorf("embedded nats on %s:%d (store %s) cannot serve: %s", cfg.Host, cfg.Port, cfg.StoreDir, why)
	}
	failed.serving()
	return s, nil
}

// readyWait bounds the embedded server's start.
const readyWait = 10 * time.Second

// failureLog is the embedded server's logger: it keeps the server's
// errors, for Start to say why the server did not come up (a port in use:
// "Error listening on port: 127.0.0.1:7422, "listen tcp …: bind: address
// already in use""), and drops everything else, as NoLog did.
type failureLog struct {
	mu          sync.Mutex
	fatalf, err string
	// onError is Config.OnError, told once the server serves (before,
	// Start's error says why it does not).
	onError func(string)
	forward bool
}

func (l *failureLog) serving() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forward = l.onError != nil
}

func (l *failureLog) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalf
}

func (l *failureLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *failureLog) Noticef(string, ...any) {}
func (l *failureLog) Warnf(string, ...any)   {}
func (l *failureLog) Debugf(string, ...any)  {}
func (l *failureLog) Tracef(string, ...any)  {}
func (l *failureLog) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.err = msg
	forward := l.forward
	l.mu.Unlock()
	if forward {
		l.onError(msg)
	}
}

// Fatalf is what the server says when it cannot go on (its listener
// could not be made); the server stops serving, the process goes on.
func (l *failureLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatalf = fmt.Sprintf(format, v...)
}
