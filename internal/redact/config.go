package redact

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/internal/jsguard"
)

// Config is where a process finds its redaction rules and key. The zero
// Config means the built-in rules and the cluster's key.
type Config struct {
	// File is a YAML file of Rules; empty means the built-in rules only.
	File string
	// KeyFile holds the HMAC key (at least 16 bytes; surrounding white
	// space is ignored). Empty: the cluster's key from the KeyBucket
	// bucket, created at random by the first service that needs it.
	KeyFile string
}

// RegisterFlags registers --redact-config and --redact-key-file.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "redact-config", "", "YAML file of redaction rules for secrets in tool arguments and results (none: the built-in rules)")
	fs.StringVar(&c.KeyFile, "redact-key-file", "", "file with the HMAC key of redaction markers (none: the cluster's key in the "+KeyBucket+" bucket)")
}

// Rules reads the rules file; without one it returns the built-in rules.
func (c Config) Rules() (Rules, error) {
	if c.File == "" {
		return Rules{}, nil
	}
	raw, err := os.ReadFile(c.File)
	if err != nil {
		return Rules{}, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	return ParseRules(raw)
}

// ParseRules parses a YAML rules document strictly: an unknown field is an
// error, so a typo cannot silently turn a rule off.
func ParseRules(raw []byte) (Rules, error) {
	var r Rules
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil && !errors.Is(err, io.EOF) { // empty: built-ins
		return Rules{}, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	for _, k := range r.Keys {
		if len(words(k)) == 0 {
			return Rules{}, fmt.Errorf("%w: key rule %q has no letters or digits", ErrBadConfig, k)
		}
	}
	// Compile once here, so a bad file fails at start, not at a step.
	if _, err := New(r, make([]byte, 32)); err != nil {
		return Rules{}, err
	}
	return r, nil
}

// Validate reads the rules and the key file, if any, without connecting to
// anything.
func (c Config) Validate() error {
	if _, err := c.Rules(); err != nil {
		return err
	}
	if c.KeyFile != "" {
		if _, err := readKey(c.KeyFile); err != nil {
			return err
		}
	}
	return nil
}

// Build makes the Redactor of a service: the rules, and the key from
// KeyFile, else the cluster's bucket through js, else (js nil) a random
// key of this process, whose markers agree only within it.
func (c Config) Build(ctx context.Context, js jetstream.JetStream) (*Redactor, error) {
	rules, err := c.Rules()
	if err != nil {
		return nil, err
	}
	var key []byte
	switch {
	case rules.Hash == HashSHA256:
	case c.KeyFile != "":
		if key, err = readKey(c.KeyFile); err != nil {
			return nil, err
		}
	case js == nil:
		// No cluster to share a key through (unit tests, an executor
		// without NATS): a key of this process only.
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("redaction key: %w", err)
		}
	default:
		if key, err = ClusterKey(ctx, js); err != nil {
			return nil, err
		}
	}
	return New(rules, key)
}

func readKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: key file: %w", ErrBadConfig, err)
	}
	key := []byte(strings.TrimSpace(string(raw)))
	if len(key) < 16 {
		return nil, fmt.Errorf("%w: key file %s has %d bytes, want at least 16", ErrBadConfig, path, len(key))
	}
	return key, nil
}

// KeyBucket is the KV bucket that keeps the cluster's redaction key.
const KeyBucket = "XCT_REDACTION"

// KeyName is the key of the cluster's redaction key in KeyBucket.
const KeyName = "hmac-key"

// ErrNoKey means the cluster's bucket holds no redaction key: the admin
// makes it (xct nats provision), no service does.
var ErrNoKey = errors.New("the cluster has no redaction key")

// ClusterKey returns the cluster's redaction key: every service of one
// cluster reads the same key, so equal secrets give equal markers in the
// orchestrator's events and the executor's records alike. The admin makes
// it at random when provisioning (internal/provision); the services only
// read it (internal/natsauth gives none of them a write to the bucket, so
// a taken-over service cannot replace the key the others start with).
func ClusterKey(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	kv, err := js.KeyValue(ctx, KeyBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("redaction key: %w", jsguard.Missing("bucket", KeyBucket))
	}
	if err != nil {
		return nil, fmt.Errorf("redaction key bucket: %w", err)
	}
	// A key another stream republished into the bucket would be known to
	// whoever planted it (a stream's republish is the server's own
	// publish, which no permission sees).
	if err := jsguard.RepublishedInto(ctx, js, "$KV."+KeyBucket+".>"); err != nil {
		return nil, fmt.Errorf("redaction key: %w; no key is taken while it does", err)
	}
	entry, err := kv.Get(ctx, KeyName)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNoKey, jsguard.Missing("redaction key in bucket", KeyBucket))
	}
	if err != nil {
		return nil, fmt.Errorf("redaction key: %w", err)
	}
	if len(entry.Value()) < 16 {
		return nil, fmt.Errorf("%w: the cluster's key in %s is %d bytes", ErrBadConfig, KeyBucket, len(entry.Value()))
	}
	return entry.Value(), nil
}
