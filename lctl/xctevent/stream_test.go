package xctevent

import "testing"

// A stream_end says only what happened: usage, finish reason, truncation
// and the failure appear when there is one.
func TestStreamEndOmissions(t *testing.T) {
	t.Parallel()
	ok := StreamEnd{TotalChunks: 2, Status: "ok", TotalTokens: 5}.Data()
	for _, k := range []string{"usage", "finish_reason", "truncated", "error", "code"} {
		if _, there := ok[k]; there {
			t.Errorf("a plain stream_end writes %s", k)
		}
	}
	failed := StreamEnd{Status: "error", Error: "boom", Code: "RATE_LIMITED", Usage: &Tokens{Input: 1, Output: 2}, Truncated: true}.Data()
	if failed["error"] != "boom" || failed["code"] != "RATE_LIMITED" || failed["truncated"] != true || failed["usage"] == nil {
		t.Errorf("failed stream_end: %v", failed)
	}
	if c := (StreamChunk{Index: 3, Content: "x", Tokens: 2}).Data(); c["index"] != 3 || c["content"] != "x" || c["tokens"] != 2 {
		t.Errorf("stream_chunk: %v", c)
	}
}
