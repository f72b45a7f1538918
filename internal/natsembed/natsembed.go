// Package natsembed runs a NATS server with JetStream inside the process: the
// laptop and test shape of the cluster, with a file store under a data
// directory. Clients still connect to it over loopback TCP.
package natsembed

import (
	"context"
	"fmt"
	"runtime/pprof"
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
	// Labelled for CPU profiles (app.ProfileLabel): the server's
	// goroutines all descend from this one.
	pprof.Do(context.Background(), pprof.Labels("xct.service", "nats-server"), func(context.Context) {
		go s.Start()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 10s on %s:%d", cfg.Host, cfg.Port)
	}
	return s, nil
}
