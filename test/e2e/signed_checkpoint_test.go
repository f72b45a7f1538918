package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/checkpoint"
	"github.com/xct-dev/xct/lctl/cli"
	"github.com/xct-dev/xct/services/orchestrator"
)

// lctlRun runs the lctl command line in-process.
func lctlRun(env map[string]string, args ...string) (int, string) {
	var out bytes.Buffer
	code := cli.Run(context.Background(), args, cli.Env{Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] }, Live: lctllive.Live{}})
	return code, out.String()
}

func writeKey(t *testing.T, dir, name string) (keyFile, pubFile string) {
	t.Helper()
	skey, vkey, err := checkpoint.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	if err := os.WriteFile(keyFile, []byte(skey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, []byte(vkey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return keyFile, pubFile
}

// TestSignedCheckpoints runs the demo through a cluster that signs a
// checkpoint every 10 events and at the run's end, exports the chain from
// the tracer, and proves it with lctl verify --key: untouched it verifies;
// a flipped byte, a deleted event, a swapped pair and an edit with every
// hash recomputed are each found; another key is refused; after the key
// file is replaced, the next run is signed with the new key, and a
// trusted-keys file with both verifies both runs.
func TestSignedCheckpoints(t *testing.T) {
	t.Parallel()
	keys := t.TempDir()
	keyFile, pub := writeKey(t, keys, "xct-e2e-a")
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.Checkpoint = orchestrator.CheckpointConfig{KeyFile: keyFile, Every: 10}
	})
	demo, err := os.ReadFile("../../examples/demo/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.writeScript(t, "demo.yaml", string(demo))
	env := map[string]string{"LCTL_TOKEN": c.creds.Token(t, "dave"), "LCTL_TRACER": c.app.Addr(app.TargetTracer)}
	dir := t.TempDir()

	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "switch to green", Model: "scripted:demo.yaml", Principal: "alice"})
	id := run.GetRunId()
	exported := exportSigned(t, env, id, filepath.Join(dir, "run.lctl.json"))
	f := decode(t, exported)
	var cps []uint64
	for i, e := range f.Events {
		if e.Type == checkpoint.EventType {
			cps = append(cps, e.Seq)
			if i == 0 || f.Events[i-1].Seq%10 != 0 && i != len(f.Events)-1 {
				t.Errorf("checkpoint at seq %d does not follow a multiple of 10 or end the chain", e.Seq)
			}
		}
	}
	if len(cps) < 3 || f.Events[len(f.Events)-2].Type != lctl.TypeRunFinished {
		t.Fatalf("checkpoints at %v; the chain ends %s, %s", cps, f.Events[len(f.Events)-2].Type, f.Events[len(f.Events)-1].Type)
	}

	verify := func(name string, events []lctl.Event, wantCode int, want ...string) {
		t.Helper()
		path := filepath.Join(dir, name+".lctl.json")
		var buf bytes.Buffer
		if err := lctl.NewFile(id, events).Encode(&buf, lctl.FormatJSON); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		verifyFile(t, env, name, path, pub, wantCode, want...)
	}

	verifyFile(t, env, "untouched", exported, pub, 0, "✓ signatures: events 1 to "+itoa(f.Events[len(f.Events)-2].Seq)+" are exactly what xct-e2e-a signed",
		"Chain verified and signed: it is exactly what xct-e2e-a signed.")

	// The cluster's origin (the default, xct) is what it signed; another
	// cluster's name is refused.
	verifyFileCode(t, env, "its own origin", exported, pub, 0, []string{"--origin", "xct"}, "Chain verified and signed")
	verifyFileCode(t, env, "another cluster's origin", exported, pub, 1, []string{"--origin", "prod-eu"}, `not "prod-eu/lctl/`+id+`" (--origin)`)

	// The live chain, read from the tracer, proves the same.
	if code, out := lctlRun(env, "verify", "--key", pub, "--chain", id); code != 0 || !strings.Contains(out, "Chain verified and signed: it is exactly what xct-e2e-a signed.") {
		t.Fatalf("verify --key --chain %s: exit %d\n%s", id, code, out)
	}

	// A flipped byte in the file, nothing recomputed.
	raw, _ := os.ReadFile(exported)
	at := bytes.Index(raw, []byte(`"decision": "allow"`))
	if at < 0 {
		t.Fatal("no allow verdict in the export")
	}
	flipped := bytes.Clone(raw)
	flipped[at+len(`"decision": "allo`)] ^= 0x01 // allow -> allov
	flippedSeq := seqAtOffset(t, raw, at)
	flippedPath := filepath.Join(dir, "flipped.lctl.json")
	if err := os.WriteFile(flippedPath, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	verifyFile(t, env, "byte flip", flippedPath, pub, 1, "FAILED: event "+itoa(flippedSeq)+" (verdict by validator) was edited")

	// A deleted event.
	del := clone(f.Events)
	del = append(del[:6], del[7:]...)
	verify("deleted", del, 1, "FAILED: event 8 (", "seq 7 was removed")

	// A swapped pair.
	sw := clone(f.Events)
	sw[3], sw[4] = sw[4], sw[3]
	verify("swapped", sw, 1, "FAILED: event 5 (", "out of order")

	// Cut right after the first checkpoint, in the middle of the run:
	// every event left is signed, so nothing is unsigned; but the run's
	// end and all that came after it (a denied step, an error) are gone,
	// and verify must not call that "exactly what was signed".
	cut := clone(f.Events[:cps[0]])
	verify("cut after a checkpoint", cut, 1, "FAILED: the signed events end at seq "+itoa(cps[0]-1)+", which is not the run's end", "cut off")
	verifyFileCode(t, env, "cut, still being written", filepath.Join(dir, "cut after a checkpoint.lctl.json"), pub, 0, []string{"--allow-unsigned-tail"},
		"note: the signed events end at seq "+itoa(cps[0]-1)+", which is not the run's end")

	// The run's last checkpoint copied to the end, with a line of the
	// forger's own in it: its note verifies, but nobody signed this event
	// (its seq, its other data), so it is unsigned, not "proven by itself".
	last := f.Events[len(f.Events)-1]
	copied := last
	copied.Data = map[string]any{}
	for k, v := range last.Data {
		copied.Data[k] = v
	}
	copied.Data["message"] = "run approved by security"
	copied.Seq = last.Seq + 1
	if err := copied.Seal(last.Hash); err != nil {
		t.Fatal(err)
	}
	verify("checkpoint copied to the end", append(clone(f.Events), copied), 1, "FAILED: event "+itoa(copied.Seq)+" comes",
		"after the last signed checkpoint")

	// The run's last checkpoint edited in place and re-hashed alone (no
	// event links to it): its note still verifies, but the event is not
	// what the orchestrator appended (session 15: each passed as signed).
	for name, edit := range map[string]func(e *lctl.Event){
		"checkpoint by another agent":   func(e *lctl.Event) { e.Agent = "security-team" },
		"checkpoint with a field added": func(e *lctl.Event) { e.Extra = map[string]any{"approved_by": "security"} },
		"checkpoint with a data field":  func(e *lctl.Event) { e.Data["message"] = "run approved by security" },
	} {
		ev := clone(f.Events)
		e := &ev[len(ev)-1]
		e.Data = map[string]any{}
		for k, v := range last.Data {
			e.Data[k] = v
		}
		edit(e)
		if err := e.Seal(ev[len(ev)-2].Hash); err != nil {
			t.Fatal(err)
		}
		verify(name, ev, 1, "FAILED: event "+itoa(last.Seq)+" comes", "after the last signed checkpoint", "not the event the orchestrator appended")
	}

	// An allow turned into a deny and every hash recomputed: the hash
	// chain checks out, the signature does not.
	forged := clone(f.Events)
	edited := -1
	for i := range forged {
		if forged[i].Type == lctl.TypeVerdict && forged[i].Data["decision"] == "allow" && i > 12 {
			forged[i].Data["decision"] = "deny"
			edited = i
			break
		}
	}
	if edited < 0 {
		t.Fatal("no verdict to edit")
	}
	prev := ""
	for i := range forged {
		if err := forged[i].Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = forged[i].Hash
	}
	path := filepath.Join(dir, "forged.lctl.json")
	var buf bytes.Buffer
	if err := lctl.NewFile(id, forged).Encode(&buf, lctl.FormatJSON); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := lctlRun(env, "verify", path); code != 0 || !strings.Contains(out, "Chain verified.") {
		t.Fatalf("without --key the re-hashed chain should pass the hash checks (that is the point): exit %d\n%s", code, out)
	}
	// The checkpoint covering the edited verdict names the span it is in.
	var covering uint64
	for _, s := range cps {
		if s > forged[edited].Seq {
			covering = s
			break
		}
	}
	verifyFile(t, env, "edited and re-hashed", path, pub, 1, "FAILED: event "+itoa(covering)+" (signed_checkpoint by orchestrator): signed by xct-e2e-a",
		"were changed and the hashes after them recomputed")

	// Another key proves nothing.
	_, otherPub := writeKey(t, keys, "xct-e2e-a2")
	verifyFile(t, env, "wrong key", exported, otherPub, 1, "which is not a trusted key")

	// Rotation: a new key file (another name) in place of the old one; the
	// next run is signed with it.
	newKey, newPub := writeKey(t, keys, "xct-e2e-b")
	rotated, err := os.ReadFile(newKey)
	if err != nil {
		t.Fatal(err)
	}
	tmp := keyFile + ".new"
	if err := os.WriteFile(tmp, rotated, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, keyFile); err != nil {
		t.Fatal(err)
	}
	run2, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "switch to green", Model: "scripted:demo.yaml", Principal: "alice"})
	exported2 := exportSigned(t, env, run2.GetRunId(), filepath.Join(dir, "run2.lctl.json"))
	verifyFile(t, env, "new key only", exported2, newPub, 0, "exactly what xct-e2e-b signed")
	verifyFile(t, env, "old key on the new run", exported2, pub, 1, "xct-e2e-b+")
	trusted := filepath.Join(dir, "trusted.keys")
	a, _ := os.ReadFile(pub)
	b, _ := os.ReadFile(newPub)
	if err := os.WriteFile(trusted, append(append([]byte("# xct-e2e-a rotated out\n"), a...), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{exported, exported2} {
		if code, out := lctlRun(env, "verify", "--trusted-keys", trusted, p); code != 0 {
			t.Fatalf("trusted keys, %s: exit %d\n%s", p, code, out)
		}
		// The current key given again with --key is the same key (it
		// made every checkpoint it signed "ambiguous" before).
		if code, out := lctlRun(env, "verify", "--key", newPub, "--trusted-keys", trusted, p); code != 0 {
			t.Fatalf("a key given twice, %s: exit %d\n%s", p, code, out)
		}
	}
	// The old key leaked: revoked outright, what it alone signed is
	// refused, though its .pub is still listed; the new key's run verifies.
	revoked := filepath.Join(dir, "revoked.keys")
	if err := os.WriteFile(revoked, append(append([]byte("# xct-e2e-a leaked\nrevoked "), a...), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := lctlRun(env, "verify", "--trusted-keys", trusted, "--trusted-keys", revoked, exported); code != 1 || !strings.Contains(out, "signed only by xct-e2e-a+") || !strings.Contains(out, "(revoked): a revoked key proves nothing") {
		t.Fatalf("a revoked key's chain: exit %d\n%s", code, out)
	}
	if code, out := lctlRun(env, "verify", "--trusted-keys", revoked, exported2); code != 0 {
		t.Fatalf("the new key's chain beside a revoked key: exit %d\n%s", code, out)
	}
}

// exportSigned exports a chain from the tracer once the tracer has the
// checkpoint that follows run_finished.
func exportSigned(t *testing.T, env map[string]string, id, path string) string {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() error {
		if code, out := lctlRun(env, "export", "--chain", id, "-o", path); code != 0 {
			return fmt.Errorf("export: exit %d: %s", code, out)
		}
		f := decode(t, path)
		if n := len(f.Events); n < 2 || f.Events[n-1].Type != checkpoint.EventType || f.Events[n-2].Type != lctl.TypeRunFinished {
			return fmt.Errorf("the export of %s does not end with a signed checkpoint after run_finished yet", id)
		}
		return nil
	})
	return path
}

func decode(t *testing.T, path string) *lctl.File {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func verifyFile(t *testing.T, env map[string]string, name, path, pub string, wantCode int, want ...string) {
	t.Helper()
	verifyFileCode(t, env, name, path, pub, wantCode, nil, want...)
}

// verifyFileCode is verifyFile with more flags.
func verifyFileCode(t *testing.T, env map[string]string, name, path, pub string, wantCode int, flags []string, want ...string) {
	t.Helper()
	code, out := lctlRun(env, append(append([]string{"verify", "--key", pub}, flags...), path)...)
	t.Logf("%s: lctl verify --key %s\n%s", name, filepath.Base(pub), out)
	if code != wantCode {
		t.Fatalf("%s: lctl verify exit %d, want %d\n%s", name, code, wantCode, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: lctl verify does not say %q:\n%s", name, w, out)
		}
	}
}

func clone(events []lctl.Event) []lctl.Event {
	out := make([]lctl.Event, len(events))
	for i, e := range events {
		d := make(map[string]any, len(e.Data))
		for k, v := range e.Data {
			d[k] = v
		}
		e.Data = d
		out[i] = e
	}
	return out
}

// seqAtOffset finds the seq of the event whose text contains offset at.
func seqAtOffset(t *testing.T, raw []byte, at int) uint64 {
	t.Helper()
	i := bytes.LastIndex(raw[:at], []byte(`"seq": `))
	if i < 0 {
		t.Fatal("no seq before the offset")
	}
	var n uint64
	for _, b := range raw[i+len(`"seq": `):] {
		if b < '0' || b > '9' {
			break
		}
		n = n*10 + uint64(b-'0')
	}
	return n
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestDevClusterSignsCheckpoints: `xct dev` makes a checkpoint key in its
// data directory and signs its chains with it, so the demo's chain,
// exported from the tracer, verifies with the .pub next to it.
func TestDevClusterSignsCheckpoints(t *testing.T) {
	t.Parallel()
	d := startDev(t, "--demo")
	id := d.proc.waitFor(t, regexp.MustCompile(`run (run-[0-9a-f-]+) started`), 10*time.Second)
	tracer := d.proc.waitFor(t, regexp.MustCompile(`tracer +(127\.0\.0\.1:[0-9]+)`), 10*time.Second)
	pub := filepath.Join(d.dataDir, "dev", "checkpoint.pub")
	d.proc.waitFor(t, regexp.MustCompile(`checkpoints +signed with .*checkpoint\.key \(verify an export: lctl verify --key .*checkpoint\.pub FILE\)`), 10*time.Second)
	env := map[string]string{"LCTL_TRACER": tracer, "XCT_AS": "dave", "XCT_CREDENTIALS": filepath.Join(d.dataDir, "dev", "credentials.yaml")}
	path := exportSigned(t, env, id, filepath.Join(t.TempDir(), "demo.lctl.json"))
	verifyFile(t, env, "xct dev demo", path, pub, 0, "Chain verified and signed: it is exactly what xct-dev signed.")

	// Then the crew demo plays in the same process, to its end, through
	// the gate's approval (make run shows all of it).
	d.proc.waitFor(t, regexp.MustCompile(`\[step 7\] approval  APPROVED by bob`), 30*time.Second)
	d.proc.waitFor(t, regexp.MustCompile(`done: F1 \(SQL injection\) confirmed by consensus and fixed`), 30*time.Second)
	started := regexp.MustCompile(`run (run-[0-9a-f-]+) started by dev`).FindAllStringSubmatch(d.proc.output(), -1)
	if len(started) != 2 {
		t.Fatalf("xct dev --demo started %d runs, want 2", len(started))
	}
	crewID := started[1][1]
	crewPath := exportSigned(t, env, crewID, filepath.Join(t.TempDir(), "crew.lctl.json"))
	verifyFile(t, env, "xct dev crew demo", crewPath, pub, 0, "Chain verified and signed: it is exactly what xct-dev signed.")
}

// TestCutAfterTheEndHidesARollback: a run's export ends with its signed
// end; the run is then rolled back (the rollback's end signed in turn).
// The old export, or the new one cut back to the run's end, proves itself:
// every event is what the cluster signed and the last ends the run, so
// lctl verify --key says ✓ and the rollback is hidden. With
// --against-tracer, verify reads the live chain's latest signed head from
// the tracer and fails the cut copy, naming what it lacks; the whole
// export passes with a note.
func TestCutAfterTheEndHidesARollback(t *testing.T) {
	t.Parallel()
	keys := t.TempDir()
	keyFile, pub := writeKey(t, keys, "xct-e2e-cut")
	c := startCluster(t, func(cfg *app.Config, _ *app.Options) {
		cfg.Orchestrator.Checkpoint = orchestrator.CheckpointConfig{KeyFile: keyFile, Every: 10}
	})
	c.writeScript(t, "write.yaml", `
steps:
  - next_step: {tool: fs.write, arguments: {path: rolled.txt, content: "hello"}, goal: write}
  - done: true
    message: written
`)
	env := map[string]string{"LCTL_TOKEN": c.creds.Token(t, "dave"), "LCTL_TRACER": c.app.Addr(app.TargetTracer)}
	dir := t.TempDir()
	run, _ := c.runToEnd(t, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:write.yaml", Principal: "alice"})
	id := run.GetRunId()
	before := exportSigned(t, env, id, filepath.Join(dir, "before.lctl.json"))
	verifyFile(t, env, "before the rollback", before, pub, 0, "Chain verified and signed")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if rb, err := c.orchAs(t, "carol").RollbackRun(ctx, &xctv1.RollbackRunRequest{RunId: id}); err != nil || rb.GetStatus() != "done" {
		t.Fatalf("rollback %v: %v", rb, err)
	}
	after := filepath.Join(dir, "after.lctl.json")
	testutil.Eventually(t, 20*time.Second, func() error {
		if code, out := lctlRun(env, "export", "--chain", id, "-o", after); code != 0 {
			return fmt.Errorf("export: exit %d: %s", code, out)
		}
		f := decode(t, after)
		if n := len(f.Events); n < 2 || f.Events[n-1].Type != checkpoint.EventType || f.Events[n-2].Type != lctl.TypeRollbackFinished {
			return fmt.Errorf("the export of %s does not end with the rollback's signed end yet", id)
		}
		return nil
	})
	// The hole: the copy from before the rollback proves itself.
	verifyFile(t, env, "cut after the end, alone", before, pub, 0, "Chain verified and signed")
	verifyFileCode(t, env, "cut after the end, against the tracer", before, pub, 1, []string{"--against-tracer"},
		"FAILED", "the tracer at "+c.app.Addr(app.TargetTracer)+" has a checkpoint signed by xct-e2e-cut covering seq", "were cut off")
	verifyFileCode(t, env, "whole, against the tracer", after, pub, 0, []string{"--against-tracer"},
		"latest signed head", "Chain verified and signed")
	if code, out := lctlRun(env, "verify", "--key", pub, "--against-tracer", "--chain", id); code != 0 || !strings.Contains(out, "latest signed head") {
		t.Fatalf("the live chain, against the tracer: exit %d\n%s", code, out)
	}
	// Against a key that signed none of it: nothing to compare with.
	_, otherPub := writeKey(t, keys, "xct-e2e-other")
	if code, out := lctlRun(env, "verify", "--key", otherPub, "--against-tracer", after); code != 2 || !strings.Contains(out, "no checkpoint a trusted key signed") {
		t.Fatalf("another key, against the tracer: exit %d\n%s", code, out)
	}
	if code, out := lctlRun(env, "verify", "--against-tracer", after); code != 2 || !strings.Contains(out, "--against-tracer goes with --key") {
		t.Fatalf("without a key: exit %d\n%s", code, out)
	}
}
