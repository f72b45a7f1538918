package executor

import (
	"flag"
	"fmt"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultToolTimeout bounds a tool whose descriptor declares no timeout.
	DefaultToolTimeout = 10 * time.Second
	// DefaultMaxOutputBytes bounds the JSON result of a tool whose descriptor
	// declares no cap, and of the built-in fs tools.
	DefaultMaxOutputBytes = 1 << 20
)

// Config is the executor's configuration.
type Config struct {
	// Workspace is the directory the built-in tools are confined to. It is
	// created if missing.
	Workspace string
	// Replicas is the JetStream replica count of the catalog bucket. The
	// application sets it from its NATS settings; it is not a flag.
	Replicas int
	// DefaultTimeout bounds a tool that declares no timeout (default 10s).
	DefaultTimeout time.Duration
	// MaxOutputBytes caps the JSON result of the built-in tools and of tools
	// that declare no cap (default 1 MiB). fs.read refuses larger files.
	MaxOutputBytes int64
}

// RegisterFlags registers the executor's flags on fs, with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Workspace, "workspace", "workspace", "directory the executor's file tools are confined to (created if missing)")
	fs.DurationVar(&c.DefaultTimeout, "tool-timeout", DefaultToolTimeout, "deadline of one tool call when the tool declares none")
	fs.Int64Var(&c.MaxOutputBytes, "tool-max-output", DefaultMaxOutputBytes, "largest JSON result, in bytes, of a built-in tool or a tool that declares no cap")
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
	return c
}
