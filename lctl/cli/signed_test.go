package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

// signedRun is a run's chain as the orchestrator writes it: run_started,
// n tool calls, run_finished, a signed checkpoint (agent orchestrator)
// after every 10th event and after the end.
func signedRun(t *testing.T, id string, n int, s note.Signer) []lctl.Event {
	t.Helper()
	var events []lctl.Event
	add := func(typ, agent string, data map[string]any) {
		prev := ""
		if len(events) > 0 {
			prev = events[len(events)-1].Hash
		}
		e := lctl.Event{ChainID: id, Seq: uint64(len(events) + 1), Type: typ, Agent: agent,
			Timestamp: lctl.FormatTime(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC).Add(time.Duration(len(events)) * time.Second)), Data: data}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	sign := func() {
		head := events[len(events)-1]
		d, err := checkpoint.Sign(s, checkpoint.Origin("", id), &head)
		if err != nil {
			t.Fatal(err)
		}
		add(checkpoint.EventType, checkpoint.SignerAgent, d)
	}
	types := []string{lctl.TypeRunStarted}
	for range n {
		types = append(types, lctl.TypeToolCall)
	}
	types = append(types, lctl.TypeRunFinished)
	for i, typ := range types {
		add(typ, "orchestrator", map[string]any{"step": float64(i), "tool": "fs.read"})
		if events[len(events)-1].Seq%10 == 0 {
			sign()
		}
	}
	sign()
	return events
}

func writeSigned(t *testing.T, dir, name, id string, events []lctl.Event) string {
	t.Helper()
	var buf bytes.Buffer
	if err := lctl.NewFile(id, events).Encode(&buf, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".lctl.json")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyKeyTheCheckpointEventIsAsSigned: a signed checkpoint's note
// signs the events before it, not the event that carries it. The run's
// last checkpoint (nothing after it links to its hash) was taken as
// proving itself whatever its agent, its fields beside the data, its key
// field, a signature line added to its note (an untrusted key's, or its
// own twice: the note still verifies), or (read as a stream, the way
// lctl verify reads a file) its data beside the four Sign gives it: a forger edited it, re-hashed it alone,
// and lctl verify --key said "exactly what KEY signed". Each such edit is
// an event nobody signed now, named by its seq.
func TestVerifyKeyTheCheckpointEventIsAsSigned(t *testing.T) {
	skey, vkey, err := checkpoint.GenerateKey("xct-cli")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := checkpoint.ParseSigner([]byte(skey), "test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pub := filepath.Join(dir, "xct-cli.pub")
	if err := os.WriteFile(pub, []byte(vkey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const id = "run-20261127-090000-signed"
	good := signedRun(t, id, 30, signer)
	last := len(good) - 1
	if code, out, errOut := run(t, nil, "verify", "--key", pub, writeSigned(t, dir, "good", id, good)); code != 0 || !strings.Contains(out, "exactly what xct-cli signed") {
		t.Fatalf("untouched: exit %d\n%s%s", code, out, errOut)
	}
	edit := func(fn func(e *lctl.Event)) []lctl.Event {
		ev := make([]lctl.Event, len(good))
		copy(ev, good)
		e := ev[last]
		e.Data = map[string]any{}
		for k, v := range good[last].Data {
			e.Data[k] = v
		}
		fn(&e)
		if err := e.Seal(ev[last-1].Hash); err != nil {
			t.Fatal(err)
		}
		ev[last] = e
		return ev
	}
	seq := good[last].Seq
	// The note with a second signature line, by a key nobody trusts, and
	// with its own signature line twice: note readers take both notes.
	oskey, _, err := checkpoint.GenerateKey("release-approved")
	if err != nil {
		t.Fatal(err)
	}
	other, err := checkpoint.ParseSigner([]byte(oskey), "test")
	if err != nil {
		t.Fatal(err)
	}
	head := good[last-1]
	d, err := checkpoint.Sign(other, checkpoint.Origin("", id), &head)
	if err != nil {
		t.Fatal(err)
	}
	signed := good[last].Data["note"].(string)
	otherNote := d["note"].(string)
	cosigned := signed + otherNote[strings.Index(otherNote, "\n\n")+2:]
	ownLine := signed[strings.Index(signed, "\n\n")+2:]
	for _, tc := range []struct {
		name string
		fn   func(e *lctl.Event)
		want string
		why  string
	}{
		{"another agent", func(e *lctl.Event) { e.Agent = "security-team" }, fmt.Sprintf("FAILED: event %d comes after the last signed checkpoint", seq), `its agent is "security-team", not the orchestrator`},
		{"a field beside the data", func(e *lctl.Event) { e.Extra = map[string]any{"approved_by": "security"} }, fmt.Sprintf("FAILED: event %d comes after", seq), "fields the signature does not cover"},
		{"a data field", func(e *lctl.Event) { e.Data["message"] = "run approved by security" }, fmt.Sprintf("FAILED: event %d comes after", seq), "fields the signature does not cover"},
		{"another key named", func(e *lctl.Event) { e.Data["key"] = "xct-prod-root" }, "its seq, head_hash or key was changed", "signed by xct-cli"},
		{"a fraction of a seq", func(e *lctl.Event) { e.Data["seq"] = e.Data["seq"].(float64) + 0.5 }, "its seq, head_hash or key was changed", "signed by xct-cli"},
		{"a signature line added", func(e *lctl.Event) { e.Data["note"] = cosigned }, fmt.Sprintf("FAILED: event %d comes after", seq), "more than the one signature"},
		{"its signature line twice", func(e *lctl.Event) { e.Data["note"] = signed + ownLine }, fmt.Sprintf("FAILED: event %d comes after", seq), "more than the one signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeSigned(t, dir, strings.ReplaceAll(tc.name, " ", "-"), id, edit(tc.fn))
			code, out, errOut := run(t, nil, "verify", "--key", pub, path)
			if code != 1 || !strings.Contains(out, tc.want) || !strings.Contains(out, tc.why) || strings.Contains(out, "Chain verified and signed") {
				t.Fatalf("exit %d, want 1 with %q and %q\n%s%s", code, tc.want, tc.why, out, errOut)
			}
		})
	}
}

// TestVerifyKeyTreeSizeZero: a checkpoint whose note covers no event
// (tree size 0) after a run's end, signed by a key the trusted-keys file
// revokes (a leaked one), in a chain too long for the streaming verifier's window: lctl verify read the
// whole chain again and indexed event 0 (a panic). It is a problem of that
// event now, for a trusted key and a revoked one alike.
func TestVerifyKeyTreeSizeZero(t *testing.T) {
	skey, vkey, err := checkpoint.GenerateKey("xct-leaked")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := checkpoint.ParseSigner([]byte(skey), "test")
	if err != nil {
		t.Fatal(err)
	}
	curS, curV, err := checkpoint.GenerateKey("xct-current")
	if err != nil {
		t.Fatal(err)
	}
	current, err := checkpoint.ParseSigner([]byte(curS), "test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const id = "run-20261127-090000-zero"
	ev := signedRun(t, id, 80, current)
	ev = ev[:len(ev)-1] // the real end's checkpoint
	head := lctl.Event{Seq: 0, Hash: ev[0].Hash}
	d, err := checkpoint.Sign(signer, checkpoint.Origin("", id), &head)
	if err != nil {
		t.Fatal(err)
	}
	cp := lctl.Event{ChainID: id, Seq: ev[len(ev)-1].Seq + 1, Type: checkpoint.EventType, Agent: checkpoint.SignerAgent,
		Timestamp: ev[len(ev)-1].Timestamp, Data: d}
	if err := cp.Seal(ev[len(ev)-1].Hash); err != nil {
		t.Fatal(err)
	}
	path := writeSigned(t, dir, "zero", id, append(ev, cp))
	for name, keys := range map[string]string{"trusted": curV + "\n" + vkey + "\n", "revoked": curV + "\nrevoked " + vkey + "\n"} {
		t.Run(name, func(t *testing.T) {
			kf := filepath.Join(dir, name+".keys")
			if err := os.WriteFile(kf, []byte(keys), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, nil, "verify", "--trusted-keys", kf, path)
			if code != 1 || !strings.Contains(out, fmt.Sprintf("FAILED: event %d", cp.Seq)) {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
