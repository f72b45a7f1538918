package app

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/xct-dev/xct/internal/verdict"
)

// bindInProcess gives a validator and an executor served by the same
// process their verdict keys when none are configured: a key pair made in
// memory for this process only (it never leaves it). When the validator's
// key file is given and the executor trusts nothing, the executor trusts
// that key.
func (c *Config) bindInProcess(targets []string, log *slog.Logger) error {
	if !slices.Contains(targets, TargetValidator) || !slices.Contains(targets, TargetExecutor) {
		return nil
	}
	if c.Executor.VerdictTrust != "" || c.Executor.Verifier != nil {
		return nil
	}
	signer := c.Validator.Signer
	if signer == nil && c.Validator.VerdictKeyFile != "" {
		s, err := verdict.LoadSigner(c.Validator.VerdictKeyFile, c.Validator.VerdictTTL)
		if err != nil {
			return err
		}
		signer = s
	}
	if signer == nil {
		s, _, err := verdict.NewPair(c.Validator.VerdictTTL)
		if err != nil {
			return err
		}
		signer = s
		log.Info("verdict keys: an in-memory key pair for this process's validator and executor", "key_id", signer.KeyID())
	}
	v, err := verdict.NewVerifier(signer.Public())
	if err != nil {
		return err
	}
	c.Validator.Signer, c.Executor.Verifier = signer, v
	return nil
}

// checkVerdictKeys refuses a validator that cannot sign and an executor
// that trusts no key: neither could ever let a step act.
func (c *Config) checkVerdictKeys(targets []string) error {
	var errs []error
	if slices.Contains(targets, TargetValidator) && c.Validator.VerdictKeyFile == "" && c.Validator.Signer == nil {
		errs = append(errs, errors.New("validator: --verdict-key is required (a PEM Ed25519 private key; `xct dev` makes one in its data dir): without it no allow verdict is signed and no executor acts"))
	}
	if slices.Contains(targets, TargetExecutor) && c.Executor.VerdictTrust == "" && c.Executor.Verifier == nil {
		errs = append(errs, errors.New("executor: --verdict-trust is required (the validators' PEM Ed25519 public keys): without it the executor acts on nothing"))
	}
	return errors.Join(errs...)
}
