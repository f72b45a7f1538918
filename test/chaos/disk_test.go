package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The disk-full fault: the NATS nodes' JetStream stores and the tracer's
// chain files each live on a file system of their own (a tmpfs, mounted
// for the phase), which the fault fills for its hold and frees again. It
// fills by shrinking the file system to what it holds (a tmpfs remount),
// not by writing a file: nothing of the machine's memory or disk is used.

// diskSize is each mounted store's size while not full. Unused, it costs
// nothing (a tmpfs holds pages only for what is written).
const diskSize = 256 << 20

// What nats-server logs when a write found its store full: it turns
// JetStream off on that node (jsDisabled), or the store keeps the write
// error and refuses every later write (noSpace, once per write), either
// until the node is restarted.
const (
	jsDisabled = "will be DISABLED"
	noSpace    = "no space left on device"
)

// wedged counts the lines of a node's output that say its store needs a
// restart.
func wedged(out string) int { return strings.Count(out, jsDisabled) + strings.Count(out, noSpace) }

// disk is a target of the disk-full fault: a mounted store and the
// process writing to it.
type disk struct {
	dir string
	m   *member
}

// hasKind reports whether the phase injects kind.
func (cfg phaseConfig) hasKind(kind faultKind) bool { return slices.Contains(cfg.kinds, kind) }

// mountDisk mounts a file system of diskSize bytes at dir (made if
// missing), private to the phase: it needs root, as the namespaces do.
func mountDisk(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("xct-chaos", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", diskSize)); err != nil {
		return fmt.Errorf("the disk-full fault needs a file system of its own for %s (mount tmpfs, as root): %w", dir, err)
	}
	return nil
}

// unmountDisks detaches the phase's stores (their processes stopped).
func (c *cluster) unmountDisks() {
	for _, d := range c.disks {
		_ = unix.Unmount(d.dir, unix.MNT_DETACH)
	}
}

// resizeDisk sets the size of the store at dir: full (what it holds now,
// so the next write that needs a page fails with ENOSPC) or diskSize.
func resizeDisk(dir string, full bool) error {
	for try := 0; ; try++ {
		size := uint64(diskSize)
		if full {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return err
			}
			size = (st.Blocks - st.Bfree) * uint64(st.Bsize) //nolint:gosec // G115: a block size is positive
		}
		err := unix.Mount("xct-chaos", dir, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size))
		if err == nil || !full || !errors.Is(err, unix.EINVAL) || try >= 20 {
			if err != nil {
				return fmt.Errorf("resize %s: %w", dir, err)
			}
			return nil
		}
		// The store grew between the count and the remount (a tmpfs is
		// not shrunk below what it holds): count again.
	}
}

// diskFull fills d's store for hold, then frees it. A NATS node that
// found its store full meanwhile is restarted once it is freed, as its
// operator would have to (noted on the fault): it turned JetStream off,
// or its stream keeps refusing writes with the error it met.
func (in *injector) diskFull(ctx context.Context, d disk, hold time.Duration, ev *faultEvent) error {
	before := wedged(d.m.current().Output())
	if err := resizeDisk(d.dir, true); err != nil {
		return err
	}
	pause(ctx, hold)
	if err := resizeDisk(d.dir, false); err != nil {
		return err
	}
	if d.m.kind != "nats" {
		return nil
	}
	out := d.m.current().Output()
	if wedged(out) == before {
		ev.note = "no write met the full store"
		return nil
	}
	ev.note = "a write met the full store: node restarted"
	if strings.Count(out, jsDisabled) > 0 {
		ev.note = "JetStream turned itself off: node restarted"
	}
	return in.kill(ctx, d.m, syscall.SIGTERM, 0, ev)
}
