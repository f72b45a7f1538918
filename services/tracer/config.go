package tracer

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/lctl"
)

// Config is the tracer's configuration.
type Config struct {
	// DataDir is where materialized chains are stored, one JSON-lines file
	// per chain under DataDir/chains. It is created if missing.
	DataDir string
	// Replicas is the deployment's JetStream replica count (0 means 1),
	// set by the application, not by a flag. The streams are the admin's
	// (internal/provision); the tracer only binds them.
	Replicas int
	// SnapshotEvery is how many events of a chain the tracer applies
	// between two snapshots of its state, so replaying to any seq costs at
	// most that many events: 0 means lctl.DefaultSnapshotEvery (1000), a
	// negative value keeps no snapshots (every replay starts from the first
	// event).
	SnapshotEvery int
	// SyncInterval is how often the chain files written since the last
	// sync are synced (0 means DefaultSyncInterval). The files are a view
	// of the stream: what a crash takes from them after the last sync is
	// read from the stream again at start.
	SyncInterval time.Duration
	// MaxResidentEvents bounds the events the tracer keeps in memory
	// across chains (0 means DefaultMaxResidentEvents, negative: no
	// bound). Past it the chains read or written least recently are
	// dropped from memory (their summaries stay) and read back from their
	// files when asked for; the chain in use stays whatever its size.
	MaxResidentEvents int
	// MaxAckPending is how many events the tracer's consumers deliver
	// before the tracer acknowledges them (0 means DefaultMaxAckPending).
	// Set by the application, not by a flag: the default suits any
	// deployment (four batches in flight); the tests set a small one to
	// show, with a small backlog, that the tracer acknowledges past
	// events it could not store.
	MaxAckPending int
	// HTTPListen is where the tracer serves HTTP: the visual debugger and
	// OTLP/HTTP ingestion ("host:port"; port 0 picks a free one; empty:
	// no HTTP listener).
	HTTPListen string
	// OTLP configures OpenTelemetry trace ingestion (otlp_ingest.go).
	OTLP OTLPConfig
	// RedactRules is the YAML file of secret redaction rules applied to
	// the spans received over OTLP before they go on a chain ("": the
	// built-in rules). Only the rules: the markers are made with a key of
	// this process, never the cluster's, so a tracer holds nothing that
	// could test guesses against the markers on runs' chains (and OTLP
	// markers are comparable only within one tracer's life).
	RedactRules string
	// StoreHealth is told the outcome of the OTLP chains' appends (set by
	// the app; nil: nobody; internal/storehealth).
	StoreHealth *storehealth.Monitor
	// ValidatorAddr is the validator's gRPC address, used only by the
	// visual debugger to list and decide approvals ("": no approvals in
	// the UI).
	ValidatorAddr string
	// OrchestratorAddr is the orchestrator's gRPC address, used only by
	// the debugger's Cancel (dialled with ValidatorDial's options).
	OrchestratorAddr string
	// UIAuthorize, when set, is asked before every debugger API call
	// (debugger.Options.Authorize; DebuggerAuthorizer builds one from an
	// authenticator). Set by the application, not by a flag; nil leaves
	// the debugger open, which is why the HTTP listener defaults to
	// loopback.
	UIAuthorize func(r *http.Request, action string) error
	// UIIdentify names the principal of a request's bearer token ("" when
	// it cannot), for the page a debugger link shows before it signs a
	// browser in (DebuggerIdentifier builds one). Set by the application.
	UIIdentify func(r *http.Request) string
	// OTLPAuthorize, when set, is asked before every OTLP/HTTP export
	// (OTLPAuthorizer builds one from an authenticator); an error wrapping
	// auth.ErrUnauthenticated answers 401, any other 403. Set by the
	// application; nil leaves ingestion open.
	OTLPAuthorize func(r *http.Request) (string, error)
	// ValidatorDial are the options ValidatorAddr is dialled with (the
	// process's TLS; set by the application). They carry no token: the
	// debugger forwards its caller's.
	ValidatorDial []grpcx.DialOption
}

// snapshotEvery is the interval the timelines use (<= 0: no snapshots).
func (c *Config) snapshotEvery() int {
	if c.SnapshotEvery == 0 {
		return lctl.DefaultSnapshotEvery
	}
	return c.SnapshotEvery
}

// syncInterval is the interval the chain files are synced at.
func (c *Config) syncInterval() time.Duration {
	if c.SyncInterval <= 0 {
		return DefaultSyncInterval
	}
	return c.SyncInterval
}

// DefaultMaxResidentEvents is the default bound on the events in memory.
const DefaultMaxResidentEvents = 1_000_000

// maxResidentEvents is the bound on the events in memory (<= 0: none).
func (c *Config) maxResidentEvents() int {
	if c.MaxResidentEvents == 0 {
		return DefaultMaxResidentEvents
	}
	return c.MaxResidentEvents
}

// DefaultMaxAckPending is the default of Config.MaxAckPending: four
// batches delivered and not acknowledged yet.
const DefaultMaxAckPending = 4 * batchSize

// maxAckPending is the consumers' bound on the events delivered and not
// acknowledged.
func (c *Config) maxAckPending() int {
	if c.MaxAckPending == 0 {
		return DefaultMaxAckPending
	}
	return c.MaxAckPending
}

// RegisterFlags registers the tracer's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "tracer-data", "xct-data/tracer", "directory where the tracer stores materialized chains")
	fs.StringVar(&c.HTTPListen, "tracer-http-listen", DefaultHTTPListen, "tracer HTTP listen address for the visual debugger and OTLP/HTTP (empty: none)")
	fs.StringVar(&c.OrchestratorAddr, "tracer-orchestrator-addr", "", "orchestrator gRPC address the visual debugger cancels runs through (empty: no Cancel in the UI)")
	fs.StringVar(&c.ValidatorAddr, "tracer-validator-addr", "", "validator gRPC address the visual debugger lists and decides approvals through (empty: no approvals in the UI)")
	fs.IntVar(&c.SnapshotEvery, "tracer-snapshot-every", lctl.DefaultSnapshotEvery, "events between two snapshots of a chain's state (replay to any seq costs at most this many events; negative: no snapshots)")
	fs.DurationVar(&c.SyncInterval, "tracer-sync-interval", DefaultSyncInterval, "how often the tracer syncs its chain files (what a crash loses after the last sync is read from the stream again at start)")
	fs.IntVar(&c.MaxResidentEvents, "tracer-max-resident-events", DefaultMaxResidentEvents, "events the tracer keeps in memory across chains; past it the least recently used chains are read back from their files when asked for (negative: no bound)")
	c.OTLP.RegisterFlags(fs)
}

// DefaultHTTPListen is the tracer's default HTTP address.
const DefaultHTTPListen = "127.0.0.1:7705"

// maxReplicas is the most replicas JetStream allows for a stream.
const maxReplicas = 5

// Validate reports what is wrong with c, if anything.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("tracer: -tracer-data must name a directory")
	}
	if c.SyncInterval < 0 {
		return fmt.Errorf("tracer: -tracer-sync-interval must not be negative, got %v", c.SyncInterval)
	}
	if c.MaxAckPending < 0 {
		// JetStream would take -1 as no bound.
		return fmt.Errorf("tracer: MaxAckPending must not be negative, got %d", c.MaxAckPending)
	}
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return fmt.Errorf("tracer: replicas must be between 0 and %d, got %d", maxReplicas, c.Replicas)
	}
	return nil
}
