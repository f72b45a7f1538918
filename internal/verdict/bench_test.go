package verdict

import (
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// BenchmarkSignAndCheck is what binding adds to a step: one signature at
// the validator, one check (digest, step id, signature) at the executor.
func BenchmarkSignAndCheck(b *testing.B) {
	signer, verifier, err := NewPair(time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"path": "config/app.yaml", "content": "deployment: green\nreplicas: 3\n"}
	id := stepID("run", 1, "fs.write", args)
	digest, _ := ArgumentsDigest(args)
	step := Step{RunID: "run", StepID: id, Tool: "fs.write", Arguments: args}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		sv, err := signer.Sign(&xctv1.VerdictGrant{RunId: "run", Step: 1, StepId: id, Tool: "fs.write", ArgumentsDigest: digest}, now)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := verifier.Check(sv, step, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkToolDigest: a validator's digest of the descriptor it judged,
// made anew at every call or remembered (ToolDigests).
func BenchmarkToolDigest(b *testing.B) {
	d := &xctv1.ToolDescriptor{Name: "fs.write", Effect: xctv1.Effect_EFFECT_REVERSIBLE, Source: "builtin", EffectFrom: "builtin",
		InputSchema: `{"type":"object","properties":{"path":{"type":"string","description":"file path, relative to the workspace"},` +
			`"content":{"type":"string","description":"the whole new content"},"mode":{"type":"string","enum":["create","overwrite"]}},` +
			`"required":["path","content"],"additionalProperties":false}`}
	b.Run("anew", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = ToolDigest(d)
		}
	})
	b.Run("remembered", func(b *testing.B) {
		var c ToolDigests
		b.ReportAllocs()
		for b.Loop() {
			_ = c.Of(d)
		}
	})
}
