package executor

import (
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/xct-dev/xct/internal/redact"
)

// A digest names content: anyone holding the chain and a candidate for
// the content can confirm the guess offline. The fs tools report digests
// (fs.read's and fs.write's checksum, fs.write's previous_checksum,
// fs.delete's and fs.move's checksum) of content the chain never shows in
// the clear when it holds a secret: the orchestrator replaces the secret
// in fs.read's content, the file an fs.write replaces or an fs.delete
// removes is not on the chain at all. A plain SHA-256 of a file whose
// only unknown is a short password ("db_password: hunter2" in an
// otherwise known configuration) gives the password away to a dictionary
// (session 18's leftover). So a digest of content in which the redactor
// finds a secret is reported as its redaction marker (keyed with the
// cluster's key, docs/security.md): the same marker wherever the same
// content is digested (a read, the write that replaces it, an approval's
// bound file, redaction.go's chainBase), so a reader still matches them,
// and guessing needs the key. Only what is reported changes: the fs
// tools compare and bind the plain digests.

// setRedactor gives the workspace the redactor its tools' digests are
// keyed with (nil: none, reported plain).
func (w *workspace) setRedactor(r *redact.Redactor) { w.red.Store(r) }

// holdsSecret reports whether the redactor finds a secret in data.
func (w *workspace) holdsSecret(data []byte) bool {
	r := w.red.Load()
	if r == nil || len(data) == 0 {
		return false
	}
	s := string(data)
	return r.Scope().Text(s) != s
}

// shownSum is what a result reports for sum, the checksum of data: sum,
// or its redaction marker when data holds a secret.
func (w *workspace) shownSum(data []byte, sum string) string {
	if w.holdsSecret(data) {
		return w.red.Load().Marker(sum)
	}
	return sum
}

// shownFileSum is shownSum for the regular file base of d (fi: its lstat),
// whose checksum sum was computed without keeping its content: it is read
// again, up to limit bytes. A file it cannot read whole (larger than
// limit, changed, gone) is keyed: what it holds is not known.
func (w *workspace) shownFileSum(d *wsDir, base string, fi fs.FileInfo, sum string, limit int64) string {
	r := w.red.Load()
	if r == nil {
		return sum
	}
	f, err := d.openFile(base, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return r.Marker(sum)
	}
	defer func() { _ = f.Close() }()
	if ofi, err := f.Stat(); err != nil || !sameEntry(fi, ofi) {
		return r.Marker(sum)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(data)) > limit || checksum(data) != sum {
		return r.Marker(sum)
	}
	return w.shownSum(data, sum)
}
