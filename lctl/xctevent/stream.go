package xctevent

import "github.com/xct-dev/xct/lctl"

// The stream events XCT writes when a model streams its answer (LCTL spec
// part 9): stream_start, a bounded number of coalesced stream_chunk, and
// stream_end (docs/crews.md, "Streaming").
const (
	TypeStreamStart = lctl.TypeStreamStart
	TypeStreamChunk = lctl.TypeStreamChunk
	TypeStreamEnd   = lctl.TypeStreamEnd
)

// Coalesce is how a stream's deltas are coalesced into chunk events.
type Coalesce struct {
	MinBytes, MaxWaitMS, MaxChunks, MaxRecordedBytes int64
}

// StreamStart opens a model's stream.
type StreamStart struct {
	Model          string
	ExpectedChunks string // "unknown": a model does not say in advance
	Coalesce       Coalesce
}

// StreamChunk is the text of one or more deltas.
type StreamChunk struct {
	Index   int
	Content string
	Tokens  int // the deltas it coalesces
}

// StreamEnd closes a stream: ok, error or cut.
type StreamEnd struct {
	TotalChunks, Deltas, Bytes int
	DurationMS                 float64
	Status                     string
	Usage                      *Tokens // the server's usage, when it sent one
	TotalTokens                int64
	FinishReason               string // omitted when empty
	Truncated                  bool   // omitted when false
	Error, Code                string // omitted when empty (a failed stream has both)
}

// Type implements Event.
func (StreamStart) Type() string { return TypeStreamStart }

// Type implements Event.
func (StreamChunk) Type() string { return TypeStreamChunk }

// Type implements Event.
func (StreamEnd) Type() string { return TypeStreamEnd }

// Data implements Event.
func (e StreamStart) Data() map[string]any {
	return map[string]any{"model": e.Model, "expected_chunks": e.ExpectedChunks, "coalesce": map[string]any{
		"min_bytes": e.Coalesce.MinBytes, "max_wait_ms": e.Coalesce.MaxWaitMS, "max_chunks": e.Coalesce.MaxChunks,
		"max_recorded_bytes": e.Coalesce.MaxRecordedBytes,
	}}
}

// Data implements Event.
func (e StreamChunk) Data() map[string]any {
	return map[string]any{"index": e.Index, "content": e.Content, "tokens": e.Tokens}
}

// Data implements Event.
func (e StreamEnd) Data() map[string]any {
	d := map[string]any{
		"total_chunks": e.TotalChunks, "deltas": e.Deltas, "bytes": e.Bytes, "duration_ms": e.DurationMS,
		"status": e.Status, "total_tokens": e.TotalTokens,
	}
	if e.Usage != nil {
		d["usage"] = e.Usage.data()
	}
	if e.FinishReason != "" {
		d["finish_reason"] = e.FinishReason
	}
	if e.Truncated {
		d["truncated"] = true
	}
	if e.Error != "" || e.Code != "" {
		d["error"], d["code"] = e.Error, e.Code
	}
	return d
}
