// Package checkpoint signs and verifies LCTL chains: a signed checkpoint is
// an event on the chain whose note says, in the C2SP tlog-checkpoint form,
// "the chain with this origin had this many events, and the last one's hash
// was this", signed with Ed25519 as a C2SP signed note. Whoever holds the
// verifier key can then prove that an exported chain is exactly what the
// writer wrote up to its last signed checkpoint, even when every hash was
// recomputed after an edit (a hash chain alone shows an edit only to
// someone who kept the last hash).
//
// The note body is three lines, each ending in a newline:
//
//	<origin>        e.g. xct/lctl/run-42 (prefix, "/lctl/", chain id)
//	<tree size>     the seq of the last event covered, in decimal
//	<root hash>     that event's hash (SHA-256), 32 bytes in standard base64
//
// then a blank line and one signature line per key:
//
//	— <key name> <base64(key hash (4 bytes) || Ed25519 signature)>
//
// The root hash is the head of the LCTL hash chain rather than a Merkle tree
// root: it commits to every event before it through their prev_hash links.
// Keys are the signed-note text forms ("PRIVATE+KEY+name+hash+key" to sign,
// "name+hash+key" to verify), so tools that read signed notes read these.
//
// The package is pure: it signs what it is given and verifies events; the
// orchestrator decides when to sign and appends the event.
package checkpoint

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
)

// EventType is the type of a signed checkpoint event. Its data:
//
//	note       the signed note (the authority; everything else repeats it)
//	seq        the seq of the last event it covers (the note's tree size)
//	head_hash  that event's hash, hex as events carry it
//	key        the name of the key that signed it
const EventType = "signed_checkpoint"

// OriginSeparator joins an origin prefix and a chain id.
const OriginSeparator = "/lctl/"

// DefaultOriginPrefix starts the origin of XCT's checkpoints.
const DefaultOriginPrefix = "xct"

// Origin is the origin line of a chain's checkpoints: prefix + "/lctl/" +
// chain id. The prefix names the deployment (a cluster's name), so two
// clusters' chains of the same id have different origins.
func Origin(prefix, chainID string) string {
	if prefix == "" {
		prefix = DefaultOriginPrefix
	}
	return prefix + OriginSeparator + chainID
}

// ValidOriginPrefix reports whether prefix can start an origin: 1-200
// printable ASCII characters without spaces.
func ValidOriginPrefix(prefix string) bool {
	if prefix == "" || len(prefix) > 200 {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if prefix[i] <= ' ' || prefix[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Body is the checkpoint text of a chain whose event seq has hash
// headHash (hex): origin, tree size, base64 root hash.
func Body(origin string, seq uint64, headHash string) (string, error) {
	if origin == "" || strings.ContainsAny(origin, "\n\r") {
		return "", fmt.Errorf("checkpoint origin %q must be one non-empty line", origin)
	}
	root, err := hex.DecodeString(headHash)
	if err != nil || len(root) != 32 {
		return "", fmt.Errorf("head hash %q is not a SHA-256 hash in hex", headHash)
	}
	return fmt.Sprintf("%s\n%d\n%s\n", origin, seq, base64.StdEncoding.EncodeToString(root)), nil
}

// Parsed is a checkpoint body read back.
type Parsed struct {
	Origin string
	Seq    uint64
	// HeadHash is the root hash in hex, as events carry their hashes.
	HeadHash string
}

// ParseBody reads a checkpoint text (the note's text, without the
// signatures). Extension lines after the root hash are allowed and
// ignored, as the checkpoint format says.
func ParseBody(text string) (Parsed, error) {
	if !strings.HasSuffix(text, "\n") {
		return Parsed{}, errors.New("checkpoint text does not end with a newline")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 {
		return Parsed{}, fmt.Errorf("checkpoint text has %d lines, want origin, tree size and root hash", len(lines))
	}
	p := Parsed{Origin: lines[0]}
	if p.Origin == "" {
		return Parsed{}, errors.New("checkpoint origin is empty")
	}
	n, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || (len(lines[1]) > 1 && lines[1][0] == '0') {
		return Parsed{}, fmt.Errorf("checkpoint tree size %q is not a decimal number", lines[1])
	}
	p.Seq = n
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 {
		return Parsed{}, fmt.Errorf("checkpoint root hash %q is not 32 bytes of base64", lines[2])
	}
	p.HeadHash = hex.EncodeToString(root)
	return p, nil
}

// Sign returns the data of a signed checkpoint event covering the chain up
// to and including head: the note signed by s, and its fields repeated for
// people.
func Sign(s note.Signer, origin string, head *lctl.Event) (map[string]any, error) {
	body, err := Body(origin, head.Seq, head.Hash)
	if err != nil {
		return nil, err
	}
	msg, err := note.Sign(&note.Note{Text: body}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return map[string]any{
		"note":      string(msg),
		"seq":       float64(head.Seq),
		"head_hash": head.Hash,
		"key":       s.Name(),
	}, nil
}

// GenerateKey makes a new Ed25519 key named name: skey signs (keep it
// secret: the orchestrator's --checkpoint-key-file), vkey verifies (give it
// to whoever checks chains: lctl verify --key).
func GenerateKey(name string) (skey, vkey string, err error) {
	if name == "" || strings.ContainsAny(name, "+ \t\n") {
		return "", "", fmt.Errorf("key name %q must be non-empty, without spaces or '+'", name)
	}
	return note.GenerateKey(rand.Reader, name)
}

// maxKeyFile bounds a key file.
const maxKeyFile = 1 << 20

// LoadSigner reads a signing key file: one "PRIVATE+KEY+name+hash+key"
// line. Its contents never appear in errors.
func LoadSigner(path string) (note.Signer, error) {
	raw, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	return ParseSigner(raw, path)
}

// ParseSigner reads a signing key; path names it in errors.
func ParseSigner(raw []byte, path string) (note.Signer, error) {
	skey := strings.TrimSpace(string(raw))
	if !strings.HasPrefix(skey, "PRIVATE+KEY+") {
		return nil, fmt.Errorf("checkpoint key %s is not a signing key (want one line PRIVATE+KEY+NAME+HASH+KEY, as lctl keygen writes)", path)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: malformed signing key", path)
	}
	return s, nil
}

// Revocation says a verifier key is no longer trusted: outright (Since
// zero: nothing it signed proves anything, e.g. a key that leaked), or
// since a time (a key retired in a rotation: a checkpoint it signed over
// events dated at or after Since is refused; one over older events still
// proves them, with a note that the date is the signer's own claim).
type Revocation struct {
	// Name and Hash identify the key, as a signed note's signature line
	// names it.
	Name string
	Hash uint32
	// Since is zero for an outright revocation.
	Since time.Time
}

// Key is the key's "name+hash" form, as reports print it.
func (r Revocation) Key() string { return fmt.Sprintf("%s+%08x", r.Name, r.Hash) }

// TrustedKeys is what a trusted-keys file says: the verifier keys, and
// which of them are revoked. Verifiers holds the revoked keys too, so that
// their signatures are checked and reported as revoked rather than as an
// unknown key's; Revoked goes into Options.
type TrustedKeys struct {
	Verifiers note.Verifiers
	List      []note.Verifier
	Revoked   []Revocation
}

// LoadVerifiers reads trusted verifier keys (ParseTrustedKeys) from
// files; a key listed twice is taken once, and a key revoked in any file
// is revoked (the earliest Since wins; outright over any time).
func LoadVerifiers(paths ...string) (*TrustedKeys, error) {
	var raws [][]byte
	for _, path := range paths {
		raw, err := readSmall(path)
		if err != nil {
			return nil, err
		}
		raws = append(raws, raw)
	}
	return mergeTrusted(paths, raws)
}

func mergeTrusted(paths []string, raws [][]byte) (*TrustedKeys, error) {
	tk := &TrustedKeys{}
	seen := map[string]bool{}
	revoked := map[string]int{}
	for i, raw := range raws {
		keys, revs, err := parseTrusted(raw, paths[i])
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if seen[k.text] {
				continue
			}
			seen[k.text] = true
			tk.List = append(tk.List, k.v)
		}
		for _, r := range revs {
			j, ok := revoked[r.Key()]
			switch {
			case !ok:
				revoked[r.Key()] = len(tk.Revoked)
				tk.Revoked = append(tk.Revoked, r)
			case r.Since.IsZero() || (!tk.Revoked[j].Since.IsZero() && r.Since.Before(tk.Revoked[j].Since)):
				tk.Revoked[j].Since = r.Since
			}
		}
	}
	if len(tk.List) == 0 {
		return nil, errors.New("no verifier keys")
	}
	tk.Verifiers = note.VerifierList(tk.List...)
	return tk, nil
}

// ParseTrustedKeys reads a trusted-keys file; path names it in errors. One
// entry a line; blank lines and lines starting with # are skipped:
//
//	NAME+HASH+KEY                          trusted
//	revoked NAME+HASH+KEY                  revoked outright
//	revoked since=RFC3339 NAME+HASH+KEY    revoked since that time
func ParseTrustedKeys(raw []byte, path string) (*TrustedKeys, error) {
	return mergeTrusted([]string{path}, [][]byte{raw})
}

// ParseVerifiers reads verifier keys, one per line; path names the file in
// errors. A revocation line is an error here (ParseTrustedKeys reads them).
func ParseVerifiers(raw []byte, path string) ([]note.Verifier, error) {
	keys, revs, err := parseTrusted(raw, path)
	if err != nil {
		return nil, err
	}
	if len(revs) > 0 {
		return nil, fmt.Errorf("%s revokes keys: read it as a trusted-keys file", path)
	}
	out := make([]note.Verifier, len(keys))
	for i, k := range keys {
		out[i] = k.v
	}
	return out, nil
}

type parsedKey struct {
	text string
	v    note.Verifier
}

func parseTrusted(raw []byte, path string) ([]parsedKey, []Revocation, error) {
	var out []parsedKey
	var revs []Revocation
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "PRIVATE+KEY+") || strings.Contains(line, " PRIVATE+KEY+") {
			return nil, nil, fmt.Errorf("%s line %d is a private signing key: give the verifier key (the .pub file lctl keygen writes), and keep the signing key secret", path, i+1)
		}
		fields := strings.Fields(line)
		revoke := fields[0] == "revoked"
		var since time.Time
		if revoke {
			fields = fields[1:]
			if len(fields) > 0 && strings.HasPrefix(fields[0], "since=") {
				t, err := time.Parse(time.RFC3339, strings.TrimPrefix(fields[0], "since="))
				if err != nil {
					return nil, nil, fmt.Errorf("%s line %d: %q is not a time (want since=RFC3339, e.g. since=2026-11-01T00:00:00Z)", path, i+1, fields[0])
				}
				since = t
				fields = fields[1:]
			}
		}
		if len(fields) != 1 {
			return nil, nil, fmt.Errorf("%s line %d: want NAME+HASH+KEY, \"revoked NAME+HASH+KEY\" or \"revoked since=RFC3339 NAME+HASH+KEY\"", path, i+1)
		}
		v, err := note.NewVerifier(fields[0])
		if err != nil {
			return nil, nil, fmt.Errorf("%s line %d: not a verifier key (want NAME+HASH+KEY): %w", path, i+1, err)
		}
		out = append(out, parsedKey{fields[0], v})
		if revoke {
			revs = append(revs, Revocation{Name: v.Name(), Hash: v.KeyHash(), Since: since})
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("%s has no verifier key", path)
	}
	return out, revs, nil
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(raw) > maxKeyFile {
		return nil, fmt.Errorf("%s is larger than a key file can be", path)
	}
	return bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf")), nil
}
