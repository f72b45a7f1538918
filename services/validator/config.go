package validator

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/xct-dev/xct/internal/redact"
	"github.com/xct-dev/xct/internal/storehealth"
	"github.com/xct-dev/xct/internal/verdict"
)

// Configuration bounds and defaults.
const (
	// maxReplicas is the largest replica count JetStream accepts for a bucket.
	maxReplicas = 5
	// DefaultPolicyReload is how often the -policy files are checked for
	// changes when the flag is not given.
	DefaultPolicyReload = 2 * time.Second
	minPolicyReload     = 10 * time.Millisecond
)

// Config is the validator's configuration.
type Config struct {
	// PolicyFile names the YAML policy files (see the package doc for their
	// format), separated by commas, in order. Empty means the built-in
	// default policy.
	PolicyFile string
	// PolicyReload is how often the policy files are read again; a change
	// is compiled and installed without dropping validations in flight,
	// and a broken change is refused (the last good policy stays). Zero
	// turns reloading off.
	PolicyReload time.Duration
	// Replicas is the deployment's JetStream replica count, set by the
	// application, not a flag. The buckets are the admin's, made with it
	// (internal/provision); the service only binds them and checks this.
	Replicas int
	// VerdictKeyFile is the PEM (PKCS#8) Ed25519 private key the validator
	// signs its allow verdicts with; executors trust its public key.
	// Empty: allow verdicts are unsigned, and no executor acts on them.
	VerdictKeyFile string
	// VerdictTTL is how long a signed allow may be acted on (default 5m).
	VerdictTTL time.Duration
	// Signer signs allow verdicts instead of VerdictKeyFile's key; not a
	// flag (the app's in-process key pair, tests).
	Signer *verdict.Signer
	// VerdictCallers are the principals whose Validate calls get signed
	// verdicts (the orchestrators': "service:orchestrator" with the
	// manifests' SPIFFE ids). Empty: any of XCT's services (role service),
	// the tracer too, which parses what submitters export.
	VerdictCallers []string
	// Redact is the secret redaction of what ListApprovals shows to
	// callers who may not decide an approval (set by the app from
	// --redact-config and --redact-key-file; not a flag of its own).
	Redact redact.Config
	// StoreHealth is told the outcome of the approvals' and rate counts'
	// writes (set by the app; nil: nobody; internal/storehealth).
	StoreHealth *storehealth.Monitor
}

// RegisterFlags registers the validator's flags, with their defaults.
// -policy may be given several times (or hold a comma-separated list).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&policyFlag{c: c}, "policy",
		"YAML policy file of the validator; repeat it (or separate files by commas) to combine several, in order (empty: the built-in default, which allows read and reversible tools and requires approval for irreversible ones)")
	reload := c.PolicyReload
	if reload == 0 {
		reload = DefaultPolicyReload
	}
	fs.DurationVar(&c.PolicyReload, "policy-reload", reload,
		"how often the -policy files are checked for changes (0 turns hot reload off)")
	fs.StringVar(&c.VerdictKeyFile, "verdict-key", c.VerdictKeyFile,
		"PEM Ed25519 private key the validator signs allow verdicts with (executors trust its public key with --verdict-trust)")
	fs.DurationVar(&c.VerdictTTL, "verdict-ttl", verdict.DefaultTTL, "how long a signed allow verdict may be acted on")
	fs.Func("verdict-callers", "principals whose Validate calls get signed verdicts, comma-separated (e.g. service:orchestrator; empty: any service)", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.VerdictCallers = append(c.VerdictCallers, p)
			}
		}
		return nil
	})
}

// policyFlag is -policy: the first use replaces the default, later uses
// append.
type policyFlag struct {
	c   *Config
	set bool
}

// String implements flag.Value.
func (f *policyFlag) String() string {
	if f == nil || f.c == nil {
		return ""
	}
	return f.c.PolicyFile
}

// Set implements flag.Value.
func (f *policyFlag) Set(v string) error {
	if !f.set || f.c.PolicyFile == "" {
		f.c.PolicyFile, f.set = v, true
		return nil
	}
	f.c.PolicyFile += "," + v
	return nil
}

// PolicyFiles lists the configured policy files in order (empty names
// dropped).
func (c *Config) PolicyFiles() []string {
	var out []string
	for _, p := range strings.Split(c.PolicyFile, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate reports whether c can be used. It does not read the policy
// files; New does, and reports a broken one with its file and line.
func (c *Config) Validate() error {
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return fmt.Errorf("%w: replicas %d is outside 0..%d", ErrBadConfig, c.Replicas, maxReplicas)
	}
	if c.PolicyReload < 0 || (c.PolicyReload > 0 && c.PolicyReload < minPolicyReload) {
		return fmt.Errorf("%w: policy reload interval %v is neither 0 (off) nor at least %v", ErrBadConfig, c.PolicyReload, minPolicyReload)
	}
	if c.VerdictTTL < 0 || c.VerdictTTL > verdict.MaxTTL {
		return fmt.Errorf("%w: verdict ttl %v is outside 0..%v", ErrBadConfig, c.VerdictTTL, verdict.MaxTTL)
	}
	return nil
}
