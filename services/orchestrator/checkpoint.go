package orchestrator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// CheckpointConfig is the signing of checkpoints (docs/lctl.md, "Signed
// checkpoints"): with a key, the orchestrator appends a signed_checkpoint
// event after every Every events of a chain and when a run (or a rollback,
// or this owner's part of a run) ends, so an exported chain can be proven
// to be exactly what this cluster wrote.
type CheckpointConfig struct {
	// KeyFile holds the Ed25519 signing key (one line
	// PRIVATE+KEY+NAME+HASH+KEY, as `lctl keygen` writes). Empty: no
	// signing. It is read again when it changes, so a key is rotated by
	// replacing the file.
	KeyFile string
	// Every is the number of events between two checkpoints (default 100).
	Every int
	// Origin starts the checkpoints' origin line: ORIGIN/lctl/CHAIN_ID
	// (default "xct"); name the cluster.
	Origin string
}

// RegisterFlags registers the --checkpoint-* flags.
func (c *CheckpointConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.KeyFile, "checkpoint-key-file", "", "Ed25519 key (lctl keygen) to sign chain checkpoints with; empty: checkpoints are not signed")
	fs.IntVar(&c.Every, "checkpoint-every", 100, "events between two signed checkpoints (one is also signed when a run ends)")
	fs.StringVar(&c.Origin, "checkpoint-origin", checkpoint.DefaultOriginPrefix, "name of this cluster in the checkpoints' origin line (ORIGIN/lctl/CHAIN_ID)")
}

// validate checks the settings and that the key can be read.
func (c *CheckpointConfig) validate() error {
	if c.Every < 0 {
		return fmt.Errorf("-checkpoint-every must not be negative")
	}
	if c.Every == 0 {
		c.Every = 100
	}
	if c.Origin == "" {
		c.Origin = checkpoint.DefaultOriginPrefix
	}
	if !checkpoint.ValidOriginPrefix(c.Origin) {
		return fmt.Errorf("-checkpoint-origin %q: use printable ASCII without spaces", c.Origin)
	}
	if c.KeyFile != "" {
		if _, err := checkpoint.LoadSigner(c.KeyFile); err != nil {
			return fmt.Errorf("-checkpoint-key-file: %w", err)
		}
	}
	return nil
}

// checkpointSigner holds the signing key, read again when its file
// changes.
type checkpointSigner struct {
	cfg CheckpointConfig
	log *slog.Logger

	mu     sync.Mutex
	signer note.Signer
	file   os.FileInfo // the key file as it was when signer was read
}

// newCheckpointSigner returns nil when no key is configured.
func newCheckpointSigner(cfg CheckpointConfig, log *slog.Logger) (*checkpointSigner, error) {
	if cfg.KeyFile == "" {
		log.Warn("chain checkpoints are not signed: no -checkpoint-key-file")
		return nil, nil
	}
	c := &checkpointSigner{cfg: cfg, log: log}
	if _, err := c.current(); err != nil {
		return nil, err
	}
	return c, nil
}

// current returns the key, reading the file again when it changed. When a
// changed file cannot be read, the key in use is kept and the failure
// logged (never the key).
func (c *checkpointSigner) current() (note.Signer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := os.Stat(c.cfg.KeyFile)
	if err == nil && c.signer != nil && os.SameFile(st, c.file) && st.ModTime().Equal(c.file.ModTime()) && st.Size() == c.file.Size() {
		return c.signer, nil
	}
	if err == nil {
		var s note.Signer
		if s, err = checkpoint.LoadSigner(c.cfg.KeyFile); err == nil {
			if c.signer != nil && s.Name() != c.signer.Name() {
				c.log.Info("checkpoint key rotated", "from", c.signer.Name(), "to", s.Name())
			}
			c.signer, c.file = s, st
			return s, nil
		}
	}
	if c.signer == nil {
		return nil, fmt.Errorf("checkpoint key: %w", err)
	}
	c.log.Warn("checkpoint key file unreadable; signing with the key read before", "file", c.cfg.KeyFile, "key", c.signer.Name(), "err", err)
	return c.signer, nil
}

// endsWriting lists the event types after which this process may write
// nothing more to a chain: the chain so far is signed then.
var endsWriting = map[string]bool{
	lctl.TypeRunFinished: true, TypeRollbackFinished: true, TypeRunReleased: true,
}

// checkpointDue says whether a signed checkpoint follows the event of
// type typ at seq.
func (r *run) checkpointDue(typ string, seq uint64) bool {
	c := r.svc.checkpoints
	return c != nil && typ != checkpoint.EventType && (endsWriting[typ] || seq%uint64(c.cfg.Every) == 0)
}

// checkpointAfter appends a signed checkpoint after e when one is due: e
// ends what this process writes, or e.Seq is a multiple of Every. It runs
// under r.recording, right after e was appended. A failure to sign or
// append is logged: e is already durable, and a lost log stops the run at
// its next append.
func (r *run) checkpointAfter(e *lctl.Event) {
	if !r.checkpointDue(e.Type, e.Seq) {
		return
	}
	c := r.svc.checkpoints
	s, err := c.current()
	if err == nil {
		var data map[string]any
		if data, err = checkpoint.Sign(s, checkpoint.Origin(c.cfg.Origin, r.id), e); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), r.svc.cfg.AppendTimeout)
			defer cancel()
			var cp lctl.Event
			if cp, err = r.writer.Append(ctx, checkpoint.EventType, checkpoint.SignerAgent, data); err == nil {
				r.svc.runs.apply(&cp)
				if err := r.observe(&cp); err != nil {
					r.log.Warn("crew session refused a signed checkpoint", "run", r.id, "err", err)
				}
				return
			}
		}
	}
	if !errors.Is(err, context.Canceled) {
		r.log.Warn("signed checkpoint not written", "run", r.id, "seq", e.Seq, "err", err)
	}
}
