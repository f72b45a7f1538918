package executor

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/internal/verdict"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultToolTimeout bounds a tool whose descriptor declares no timeout.
	DefaultToolTimeout = 10 * time.Second
	// DefaultMaxOutputBytes bounds the JSON result of a tool whose descriptor
	// declares no cap, and of the built-in fs tools.
	DefaultMaxOutputBytes = 1 << 20
	// DefaultStepGrace is added to a tool's timeout to make the deadline of
	// its step record: past it, a step still pending is in doubt.
	DefaultStepGrace = 5 * time.Second
	// DefaultStepRetention is how long step records are kept.
	DefaultStepRetention = 30 * 24 * time.Hour
	// DefaultMaxUndoBytes bounds what a reversible fs tool saves to undo
	// one step (the replaced or deleted content).
	DefaultMaxUndoBytes = 16 << 20
)

// Config is the executor's configuration.
type Config struct {
	// Workspace is the directory the built-in tools are confined to. It is
	// created if missing.
	Workspace string
	// Replicas is the deployment's JetStream replica count, set by the
	// application, not a flag. The buckets are the admin's, made with it
	// (internal/provision); the service only binds them and checks this.
	Replicas int
	// DefaultTimeout bounds a tool that declares no timeout (default 10s).
	DefaultTimeout time.Duration
	// MaxOutputBytes caps the JSON result of the built-in tools and of tools
	// that declare no cap (default 1 MiB). fs.read refuses larger files.
	MaxOutputBytes int64
	// MaxUndoBytes caps what fs.write and fs.delete save to undo a step
	// (default 16 MiB); a change that would need more is refused.
	MaxUndoBytes int64
	// ToolsConfigFile is the YAML tools configuration (http.request,
	// shell.exec, external tool servers, MCP servers). Empty: only the fs
	// tools are served.
	ToolsConfigFile string
	// Tools is a tools configuration made by ParseToolsConfig or
	// LoadToolsConfig; when set it is used instead of ToolsConfigFile. Not
	// a flag (tests and embedders).
	Tools *ToolsConfig
	// StepGrace is added to a tool's timeout to make its step's deadline
	// (default 5s). A step found pending past its deadline is in doubt.
	StepGrace time.Duration
	// RecordTimeout bounds one write of a step's outcome (default 10s);
	// a write that fails is retried in the background. Not a flag (tests).
	RecordTimeout time.Duration
	// StepRetention is how long step records are kept in JetStream
	// (default 30 days). A step asked again after that runs again.
	StepRetention time.Duration
	// RecordFormat is how step records are written: "proto" (binary
	// protobuf, the default) or "json" (protobuf JSON, what executors
	// before session 4 read and wrote: use it until every executor sharing
	// the XCT_STEPS bucket reads the binary form). Both are always read.
	RecordFormat string
	// Redact says where the rules and key of secret redaction are: step
	// records keep results redacted (set by the app from --redact-config
	// and --redact-key-file; not a flag of its own).
	Redact redact.Config
	// StoreHealth is told the outcome of the step records' writes (set by
	// the app; nil: nobody; internal/storehealth).
	StoreHealth *storehealth.Monitor
	// VerdictTrust lists the PEM Ed25519 public keys (files, or directories
	// of *.pub / *.pem files), comma-separated, whose signed verdicts this
	// executor acts on. Several keys may be trusted at once (rotation).
	// Empty: the executor acts on nothing.
	VerdictTrust string
	// Verifier is used instead of VerdictTrust's keys; not a flag (the
	// app's in-process key pair, tests).
	Verifier *verdict.Verifier
	// SecretFiles are the files of secrets this process was started with
	// (its NATS credentials); SecretsInEnv says a secret came through the
	// environment (XCT_NATS_PASSWORD). Set by the app, not flags. A
	// program run with "sandbox: none" runs as the executor's user and
	// reads what it can: the executor refuses such a tool while one of
	// the files is readable, or while it runs as root with a secret in
	// its environment, unless UnsandboxedReadsSecrets.
	SecretFiles  []string
	SecretsInEnv bool
	// UnsandboxedReadsSecrets accepts "sandbox: none" tools although
	// their programs can read the executor's secrets (logged).
	UnsandboxedReadsSecrets bool
	// StepCallers are the principals that may call Execute and
	// PreviewStep, and fence a step with GetStep (the orchestrators':
	// "service:orchestrator" with the manifests' SPIFFE ids). Empty: any
	// of XCT's services (role service).
	StepCallers []string
}

// RegisterFlags registers the executor's flags on fs, with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Workspace, "workspace", "workspace", "directory the executor's file tools are confined to (created if missing)")
	fs.DurationVar(&c.DefaultTimeout, "tool-timeout", DefaultToolTimeout, "deadline of one tool call when the tool declares none")
	fs.Int64Var(&c.MaxOutputBytes, "tool-max-output", DefaultMaxOutputBytes, "largest JSON result, in bytes, of a built-in tool or a tool that declares no cap")
	fs.Int64Var(&c.MaxUndoBytes, "tool-max-undo", DefaultMaxUndoBytes, "largest content, in bytes, fs.write and fs.delete save to undo one step")
	fs.StringVar(&c.ToolsConfigFile, "tools-config", "", "YAML file of http, shell, external tool servers and MCP servers (none: only the fs tools)")
	fs.DurationVar(&c.StepGrace, "step-grace", DefaultStepGrace, "time after a tool's timeout before a step still pending counts as in doubt")
	fs.StringVar(&c.VerdictTrust, "verdict-trust", c.VerdictTrust, "PEM Ed25519 public keys of the validators whose signed verdicts this executor acts on: files or directories, comma-separated (none: it acts on nothing)")
	fs.StringVar(&c.RecordFormat, "step-record-format", FormatProto, "how step records are written: proto (binary) or json (what executors before the binary form read; both are always read)")
	fs.DurationVar(&c.StepRetention, "step-retention", DefaultStepRetention, "how long step records (idempotency keys) are kept; 0 keeps them forever")
	fs.Func("step-callers", "principals that may call Execute and PreviewStep and fence steps (GetStep with fence), comma-separated (e.g. service:orchestrator; empty: any service)", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.StepCallers = append(c.StepCallers, p)
			}
		}
		return nil
	})
	fs.BoolVar(&c.UnsandboxedReadsSecrets, "unsandboxed-reads-secrets", false, "start although a tool with sandbox: none could read this process's secrets (its NATS credentials file; the environment when running as root): programs without a sandbox act as the executor")
}

// Validate reports whether c can be used. Zero durations and sizes are
// valid and mean the defaults.
func (c *Config) Validate() error {
	if c.Workspace == "" {
		return ErrNoWorkspace
	}
	if c.Replicas < 0 {
		return fmt.Errorf("%w: replicas %d is negative", ErrBadConfig, c.Replicas)
	}
	if c.DefaultTimeout < 0 {
		return fmt.Errorf("%w: tool timeout %v is negative", ErrBadConfig, c.DefaultTimeout)
	}
	if c.MaxOutputBytes < 0 {
		return fmt.Errorf("%w: max output %d is negative", ErrBadConfig, c.MaxOutputBytes)
	}
	if c.MaxUndoBytes < 0 {
		return fmt.Errorf("%w: max undo %d is negative", ErrBadConfig, c.MaxUndoBytes)
	}
	switch c.RecordFormat {
	case "", FormatProto, FormatJSON:
	default:
		return fmt.Errorf("%w: step record format %q is neither %s nor %s", ErrBadConfig, c.RecordFormat, FormatProto, FormatJSON)
	}
	if c.StepGrace < 0 {
		return fmt.Errorf("%w: step grace %v is negative", ErrBadConfig, c.StepGrace)
	}
	if c.StepRetention < 0 {
		return fmt.Errorf("%w: step retention %v is negative", ErrBadConfig, c.StepRetention)
	}
	return nil
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultToolTimeout
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxUndoBytes == 0 {
		c.MaxUndoBytes = DefaultMaxUndoBytes
	}
	if c.StepGrace == 0 {
		c.StepGrace = DefaultStepGrace
	}
	return c
}
