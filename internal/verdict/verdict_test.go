package verdict

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

func TestStepIDAgreesWithWire(t *testing.T) {
	t.Parallel()
	args := map[string]any{"path": "a", "n": 1.5, "nested": map[string]any{"z": []any{true, nil, "é"}}}
	st, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stepID("run", 3, "fs.write", st.AsMap()), wire.StepID("run", 3, "fs.write", st); got != want {
		t.Fatalf("stepID %s, wire.StepID %s", got, want)
	}
}

// Rotation: an executor trusting a directory of keys accepts the verdicts
// of each; a key taken out of the directory is not trusted any more.
func TestKeyFilesAndRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, err := WriteKeyPair(filepath.Join(dir, "old"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := WriteKeyPair(filepath.Join(dir, "old"))
	if err != nil || again != old {
		t.Fatalf("second WriteKeyPair: %v %v", again, err)
	}
	fresh, err := WriteKeyPair(filepath.Join(dir, "new"))
	if err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(dir, "trust")
	if err := os.MkdirAll(trust, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"old.pub": old.Public, "new.pub": fresh.Public} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(trust, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, err := LoadVerifier(trust)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.KeyIDs()) != 2 {
		t.Fatalf("trusted %v", v.KeyIDs())
	}
	now := time.Now()
	for _, kf := range []KeyFiles{old, fresh} {
		s, err := LoadSigner(kf.Private, 0)
		if err != nil {
			t.Fatal(err)
		}
		sv, err := s.Sign(&xctv1.VerdictGrant{RunId: "r"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(sv, now); err != nil {
			t.Fatalf("%s: %v", s.KeyID(), err)
		}
		if _, err := v.Verify(sv, now.Add(DefaultTTL)); err == nil {
			t.Fatal("accepted at its expiry")
		}
	}
	if err := os.Remove(filepath.Join(trust, "old.pub")); err != nil {
		t.Fatal(err)
	}
	v, err = LoadVerifier(trust)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := LoadSigner(old.Private, 0)
	sv, _ := s.Sign(&xctv1.VerdictGrant{RunId: "r"}, now)
	if _, err := v.Verify(sv, now); err == nil {
		t.Fatal("a retired key is still trusted")
	}
	if _, err := LoadVerifier(filepath.Join(dir, "none")); err == nil {
		t.Fatal("a missing trust path loaded")
	}
	if _, err := LoadSigner(old.Public, 0); err == nil {
		t.Fatal("a public key loaded as a signing key")
	}
}

// TestStepIDOfCanonicalArguments: the step id and digest made from the
// arguments encoded once are those made the full way (wire.StepID, the
// canonical JSON of the whole tuple), for awkward runs, tools and values.
func TestStepIDOfCanonicalArguments(t *testing.T) {
	t.Parallel()
	argsCases := []map[string]any{
		nil,
		{},
		{"path": "a", "n": 1.5, "nested": map[string]any{"z": []any{true, nil, "é"}}},
		{"\u2028": "line\nsep\t\"q\"\\", "big": 1e21, "tiny": 5e-324, "neg": math.Copysign(0, -1), "emoji": "\U0001F600", "ctl": "\x01\x1f"},
		{"b": []any{}, "a": map[string]any{}, "aa": []any{[]any{[]any{1.0}}}},
	}
	runs := []string{"run", "", "ru\"n\\", "\u00e9t\u00e9", "\x7f<>&", "~ !", "a\x00b", "bad\xffutf8", "tab\there"}
	for _, args := range argsCases {
		canon, err := CanonicalArguments(args)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ArgumentsDigest(args)
		sum := sha256.Sum256(canon)
		if err != nil || DigestOf(canon) != want || want != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Fatalf("%v: DigestOf %s, ArgumentsDigest %s (%v)", args, DigestOf(canon), want, err)
		}
		for _, run := range runs {
			for _, step := range []int{0, 1, 3, -7, 1 << 40, 1<<53 - 1, 1 << 53, 1<<53 + 1, -1 << 53, math.MaxInt64, math.MinInt64} {
				for _, tool := range []string{"fs.write", "", "t\u00f6\"ol", "x\u2028y", "nul\x00"} {
					got, err := StepIDOf(run, step, tool, canon)
					if err != nil {
						t.Fatal(err)
					}
					if full := stepID(run, step, tool, args); got != full {
						t.Fatalf("StepIDOf(%q, %d, %q, %s) = %s, the full encoding gives %s", run, step, tool, canon, got, full)
					}
					st, err := structpb.NewStruct(args)
					if err != nil {
						t.Fatal(err)
					}
					if w := wire.StepID(run, step, tool, st); got != w {
						t.Fatalf("StepIDOf %s, wire.StepID %s", got, w)
					}
				}
			}
		}
	}
}

// TestToolDigest: the digest of a tool changes with what a policy judges
// it by (name, schema, effect class, idempotency, origin), not with its
// description, timeout or output cap (session 10, trust10a).
func TestToolDigest(t *testing.T) {
	t.Parallel()
	base := &xctv1.ToolDescriptor{Name: "shell.exec", InputSchema: `{"type":"object"}`, Effect: xctv1.Effect_EFFECT_READ,
		Idempotent: true, Source: "builtin", EffectFrom: "builtin", Description: "runs a program"}
	d0 := ToolDigest(base)
	if !strings.HasPrefix(d0, "sha256:") || len(d0) != len("sha256:")+64 {
		t.Fatalf("digest %q", d0)
	}
	for name, change := range map[string]func(d *xctv1.ToolDescriptor){
		"name":        func(d *xctv1.ToolDescriptor) { d.Name = "shell.exec2" },
		"schema":      func(d *xctv1.ToolDescriptor) { d.InputSchema = `{"type":"object","properties":{}}` },
		"effect":      func(d *xctv1.ToolDescriptor) { d.Effect = xctv1.Effect_EFFECT_REVERSIBLE },
		"idempotent":  func(d *xctv1.ToolDescriptor) { d.Idempotent = false },
		"source":      func(d *xctv1.ToolDescriptor) { d.Source = "mcp:x" },
		"effect_from": func(d *xctv1.ToolDescriptor) { d.EffectFrom = "config" },
	} {
		d := proto.CloneOf(base)
		change(d)
		if ToolDigest(d) == d0 {
			t.Errorf("a change of %s keeps the digest", name)
		}
	}
	d := proto.CloneOf(base)
	d.Description, d.MaxOutputBytes, d.Timeout = "another text", 99, durationpb.New(time.Hour)
	if ToolDigest(d) != d0 {
		t.Error("the description, output cap or timeout changed the digest")
	}
}

// ToolDigests gives ToolDigest's answer: for a descriptor seen before,
// for each digested field changed in a copy or in place in the very
// descriptor it remembered, and again for the original; and the fields it
// keeps are all ToolDigest reads (a descriptor with every field set
// digests as its copy).
func TestToolDigestsAsToolDigest(t *testing.T) {
	t.Parallel()
	base := &xctv1.ToolDescriptor{Name: "shell.exec", InputSchema: `{"type":"object"}`, Effect: xctv1.Effect_EFFECT_READ,
		Idempotent: true, Source: "builtin", EffectFrom: "builtin", Description: "runs a program", MaxOutputBytes: 7,
		Timeout: durationpb.New(time.Second)}
	if ToolDigest(digestedFields(base)) != ToolDigest(base) {
		t.Fatal("ToolDigest reads a field that ToolDigests does not keep")
	}
	var c ToolDigests
	changes := map[string]func(d *xctv1.ToolDescriptor){
		"schema":      func(d *xctv1.ToolDescriptor) { d.InputSchema = `{"type":"object","properties":{}}` },
		"effect":      func(d *xctv1.ToolDescriptor) { d.Effect = xctv1.Effect_EFFECT_REVERSIBLE },
		"idempotent":  func(d *xctv1.ToolDescriptor) { d.Idempotent = false },
		"source":      func(d *xctv1.ToolDescriptor) { d.Source = "mcp:x" },
		"effect_from": func(d *xctv1.ToolDescriptor) { d.EffectFrom = "config" },
	}
	for name, change := range changes {
		first, again := c.Of(base), c.Of(base) // made, then remembered
		if first != ToolDigest(base) || again != first {
			t.Fatal("the remembered digest is not ToolDigest's")
		}
		d := proto.CloneOf(base)
		change(d)
		if got, want := c.Of(d), ToolDigest(d); got != want || got == ToolDigest(base) {
			t.Errorf("%s changed in a copy: %s, want %s", name, got, want)
		}
		// In place, in a descriptor it remembered.
		mut := proto.CloneOf(base)
		if c.Of(mut) != ToolDigest(base) {
			t.Fatal("the remembered digest is not ToolDigest's")
		}
		change(mut)
		if got, want := c.Of(mut), ToolDigest(mut); got != want {
			t.Errorf("%s changed in place: %s, want %s", name, got, want)
		}
	}
	other := proto.CloneOf(base)
	other.Name = "fs.read"
	if c.Of(other) != ToolDigest(other) || c.Of(base) != ToolDigest(base) {
		t.Error("two tools' digests mixed up")
	}
}
