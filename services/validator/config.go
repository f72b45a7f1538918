package validator

import (
	"flag"
	"fmt"
)

// maxReplicas is the largest replica count JetStream accepts for a bucket.
const maxReplicas = 5

// Config is the validator's configuration.
type Config struct {
	// PolicyFile is an optional YAML rules policy (see the package doc for
	// its format). Empty means the built-in default policy.
	PolicyFile string
	// Replicas is the JetStream replica count of the tool catalog bucket.
	// The application sets it from its NATS settings; it is not a flag.
	// Zero means 1.
	Replicas int
}

// RegisterFlags registers the validator's flags on fs, with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PolicyFile, "policy", c.PolicyFile,
		"YAML rules policy of the validator (empty: the built-in default, which allows read and reversible tools and requires approval for irreversible ones)")
}

// Validate reports whether c can be used. It does not read the policy file;
// New does, and reports a broken one with its file and line.
func (c *Config) Validate() error {
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return fmt.Errorf("%w: replicas %d is outside 0..%d", ErrBadConfig, c.Replicas, maxReplicas)
	}
	return nil
}
