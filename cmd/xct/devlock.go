package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDataDir makes this xct dev the only one using the data directory
// abs: two would run two NATS servers on one JetStream store and two
// tracers on one set of chain files, and overwrite each other's
// addresses file. The lock is DATA_DIR/dev/lock, held (flock) while the
// process lives and released by release or its end; it names the
// process holding it, for the refusal of the next.
func lockDataDir(abs string) (release func(), err error) {
	dir := filepath.Join(abs, "dev")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600) //nolint:gosec // the data dir's own file
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path) //nolint:gosec // the data dir's own file
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := "another xct dev"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(holder))); perr == nil && pid > 0 {
				who = fmt.Sprintf("another xct dev (pid %d)", pid)
			}
			return nil, fmt.Errorf("data directory %s is in use by %s: stop it, or give this one another --data-dir", abs, who)
		}
		return nil, fmt.Errorf("data directory lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { _ = f.Close() }, nil
}
