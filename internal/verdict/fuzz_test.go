package verdict

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// FuzzVerdictCheck: a verifier accepts a verdict only for exactly the step
// it was signed for. The fuzzer flips bytes of the grant or the signature,
// renames the key, and changes the request's run, step id, tool or
// arguments; every change but none is refused, and nothing panics.
func FuzzVerdictCheck(f *testing.F) {
	f.Add([]byte{}, []byte{}, "", "", "", "", "a", false)
	f.Add([]byte{3}, []byte{}, "", "", "", "", "a", false)
	f.Add([]byte{}, []byte{0, 1}, "", "", "", "", "a", false)
	f.Add([]byte{}, []byte{}, "ed25519:0000000000000000", "", "", "", "a", false)
	f.Add([]byte{}, []byte{}, "", "run-b", "", "", "a", false)
	f.Add([]byte{}, []byte{}, "", "", "0123", "", "a", false)
	f.Add([]byte{}, []byte{}, "", "", "", "fs.delete", "a", false)
	f.Add([]byte{}, []byte{}, "", "", "", "", "b", false)
	f.Add([]byte{}, []byte{}, "", "", "", "", "a", true)

	signer, verifier, err := NewPair(time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	args := map[string]any{"path": "a"}
	id := stepID("run-a", 1, "fs.write", args)
	digest, err := ArgumentsDigest(args)
	if err != nil {
		f.Fatal(err)
	}
	good, err := signer.Sign(&xctv1.VerdictGrant{RunId: "run-a", Step: 1, StepId: id, Tool: "fs.write", ArgumentsDigest: digest}, now)
	if err != nil {
		f.Fatal(err)
	}
	step := Step{RunID: "run-a", StepID: id, Tool: "fs.write", Arguments: args}
	if _, err := verifier.Check(good, step, now); err != nil {
		f.Fatalf("the genuine verdict: %v", err)
	}

	f.Fuzz(func(t *testing.T, grantFlips, sigFlips []byte, keyID, runID, stepIDv, tool, path string, late bool) {
		sv := proto.CloneOf(good)
		flip(sv.Grant, grantFlips)
		flip(sv.Signature, sigFlips)
		if keyID != "" {
			sv.KeyId = keyID
		}
		st := step
		st.Arguments = map[string]any{"path": path}
		if runID != "" {
			st.RunID = runID
		}
		if stepIDv != "" {
			st.StepID = stepIDv
		}
		if tool != "" {
			st.Tool = tool
		}
		at := now
		if late {
			at = now.Add(time.Minute)
		}
		_, err := verifier.Check(sv, st, at)
		same := bytes.Equal(sv.Grant, good.Grant) && bytes.Equal(sv.Signature, good.Signature) && sv.KeyId == good.KeyId &&
			st.RunID == step.RunID && st.StepID == step.StepID && st.Tool == step.Tool && path == "a" && !late
		if same && err != nil {
			t.Fatalf("the genuine verdict refused: %v", err)
		}
		if !same && err == nil {
			t.Fatalf("accepted a changed verdict or request: key %q run %q step %q tool %q path %q late %v",
				sv.KeyId, st.RunID, st.StepID, st.Tool, path, late)
		}
	})
}

// flip xors the bytes of b with the positions and values of flips:
// pairs (index, mask).
func flip(b, flips []byte) {
	if len(b) == 0 {
		return
	}
	for i := 0; i+1 < len(flips); i += 2 {
		b[int(flips[i])%len(b)] ^= flips[i+1]
	}
}
