package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
)

// Problem kinds Verify adds to lctl's.
const (
	// ProblemSignature: a checkpoint's note does not verify (its text or
	// signature was changed) or cannot be read.
	ProblemSignature = "signature"
	// ProblemUntrustedKey: a checkpoint is signed only by keys that are
	// not trusted.
	ProblemUntrustedKey = "untrusted_key"
	// ProblemRehashed: the chain links up, but not to the head a signed
	// checkpoint names: an event was changed and the hashes recomputed.
	ProblemRehashed = "rehashed"
	// ProblemUnsigned: events no trusted checkpoint covers.
	ProblemUnsigned = "unsigned"
	// ProblemNoEnd: a run's chain whose signed events do not end with
	// the run's end (run_finished, or rollback_finished after it): cut
	// after a checkpoint, or exported while still being written. A
	// signature proves what came before it, never that nothing came
	// after; only a signed end tells a whole run from a cut one.
	ProblemNoEnd = "no_signed_end"
	// ProblemRevoked: a checkpoint signed only by keys the trusted-keys
	// file revokes (outright, or since a time its events are not before).
	ProblemRevoked = "revoked_key"
)

// Options tune Verify.
type Options struct {
	// AllowUnsignedTail accepts events after the last signed checkpoint,
	// and a run's chain whose signed events do not end with the run's end
	// (a chain still being written); both are reported either way.
	AllowUnsignedTail bool
	// OriginPrefix, when set, is the cluster whose checkpoints are
	// trusted (the orchestrator's --checkpoint-origin): a checkpoint must
	// name exactly OriginPrefix/lctl/<chain id>. Unset, any cluster's
	// checkpoint of a chain of this id is taken, which only matters when
	// clusters share a key.
	OriginPrefix string
	// Revoked are the revoked keys (TrustedKeys.Revoked): a checkpoint
	// they alone sign proves nothing, outright, or over events dated at or
	// after the revocation's Since.
	Revoked []Revocation
	// Against, when set, is the chain's latest signed head as another
	// source has it (LatestHead of the tracer's live chain): the chain
	// must hold that event, or it was cut after a signed end
	// (ProblemBehind).
	Against *Head
}

// newChecker is the checker of chainID's checkpoints under o.
func (o Options) newChecker(r *Report, keys note.Verifiers, chainID string) checker {
	ck := checker{r: r, keys: keys, wantOrigin: OriginSeparator + chainID}
	if len(o.Revoked) > 0 {
		ck.revoked = map[string]Revocation{}
		for _, rv := range o.Revoked {
			ck.revoked[rv.Key()] = rv
		}
	}
	if o.OriginPrefix != "" {
		ck.exactOrigin = Origin(o.OriginPrefix, chainID)
	}
	return ck
}

// Report is what Verify proved about a chain.
type Report struct {
	ChainID string `json:"chain_id"`
	Events  int    `json:"events"`
	// OK is true when the chain is, event for event, what the trusted
	// keys signed, and (unless allowed) nothing is unsigned.
	OK bool `json:"ok"`
	// Checkpoints lists every signed checkpoint event, in chain order.
	Checkpoints []Checked `json:"checkpoints"`
	// SignedThrough is the seq up to which every event is proven (0:
	// none).
	SignedThrough uint64 `json:"signed_through"`
	// SignedBy names the key of the checkpoint that proves SignedThrough.
	SignedBy string `json:"signed_by,omitempty"`
	// Covered is the highest seq a checkpoint signed by a trusted key
	// covers, whether or not the chain still matches it.
	Covered uint64 `json:"covered"`
	// Unsigned lists the seqs of events after Covered: no trusted
	// signature covers them (signed checkpoints themselves are not listed:
	// a checkpoint's note proves itself).
	Unsigned []uint64 `json:"unsigned"`
	// Problems, in chain order; First is the earliest.
	Problems []lctl.Problem `json:"problems"`
	First    *lctl.Problem  `json:"first_problem,omitempty"`
	// Notes are facts that are not failures.
	Notes []string `json:"notes"`

	firstSeq uint64
	// notSigned says, by seq, why a checkpoint event whose note verified
	// is not the event the orchestrator appended (notAsSigned).
	notSigned map[uint64]string
}

// Checked is one signed checkpoint event and what became of it.
type Checked struct {
	// Seq is the checkpoint event's seq; Covers the last seq it signs.
	Seq    uint64 `json:"seq"`
	Covers uint64 `json:"covers"`
	// Keys are the trusted keys whose signatures verified.
	Keys []string `json:"keys,omitempty"`
	// OK is true when the signature verified and the chain has the head
	// it names.
	OK bool `json:"ok"`
	// Status says what was found, in words.
	Status string `json:"status"`
}

func newReport(chainID string) *Report {
	return &Report{ChainID: chainID, Checkpoints: []Checked{}, Unsigned: []uint64{}, Problems: []lctl.Problem{}, Notes: []string{}}
}

// Verify proves a chain against trusted verifier keys: its hash chain links
// from the first event, every signed checkpoint's note verifies with a
// trusted key and names this chain's origin, and the hash of the event it
// covers is the root hash it signed. It names the first event that
// differs from what was signed: exactly, when the hash chain is broken
// (an edit, a removal, a reorder); within the checkpoint's span when the
// chain was re-hashed after an edit (the signature fixes only the head).
// Events after the last signed checkpoint are listed as unsigned. The cost
// is one pass over the events plus one signature check per checkpoint.
func Verify(chainID string, events []lctl.Event, keys note.Verifiers, opts Options) *Report {
	r := newReport(chainID)
	r.Events = len(events)
	if len(events) > 0 {
		r.firstSeq = events[0].Seq
	}
	// intact events link up from the first: events[:intact] have seqs 1..
	// intact, and each hash matches its content and links to the one
	// before.
	intact := len(events)
	if err := lctl.Verify(events); err != nil {
		var ve *lctl.VerifyError
		if errors.As(err, &ve) {
			intact = ve.Index
			e := &events[ve.Index]
			r.Problems = append(r.Problems, lctl.Problem{Seq: e.Seq, Position: ve.Index + 1, Kind: lctl.ProblemEdited,
				Message: fmt.Sprintf("%s at position %d differs from what was written: %s", lctl.Describe(e), ve.Index+1, ve.Reason)})
		} else {
			intact = 0
			r.Problems = append(r.Problems, lctl.Problem{Kind: lctl.ProblemEdited, Message: err.Error()})
		}
	}
	ck := opts.newChecker(r, keys, chainID)
	ck.intact = uint64(intact)
	signedCheckpoint := map[int]bool{}
	for i := range events {
		e := &events[i]
		if e.Type != EventType {
			continue
		}
		signedCheckpoint[i] = ck.check(e, i+1, func(seq uint64) (string, string, bool) {
			return events[seq-1].Hash, events[seq-1].Timestamp, true
		})
	}
	ag := against{head: opts.Against}
	for i := range events {
		if events[i].Seq > r.Covered && !signedCheckpoint[i] {
			r.Unsigned = append(r.Unsigned, events[i].Seq)
		}
		ag.add(&events[i])
	}
	pos := func(seq uint64) int { return positionOf(events, seq) }
	ag.finish(r, pos)
	r.finish(opts, pos, endsOf(events))
	return r
}

// checker checks signed checkpoints one by one.
type checker struct {
	r          *Report
	keys       note.Verifiers
	wantOrigin string
	// exactOrigin, when set, is the whole origin wanted (--origin).
	exactOrigin string
	// intact is the number of events from the first that link up.
	intact uint64
	// provenFrom is the last seq a checkpoint proved.
	provenFrom uint64
	// revoked are the revoked keys by "name+hash".
	revoked map[string]Revocation
}

// check checks the signed checkpoint e at position pos; headAt gives the
// hash and timestamp of the event of a seq (false: not known). It reports whether e's
// note verified with a trusted key and names this chain (e proves itself
// then).
func (ck *checker) check(e *lctl.Event, pos int, headAt func(seq uint64) (hash, ts string, ok bool)) bool {
	r := ck.r
	c := Checked{Seq: e.Seq}
	defer func() { r.Checkpoints = append(r.Checkpoints, c) }()
	fail := func(kind, format string, args ...any) {
		c.Status = fmt.Sprintf(format, args...)
		r.Problems = append(r.Problems, lctl.Problem{Seq: e.Seq, Position: pos, Kind: kind,
			Message: fmt.Sprintf("%s: %s", lctl.Describe(e), c.Status)})
	}
	msg, _ := e.Get("note").(string)
	if msg == "" {
		fail(ProblemSignature, "it has no signed note")
		return false
	}
	n, err := note.Open([]byte(msg), ck.keys)
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		var names []string
		for _, s := range unverified.Note.UnverifiedSigs {
			names = append(names, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
		}
		fail(ProblemUntrustedKey, "signed by %s, which is not a trusted key (--key / --trusted-keys): nothing proves who wrote it", strings.Join(names, ", "))
		return false
	case errors.As(err, &invalid):
		fail(ProblemSignature, "the signature of key %s does not verify: the checkpoint's note was changed", invalid.Name)
		return false
	case err != nil:
		fail(ProblemSignature, "its note is not a signed note: %v", err)
		return false
	}
	p, err := ParseBody(n.Text)
	switch {
	case err != nil:
		fail(ProblemSignature, "its signed note is not a checkpoint: %v", err)
		return false
	case p.Seq == 0:
		// Seqs start at 1: a tree size of 0 covers no event (and there is
		// no event 0 to compare its head with).
		fail(ProblemSignature, "its signed note covers no event (tree size 0)")
		return false
	case !strings.HasSuffix(p.Origin, ck.wantOrigin):
		fail(ProblemSignature, "it signs origin %q, not this chain (%q): it was copied from another chain", p.Origin, "…"+ck.wantOrigin)
		return false
	case ck.exactOrigin != "" && p.Origin != ck.exactOrigin:
		fail(ProblemSignature, "it signs origin %q, not %q (--origin): it is another cluster's chain of the same id", p.Origin, ck.exactOrigin)
		return false
	}
	// Revoked keys' signatures verified (their keys are listed so that
	// they do); they count only where the revocation allows. The time a
	// revocation since a time is judged by is the covered event's, which
	// the signature binds through its hash; it is still the signer's own
	// claim.
	var refused []string
	var revokedSince []Revocation
	coveredTS := ""
	if len(ck.revoked) > 0 && p.Seq < e.Seq && p.Seq <= ck.intact {
		if h, ts, ok := headAt(p.Seq); ok && h == p.HeadHash {
			coveredTS = ts
		}
	}
	for _, s := range n.Sigs {
		rv, ok := ck.revoked[fmt.Sprintf("%s+%08x", s.Name, s.Hash)]
		if !ok {
			c.Keys = append(c.Keys, s.Name)
			continue
		}
		if rv.Since.IsZero() {
			refused = append(refused, rv.Key()+" (revoked)")
			continue
		}
		at, parsed := lctl.ParseTime(coveredTS)
		if coveredTS == "" || !parsed || !at.Before(rv.Since) {
			refused = append(refused, fmt.Sprintf("%s (revoked since %s; the events it covers are dated %s)", rv.Key(), rv.Since.UTC().Format(time.RFC3339), orUnknown(coveredTS)))
			continue
		}
		c.Keys = append(c.Keys, s.Name)
		revokedSince = append(revokedSince, rv)
	}
	if len(c.Keys) == 0 && len(refused) > 0 {
		fail(ProblemRevoked, "signed only by %s: a revoked key proves nothing", strings.Join(refused, ", "))
		return false
	}
	c.Covers = p.Seq
	r.Covered = max(r.Covered, p.Seq)
	head, _ := e.Get("head_hash").(string)
	seq, _ := e.Get("seq").(float64)
	key, _ := e.Get("key").(string)
	keys := strings.Join(c.Keys, ", ")
	switch {
	case p.Seq >= e.Seq:
		fail(ProblemRehashed, "signed by %s, it covers the chain up to seq %d but is itself at seq %d: events before it were removed and the hashes recomputed (one or more of events %d to %d differ)",
			keys, p.Seq, e.Seq, ck.provenFrom+1, e.Seq-1)
	case head != p.HeadHash || seq != float64(p.Seq) || !signedBy(n, key):
		fail(ProblemSignature, "its seq, head_hash or key was changed: they do not match the signed note (seq %d, head %s, signed by %s)", p.Seq, clip(p.HeadHash), sigNames(n))
	case p.Seq > ck.intact:
		c.Status = fmt.Sprintf("covers seq 1 to %d, but the chain breaks before that (see the first problem)", p.Seq)
	default:
		got, _, _ := headAt(p.Seq)
		if got != p.HeadHash {
			fail(ProblemRehashed, "signed by %s, it says the chain's head at seq %d was %s; this chain's is %s: one or more of events %d to %d were changed and the hashes after them recomputed",
				keys, p.Seq, clip(p.HeadHash), clip(got), ck.provenFrom+1, p.Seq)
			break
		}
		c.OK = true
		c.Status = fmt.Sprintf("signed by %s: events 1 to %d are exactly what was signed", keys, p.Seq)
		for _, rv := range revokedSince {
			if len(c.Keys) == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("the checkpoint at seq %d is signed by %s, revoked since %s; its events are dated before that, but the date is the signer's own claim: if the key leaked rather than retired, revoke it outright", e.Seq, rv.Key(), rv.Since.UTC().Format(time.RFC3339)))
			}
		}
		if p.Seq > r.SignedThrough {
			r.SignedThrough, r.SignedBy = p.Seq, keys
		}
		ck.provenFrom = max(ck.provenFrom, p.Seq)
		// The note proves what it covers; this event is the one signed
		// only where the orchestrator appends it, right after the event
		// it covers, with the data Sign gave it. A real checkpoint copied
		// further on, or one with a field added, is an event nobody
		// signed.
		if why := notAsSigned(e, p.Seq, msg, n); why != "" {
			c.Status += fmt.Sprintf("; but this event is not the one signed (%s): it is a copy, unsigned", why)
			if r.notSigned == nil {
				r.notSigned = map[uint64]string{}
			}
			r.notSigned[e.Seq] = why
			return false
		}
	}
	return true
}

// signedFields are the data of a signed checkpoint event (Sign).
var signedFields = map[string]bool{"note": true, "seq": true, "head_hash": true, "key": true}

// SignerAgent is the agent of a signed checkpoint event: the orchestrator,
// the only writer of a run's chain, appends it.
const SignerAgent = "orchestrator"

// notAsSigned says why e, a checkpoint whose note msg verified (n) and
// covers seq, is not the event the orchestrator appended ("" when it
// is). The note signs the events before e, not e itself, so e proves
// itself only as exactly what the orchestrator writes: right after the
// event it covers, by the orchestrator, with the four fields Sign gives
// it and nothing beside them, its note as Sign writes it (one signature,
// the only line after the text). Anything else (a copy further on, an
// agent or a field of someone else's, a signature line added to the
// note or given twice) is an event nobody signed. Its timestamp is the
// one part left to the writer: the chain's check keeps it in order.
func notAsSigned(e *lctl.Event, seq uint64, msg string, n *note.Note) string {
	switch {
	case e.Seq != seq+1:
		return fmt.Sprintf("it does not follow seq %d", seq)
	case e.Agent != SignerAgent:
		return fmt.Sprintf("its agent is %q, not the %s that signs", e.Agent, SignerAgent)
	case len(e.Extra) > 0 || !signedFieldsOnly(e):
		return "it holds fields the signature does not cover"
	case len(n.Sigs) != 1 || len(n.UnverifiedSigs) != 0 || msg != n.Text+"\n— "+n.Sigs[0].Name+" "+n.Sigs[0].Base64+"\n":
		return "its note holds more than the one signature the orchestrator writes"
	}
	return ""
}

// signedBy reports whether name is the name of a key whose signature of n
// verified.
func signedBy(n *note.Note, name string) bool {
	for _, s := range n.Sigs {
		if s.Name == name {
			return true
		}
	}
	return false
}

func sigNames(n *note.Note) string {
	names := make([]string, len(n.Sigs))
	for i, s := range n.Sigs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func signedFieldsOnly(e *lctl.Event) bool {
	only := true
	e.RangeData(func(k string, _ any) {
		if !signedFields[k] {
			only = false
		}
	})
	return only
}

// ends is what Verify needs to know of a chain's runs: whether one was
// started, and the seqs of the events that end it (run_finished, and
// rollback_finished after a rollback).
type ends struct {
	started bool
	// finished are the run_finished seqs; closing those and the
	// rollback_finished ones.
	finished, closing []uint64
}

func (en *ends) add(e *lctl.Event) {
	switch e.Type {
	case lctl.TypeRunStarted:
		en.started = true
	case lctl.TypeRunFinished:
		en.finished = append(en.finished, e.Seq)
		en.closing = append(en.closing, e.Seq)
	case lctl.TypeRollbackFinished:
		en.closing = append(en.closing, e.Seq)
	}
}

// finish adds the problems of what is unsigned, the notes, and the verdict.
func (r *Report) finish(opts Options, positionOf func(seq uint64) int, en ends) {
	switch {
	case len(r.Checkpoints) == 0 && r.Events > 0:
		r.Problems = append(r.Problems, lctl.Problem{Seq: r.firstSeq, Position: 1, Kind: ProblemUnsigned,
			Message: "the chain has no signed checkpoint: nothing proves who wrote it (was the orchestrator given --checkpoint-key-file?)"})
	case len(r.Unsigned) > 0 && !opts.AllowUnsignedTail && len(r.Problems) == 0:
		first := r.Unsigned[0]
		verb, them := "come", "them"
		if len(r.Unsigned) == 1 {
			verb, them = "comes", "it"
		}
		msg := fmt.Sprintf("%s %s after the last signed checkpoint: nothing proves who wrote %s", describeSeqs(r.Unsigned), verb, them)
		if why, ok := r.notSigned[first]; ok {
			// The first is a checkpoint whose note verified: say what
			// differs from the event the orchestrator appended.
			msg += fmt.Sprintf("; event %d is a signed checkpoint whose note verifies, but not the event the orchestrator appended: %s", first, why)
		}
		r.Problems = append(r.Problems, lctl.Problem{Seq: first, Position: positionOf(first), Kind: ProblemUnsigned,
			Message: msg + " (--allow-unsigned-tail accepts a chain still being written)"})
	}
	for _, s := range en.finished {
		if s > r.Covered {
			r.Notes = append(r.Notes, fmt.Sprintf("the run's end (run_finished, seq %d) is not covered by a signed checkpoint", s))
		}
	}
	// A run's chain cut right after a checkpoint has nothing unsigned:
	// every event left is what was signed. What tells it from a whole run
	// is whether the last event proven ends the run.
	if en.started && r.SignedThrough > 0 && !slices.Contains(en.closing, r.SignedThrough) {
		const why = "which is not the run's end (run_finished or rollback_finished): events after it may have been cut off, with the checkpoints that signed them, or the run had not ended when the chain was exported; a signature proves what came before it, never that nothing came after"
		switch {
		case opts.AllowUnsignedTail:
			r.Notes = append(r.Notes, fmt.Sprintf("the signed events end at seq %d, %s", r.SignedThrough, why))
		case len(r.Problems) == 0:
			r.Problems = append(r.Problems, lctl.Problem{Seq: r.SignedThrough, Position: positionOf(r.SignedThrough), Kind: ProblemNoEnd,
				Message: fmt.Sprintf("the signed events end at seq %d, %s (--allow-unsigned-tail accepts a chain still being written)", r.SignedThrough, why)})
		}
	}
	// A run's chain whose signed events end at the run's end proves
	// everything before it and nothing after: a rollback later appends
	// its events and its own signed end, and a copy cut back to here
	// cannot be told from a run never rolled back by the file alone. Said
	// where it applies, so that whoever reads "verified" knows what it
	// does not cover, unless the chain was compared with another copy.
	if en.started && opts.Against == nil && len(r.Problems) == 0 && r.SignedThrough > 0 && slices.Contains(en.closing, r.SignedThrough) {
		r.Notes = append(r.Notes, fmt.Sprintf("the signed events end at the run's end (seq %d): what came after it (a later rollback, with its own signed end) would not be in this file, and no signature can show it is missing; --against-tracer compares the file with the cluster's latest signed head", r.SignedThrough))
	}
	sortProblems(r.Problems)
	if len(r.Problems) > 0 {
		first := r.Problems[0]
		r.First = &first
	}
	r.OK = len(r.Problems) == 0
}

func endsOf(events []lctl.Event) ends {
	var en ends
	for i := range events {
		en.add(&events[i])
	}
	return en
}

// describeSeqs names a list of seqs: "event 7", "events 7 to 9",
// "events 7, 9 and 12", "12 events (seq 7 to 40)".
func describeSeqs(seqs []uint64) string {
	switch {
	case len(seqs) == 1:
		return fmt.Sprintf("event %d", seqs[0])
	case seqs[len(seqs)-1]-seqs[0] == uint64(len(seqs)-1):
		return fmt.Sprintf("events %d to %d", seqs[0], seqs[len(seqs)-1])
	case len(seqs) <= 5:
		parts := make([]string, len(seqs))
		for i, s := range seqs {
			parts[i] = fmt.Sprint(s)
		}
		return "events " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	}
	return fmt.Sprintf("%d events (seq %d to %d)", len(seqs), seqs[0], seqs[len(seqs)-1])
}

func positionOf(events []lctl.Event, seq uint64) int {
	for i := range events {
		if events[i].Seq == seq {
			return i + 1
		}
	}
	return 0
}

func sortProblems(ps []lctl.Problem) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Position < ps[j-1].Position; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

func orUnknown(ts string) string {
	if ts == "" {
		return "unknown"
	}
	return ts
}

func clip(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
