package tracer

import (
	"errors"
	"flag"
	"fmt"
)

// Config is the tracer's configuration.
type Config struct {
	// DataDir is where materialized chains are stored, one JSON-lines file
	// per chain under DataDir/chains. It is created if missing.
	DataDir string
	// Replicas of the LCTL stream if the tracer is the one that creates it
	// (0 means 1). Set by the application, not by a flag.
	Replicas int
}

// RegisterFlags registers the tracer's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "tracer-data", "xct-data/tracer", "directory where the tracer stores materialized chains")
}

// maxReplicas is the most replicas JetStream allows for a stream.
const maxReplicas = 5

// Validate reports what is wrong with c, if anything.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("tracer: -tracer-data must name a directory")
	}
	if c.Replicas < 0 || c.Replicas > maxReplicas {
		return fmt.Errorf("tracer: replicas must be between 0 and %d, got %d", maxReplicas, c.Replicas)
	}
	return nil
}
