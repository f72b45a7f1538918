package orchestrator

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/storehealth"
)

// Config configures the orchestrator.
type Config struct {
	// ValidatorAddr and ExecutorAddr are the gRPC addresses of the services
	// the loop calls.
	ValidatorAddr string
	ExecutorAddr  string
	// MaxSteps bounds a run's iterations when StartRun does not.
	MaxSteps int
	// MaxStepsLimit is the largest max_steps a caller may ask for (default
	// 1000); MaxStepsLimitByRole overrides it for principals holding a
	// role (the largest of their roles' limits counts). A larger request
	// is refused with INVALID_ARGUMENT (bounds.go).
	MaxStepsLimit       int
	MaxStepsLimitByRole map[string]int
	// MaxWatches is how many WatchRun streams one principal may hold open
	// in the cluster, counted across replicas (default 64; watch.go,
	// watchcount.go).
	MaxWatches int
	// MaxRuns is how many runs one principal may have in progress at once,
	// in the cluster (quota.go) and on this orchestrator (default
	// DefaultMaxRuns); StartRun past that is RESOURCE_EXHAUSTED
	// (handler.go).
	MaxRuns int
	// RepairBudget is how many invalid model outputs in a row end a run.
	RepairBudget int
	// ProposeTimeout bounds one model call.
	ProposeTimeout time.Duration
	// CallTimeout bounds one validator or executor call.
	CallTimeout time.Duration
	// AppendTimeout bounds one durable append to the event log; a run whose
	// append fails stops.
	AppendTimeout time.Duration
	// EventPerMessage writes each event of a step as a stream message of
	// its own, as every orchestrator before session 20 did. By default a
	// step's step_start goes with its verdict and its outcome with its
	// step_end, one message (a pack) each: the same events, hashes and
	// order in fewer acknowledged writes. Set it while readers older than
	// packs (eventlog, tracer and lctl before session 20) read the chains.
	EventPerMessage bool
	// ScriptsDir confines scripted:FILE models: scripts are read only from
	// inside it.
	ScriptsDir string
	// AllowGRPCProposers lists the addresses grpc:ADDR models may use; "*"
	// allows any. Empty allows none, so a caller cannot make the
	// orchestrator dial arbitrary hosts.
	AllowGRPCProposers []string
	// OpenAI configures openai:MODEL models.
	OpenAI OpenAIConfig
	// Replicas is the deployment's JetStream replica count (set by the
	// app). The streams are the admin's (internal/provision), made with
	// it; the service only binds them.
	Replicas int
	// Redact says where the rules and key of secret redaction are (set by
	// the app from --redact-config and --redact-key-file).
	Redact redact.Config
	// StoreHealth is told the outcome of the writes to the chains and
	// buckets (set by the app; nil: nobody): a stream that cannot store
	// makes the process report NOT_SERVING (internal/storehealth).
	StoreHealth *storehealth.Monitor
	// RunLease is how long the owner of a run may go without renewing its
	// claim (docs/lifecycle.md) before another replica takes the run over.
	RunLease time.Duration
	// DrainTimeout bounds a graceful stop: in-flight steps get this long to
	// finish before their runs are handed over.
	DrainTimeout time.Duration
	// Instance names this process in the run owners bucket; empty picks
	// the host name and a random suffix.
	Instance string
	// Checkpoint is the signing of chain checkpoints (checkpoint.go).
	Checkpoint CheckpointConfig
	// CrewCheckpointEvery is how many events of a crew run go between two
	// of its state checkpoints (crew.go; one is also written after every
	// handoff); 0 writes them at handoffs only.
	CrewCheckpointEvery int
	// TakeoverTimeout bounds each call of a takeover and each read of a
	// step's record: short, and retried, so a fault does not stall a run
	// for a whole CallTimeout.
	TakeoverTimeout time.Duration
	// SettleTimeout is how long a step whose outcome is unknown is settled
	// from its record quietly before the run shows IN_DOUBT;
	// SettlePoll is the longest wait between two reads of the record.
	SettleTimeout, SettlePoll time.Duration
	// OrphanScan is how often the chains are searched for runs started
	// and not ended that have no owner key (orphans.go): 0 picks four
	// run leases, a negative value turns the search off.
	OrphanScan time.Duration
	// DepsProbe is how often the validator's and the executor's gRPC
	// health is asked, through the connections the steps use, for the
	// health services DepsHealthService and its two parts (deps.go; the
	// app serves them): 0 picks DefaultDepsProbe, a negative value turns
	// the asking off (the services then stay NOT_SERVING).
	DepsProbe time.Duration
}

// RegisterFlags registers the orchestrator's flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ValidatorAddr, "validator-addr", "127.0.0.1:7702", "validator gRPC address")
	fs.StringVar(&c.ExecutorAddr, "executor-addr", "127.0.0.1:7703", "executor gRPC address")
	fs.IntVar(&c.MaxSteps, "max-steps", 50, "default step budget of a run")
	fs.IntVar(&c.MaxStepsLimit, "max-steps-limit", DefaultMaxStepsLimit, "largest max_steps a run may ask for (see also --max-steps-limit-role)")
	fs.Func("max-steps-limit-role", "ROLE=N: the largest max_steps for principals holding ROLE (repeatable, comma-separated)", c.parseRoleLimits)
	fs.IntVar(&c.MaxWatches, "max-watches", DefaultMaxWatches, "WatchRun streams one principal may hold open in the cluster (counted across orchestrator replicas)")
	fs.IntVar(&c.MaxRuns, "max-runs", DefaultMaxRuns, "runs one principal may have in progress at once, across the cluster (counted in the XCT_RUN_QUOTA bucket)")
	fs.IntVar(&c.RepairBudget, "repair-budget", 3, "invalid model outputs in a row that end a run")
	fs.DurationVar(&c.ProposeTimeout, "propose-timeout", 2*time.Minute, "deadline of one model call")
	fs.DurationVar(&c.CallTimeout, "call-timeout", 2*time.Minute, "deadline of one validator or executor call")
	fs.DurationVar(&c.AppendTimeout, "append-timeout", 10*time.Second, "deadline of one event log append; a run stops when one fails")
	fs.BoolVar(&c.EventPerMessage, "event-per-message", false, "write each event of a step as a stream message of its own (for readers older than packs) instead of a step's events in two messages")
	fs.DurationVar(&c.RunLease, "run-lease", 15*time.Second, "how long a run's owner may go without renewing its claim before another orchestrator takes the run over")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 15*time.Second, "on a graceful stop, how long in-flight steps may take before their runs are handed over")
	fs.DurationVar(&c.TakeoverTimeout, "takeover-timeout", 10*time.Second, "deadline of each call of a takeover and of each read of a step record (retried)")
	fs.DurationVar(&c.SettleTimeout, "settle-timeout", 30*time.Second, "how long a step whose outcome is unknown is settled from the executor's record before the run shows IN_DOUBT")
	fs.DurationVar(&c.SettlePoll, "settle-poll", 5*time.Second, "longest wait between two reads of the record of a step in doubt")
	fs.DurationVar(&c.OrphanScan, "orphan-scan", 0, "how often the event log is searched for runs started and not ended that no orchestrator owns (0: four run leases; negative: never)")
	fs.DurationVar(&c.DepsProbe, "deps-probe", DefaultDepsProbe, "how often the validator's and executor's health is asked, for the health services "+DepsHealthService+" (and ."+DepValidator+", ."+DepExecutor+") a readiness probe may use (negative: never)")
	fs.StringVar(&c.Instance, "instance", "", "name of this orchestrator in the run owners bucket (default: host name and a random suffix)")
	fs.StringVar(&c.ScriptsDir, "scripts-dir", ".", "directory scripted:FILE models are read from")
	fs.Func("allow-grpc-proposer", "address a grpc:ADDR model may use (repeatable, comma-separated; * for any)", func(v string) error {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.AllowGRPCProposers = append(c.AllowGRPCProposers, a)
			}
		}
		return nil
	})
	fs.StringVar(&c.OpenAI.BaseURL, "openai-base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible API root for openai:MODEL (env OPENAI_BASE_URL); the key comes from OPENAI_API_KEY")
	c.OpenAI.APIKey = os.Getenv("OPENAI_API_KEY")
	fs.BoolVar(&c.OpenAI.Stream, "openai-stream", false, "stream openai:MODEL answers (server-sent events), recorded as stream_start / stream_chunk / stream_end")
	c.Checkpoint.RegisterFlags(fs)
	fs.IntVar(&c.CrewCheckpointEvery, "crew-checkpoint-every", 100, "events of a crew run between two state checkpoints (one also follows every handoff; 0: at handoffs only)")
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.ValidatorAddr == "" {
		errs = append(errs, errors.New("-validator-addr is required"))
	}
	if c.ExecutorAddr == "" {
		errs = append(errs, errors.New("-executor-addr is required"))
	}
	if c.MaxSteps < 0 || c.RepairBudget < 0 {
		errs = append(errs, fmt.Errorf("-max-steps and -repair-budget must not be negative"))
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = 50
	}
	errs = append(errs, c.checkStepLimits()...)
	if c.CrewCheckpointEvery < 0 {
		errs = append(errs, fmt.Errorf("-crew-checkpoint-every must not be negative"))
	}
	if c.MaxWatches < 0 {
		errs = append(errs, fmt.Errorf("-max-watches must not be negative"))
	}
	if c.MaxWatches == 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxRuns < 0 {
		errs = append(errs, fmt.Errorf("-max-runs must not be negative"))
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = DefaultMaxRuns
	}
	if c.RepairBudget == 0 {
		c.RepairBudget = 3
	}
	if c.ProposeTimeout <= 0 {
		c.ProposeTimeout = 2 * time.Minute
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Minute
	}
	if c.AppendTimeout <= 0 {
		c.AppendTimeout = 10 * time.Second
	}
	if c.RunLease < 0 || c.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("-run-lease and -drain-timeout must not be negative"))
	}
	if c.RunLease == 0 {
		c.RunLease = 15 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 15 * time.Second
	}
	if c.TakeoverTimeout < 0 || c.SettleTimeout < 0 || c.SettlePoll < 0 {
		errs = append(errs, fmt.Errorf("-takeover-timeout, -settle-timeout and -settle-poll must not be negative"))
	}
	if c.TakeoverTimeout == 0 {
		c.TakeoverTimeout = 10 * time.Second
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 30 * time.Second
	}
	if c.SettlePoll == 0 {
		c.SettlePoll = 5 * time.Second
	}
	if c.OrphanScan == 0 {
		c.OrphanScan = 4 * c.RunLease
	}
	if c.DepsProbe == 0 {
		c.DepsProbe = DefaultDepsProbe
	}
	if c.Instance != "" && !validInstance(c.Instance) {
		errs = append(errs, fmt.Errorf("-instance %q: use 1-64 of A-Z a-z 0-9 . _ -", c.Instance))
	}
	if err := c.Checkpoint.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *Config) grpcProposerAllowed(addr string) bool {
	return slices.Contains(c.AllowGRPCProposers, "*") || slices.Contains(c.AllowGRPCProposers, addr)
}

// validInstance reports whether name is usable as an instance name.
func validInstance(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
