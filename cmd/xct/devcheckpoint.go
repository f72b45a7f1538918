package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xct-dev/xct/lctl/checkpoint"
)

// devCheckpointKey returns the embedded cluster's checkpoint signing key
// and its verifier key in dir (checkpoint.key, checkpoint.pub), making
// them the first time. The orchestrator signs its chains' checkpoints
// with it; `lctl verify --key checkpoint.pub FILE` proves an export.
func devCheckpointKey(dir string) (keyPath, pubPath string, err error) {
	keyPath, pubPath = filepath.Join(dir, "checkpoint.key"), filepath.Join(dir, "checkpoint.pub")
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err != nil {
			return "", "", fmt.Errorf("checkpoint key %s has no verifier key next to it (%s): remove both to make a new pair", keyPath, pubPath)
		}
		return keyPath, pubPath, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	skey, vkey, err := checkpoint.GenerateKey("xct-dev")
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubPath, []byte(vkey+"\n"), 0o644); err != nil { //nolint:gosec // a public key, for whoever verifies
		return "", "", fmt.Errorf("write checkpoint verifier key: %w", err)
	}
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("write checkpoint key: %w", err)
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		_ = f.Close()
		return "", "", fmt.Errorf("write checkpoint key: %w", err)
	}
	return keyPath, pubPath, f.Close()
}
