package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/note"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/checkpoint"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

// keyFlags are verify's signature flags: --key / --trusted-keys (both
// repeatable) and --allow-unsigned-tail.
type keyFlags struct {
	files       []string
	allowUnsign bool
	origin      string
	revoked     []checkpoint.Revocation
	// againstTracer: compare with the live chain's latest signed head.
	againstTracer bool
	against       *checkpoint.Head
}

type listFlag struct{ l *[]string }

func (f listFlag) String() string { return "" }
func (f listFlag) Set(v string) error {
	if v == "" {
		return errors.New("needs a file")
	}
	*f.l = append(*f.l, v)
	return nil
}

func (c *cmdContext) signatureFlags() *keyFlags {
	k := &keyFlags{}
	c.fs.Var(listFlag{&k.files}, "key", "verifier key file (NAME+HASH+KEY, the .pub lctl keygen writes): also prove the chain is what that key signed (repeatable)")
	c.fs.Var(listFlag{&k.files}, "trusted-keys", "file of verifier keys, one per line (# comments): the current key and the ones rotated out; \"revoked KEY\" or \"revoked since=RFC3339 KEY\" refuses what a key signed (outright, or over events dated from then) (repeatable)")
	c.fs.BoolVar(&k.allowUnsign, "allow-unsigned-tail", false, "with --key: accept events after the last signed checkpoint (a chain still being written); they are listed either way")
	c.fs.BoolVar(&k.againstTracer, "against-tracer", false, "with --key: also read the chain's latest checkpoint from the tracer (--tracer) and fail when the chain lacks what it signs: a chain cut after a signed end (hiding a later rollback) proves itself otherwise")
	c.fs.StringVar(&k.origin, "origin", "", "with --key: the cluster whose checkpoints to trust (the orchestrator's --checkpoint-origin): a checkpoint must name ORIGIN/lctl/CHAIN_ID, so another cluster's chain of the same id signed by a shared key is refused")
	return k
}

// verifiedReport is verify's JSON with signatures: the chain checks and,
// under "signatures", what the trusted keys prove.
type verifiedReport struct {
	*analysis.VerifyReport
	Signatures *checkpoint.Report `json:"signatures,omitempty"`
}

// load reads the trusted keys; nil when no key was given.
func (k *keyFlags) load() (note.Verifiers, error) {
	if len(k.files) == 0 {
		if k.allowUnsign {
			return nil, usagef("--allow-unsigned-tail goes with --key FILE")
		}
		if k.origin != "" {
			return nil, usagef("--origin goes with --key FILE")
		}
		if k.againstTracer {
			return nil, usagef("--against-tracer goes with --key FILE")
		}
		return nil, nil
	}
	if k.origin != "" && !checkpoint.ValidOriginPrefix(k.origin) {
		return nil, usagef("--origin %q: printable ASCII without spaces, as the orchestrator's --checkpoint-origin", k.origin)
	}
	tk, err := checkpoint.LoadVerifiers(k.files...)
	if err != nil {
		return nil, &inputError{err}
	}
	k.revoked = tk.Revoked
	return tk.Verifiers, nil
}

func (k *keyFlags) options() checkpoint.Options {
	return checkpoint.Options{AllowUnsignedTail: k.allowUnsign, OriginPrefix: k.origin, Revoked: k.revoked, Against: k.against}
}

// headPage is how many events signedHead reads at a time from the end of
// the live chain, and headPages how many pages back it looks: the
// orchestrator signs every --checkpoint-every events (default 100) and at
// a run's end.
const (
	headPage  = 128
	headPages = 16
)

// signedHead reads chain id's latest signed head from the tracer: the
// last checkpoint of the live chain that a trusted key signed.
func (c *cmdContext) signedHead(ctx context.Context, id string, keys note.Verifiers, opts checkpoint.Options) (*checkpoint.Head, error) {
	t, err := c.tracerAPI()
	if err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	first, err := t.api.GetChain(cctx, &lctlv1.GetChainRequest{ChainId: id, PageSize: 1})
	cancel()
	if err != nil {
		return nil, c.rpcError(id, err)
	}
	end := first.GetSummary().GetEvents()
	for page := uint64(0); page < headPages && end > 0; page++ {
		from := uint64(1)
		if end > headPage {
			from = end - headPage + 1
		}
		cctx, cancel := c.callCtx(ctx)
		resp, err := t.api.GetChain(cctx, &lctlv1.GetChainRequest{ChainId: id, FromSeq: from, PageSize: uint32(end - from + 1)})
		cancel()
		if err != nil {
			return nil, c.rpcError(id, err)
		}
		tail := make([]lctl.Event, 0, len(resp.GetEvents()))
		for _, pe := range resp.GetEvents() {
			tail = append(tail, lctlpb.FromProto(pe))
		}
		if h, ok := checkpoint.LatestHead(id, tail, keys, opts); ok {
			h.Source = "the tracer at " + c.tracer
			return &h, nil
		}
		if from == 1 {
			break
		}
		// The next page overlaps by one: a checkpoint at its start needs
		// the event it covers.
		end = from
	}
	return nil, &inputError{fmt.Errorf("chain %s: the tracer at %s has no checkpoint a trusted key signed in the chain's last %d events: nothing to compare with (--against-tracer)", id, c.tracer, headPage*headPages)}
}

// printSignatures prints what the signatures prove, after the chain checks.
func (c *cmdContext) printSignatures(s *checkpoint.Report) {
	mark := "✓"
	if !s.OK {
		mark = "✗"
	}
	var summary string
	switch {
	case s.SignedThrough > 0:
		summary = fmt.Sprintf("events 1 to %d are exactly what %s signed (%s)", s.SignedThrough, s.SignedBy, plural(len(s.Checkpoints), "1 signed checkpoint", fmt.Sprintf("%d signed checkpoints", len(s.Checkpoints))))
	case len(s.Checkpoints) == 0:
		summary = "no signed checkpoint"
	default:
		summary = "no checkpoint could be proven"
	}
	c.out("%s signatures: %s\n", mark, summary)
	// Checkpoints that say the same are listed together.
	for i := 0; i < len(s.Checkpoints); {
		cp := s.Checkpoints[i]
		j := i + 1
		for j < len(s.Checkpoints) && s.Checkpoints[j].OK == cp.OK && sameStatus(s.Checkpoints[j].Status, cp.Status) {
			j++
		}
		if !cp.OK {
			seqs := make([]string, 0, j-i)
			for _, x := range s.Checkpoints[i:j] {
				seqs = append(seqs, fmt.Sprint(x.Seq))
			}
			status := cp.Status
			if j-i > 1 && strings.HasPrefix(status, "covers seq") {
				status = "the chain breaks before what they cover (see the first problem)"
			}
			c.out("  %s %s: %s\n", plural(j-i, "checkpoint at seq", "checkpoints at seq"), strings.Join(seqs, ", "), status)
		}
		i = j
	}
	if n := len(s.Unsigned); n > 0 {
		c.out("  UNSIGNED: %s after seq %d: no trusted signature covers %s, nothing proves who wrote %s\n",
			plural(n, "1 event", fmt.Sprintf("%d events", n)), s.Covered, plural(n, "it", "them"), plural(n, "it", "them"))
	}
	for _, n := range s.Notes {
		c.out("note: %s\n", n)
	}
}

// sameStatus compares two checkpoints' statuses up to the seqs in them.
func sameStatus(a, b string) bool {
	strip := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return -1
			}
			return r
		}, s)
	}
	return a == b || (strings.HasPrefix(a, "covers seq") && strip(a) == strip(b))
}

// runKeygen is `lctl keygen`: a new checkpoint signing key and its verifier
// key.
func runKeygen(_ context.Context, c *cmdContext) error {
	out := c.fs.String("o", "", "write NAME.key (secret, mode 0600) and NAME.pub under this path prefix (default: the key name in the current directory)")
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.operands) != 1 || c.operands[0].file == "" {
		return usagef("name the key: lctl keygen NAME (e.g. the cluster and a date: prod-2026-11)")
	}
	name := c.operands[0].file
	skey, vkey, err := checkpoint.GenerateKey(name)
	if err != nil {
		return usagef("%v", err)
	}
	prefix := *out
	if prefix == "" {
		prefix = name
	}
	keyPath, pubPath := prefix+".key", prefix+".pub"
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return &inputError{fmt.Errorf("%w (an existing key is never overwritten)", err)}
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		_ = f.Close()
		return &inputError{err}
	}
	if err := f.Close(); err != nil {
		return &inputError{err}
	}
	if err := os.WriteFile(pubPath, []byte(vkey+"\n"), 0o644); err != nil { //nolint:gosec // a public key, for whoever verifies
		return &inputError{err}
	}
	c.out("Wrote %s (signing key: give it to the orchestrator as --checkpoint-key-file, keep it secret)\n", keyPath)
	c.out("Wrote %s (verifier key: lctl verify --key %s FILE)\n", pubPath, pubPath)
	return nil
}
