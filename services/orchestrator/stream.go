package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// Streaming (LCTL spec part 9). A model that streams its answer is
// recorded as stream_start, a bounded number of stream_chunk events and
// stream_end, appended by the loop as the text arrives (StreamSink), so
// `xct run`, `lctl tail` and the debugger show it live and `lctl stats`
// counts it. The deltas a server sends (often one token each) are
// coalesced:
//
//   - a chunk closes when it holds at least StreamChunkMinBytes bytes, or
//     when a delta arrives StreamChunkMaxWait or more after the chunk's
//     first one (no timer: a chunk waits for the next delta or the end);
//   - at most StreamMaxChunks chunks per stream: the last takes all the
//     rest;
//   - at most StreamMaxRecordBytes of text are recorded per stream: past
//     it chunks carry no more text (the stream_end says truncated); the
//     text is the model's answer, which its step records in full anyway.
//
// So a stream is at most StreamMaxChunks+2 events and about
// StreamMaxRecordBytes of text on the chain, whatever the server sends.
const (
	StreamChunkMinBytes   = 256
	StreamChunkMaxWait    = 250 * time.Millisecond
	StreamMaxChunks       = 64
	StreamMaxRecordBytes  = 64 << 10
	maxSSELineBytes       = 1 << 20
	streamStatusOK        = "ok"
	streamStatusError     = "error"
	streamStatusCut       = "cut"
	streamExpectedUnknown = "unknown"
)

// StreamSink appends one streaming event to the run's chain (the loop's
// record with the step's agent). An error stops the stream: the model's
// answer is not used.
type StreamSink func(ev xctevent.Event) error

// StreamingProposer is a Proposer that can stream its answer. The loop
// calls ProposeStream instead of Propose when Streaming is true.
type StreamingProposer interface {
	Proposer
	// Streaming reports whether this proposer is set to stream.
	Streaming() bool
	// ProposeStream asks for the next decision, handing each streaming
	// event to sink as it happens. When the stream started, its
	// stream_end is always handed over (status ok, error or cut) before
	// ProposeStream returns, unless sink itself failed.
	ProposeStream(ctx context.Context, req *xctv1.ProposeRequest, sink StreamSink) (*xctv1.ProposeResponse, error)
}

// ModelError is a model call that failed, with the code model routing
// falls back on (RATE_LIMITED, TIMEOUT, GENERATION_FAILED; crew routing's
// fallback_on).
type ModelError struct {
	Model string
	Code  wire.Code
	// Status is the HTTP status, when the server answered one.
	Status int
	Msg    string
	// Err is the cause, when there is one (errMalformedSSE, ...).
	Err error
	// Usage is what the failed call used, when the endpoint said so (or,
	// streaming without a usage chunk, the deltas it sent): a crew's
	// fallback counts it against the run's budgets.
	Usage *xctv1.Usage
	// NotSent: the call provably never reached a model (no transport
	// carried it, no endpoint exists: a scripted failure, a proposer
	// that could not be made). Such a call is charged nothing; another
	// failure without a Usage is charged an estimate (failedCallTokens).
	NotSent bool
}

func (e *ModelError) Error() string { return fmt.Sprintf("model %s: %s", e.Model, e.Msg) }

// Unwrap is the cause.
func (e *ModelError) Unwrap() error { return e.Err }

// FailureCode is the code of a failed model call, for routing: a
// ModelError's own, TIMEOUT for a deadline, else GENERATION_FAILED.
func FailureCode(err error) string {
	var me *ModelError
	switch {
	case errors.As(err, &me):
		return string(me.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return string(wire.CodeTimeout)
	}
	return string(wire.CodeGenerationFailed)
}

// httpFailure is the ModelError of a non-200 answer.
func httpFailure(model string, status int, msg string) *ModelError {
	code := wire.CodeGenerationFailed
	switch status {
	case http.StatusTooManyRequests:
		code = wire.CodeRateLimited
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		code = wire.CodeTimeout
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return &ModelError{Model: model, Code: code, Status: status, Msg: fmt.Sprintf("HTTP %d: %s", status, msg)}
}

// streamEvent is one streaming event.

// coalescer turns a stream's deltas into bounded stream_chunk events.
type coalescer struct {
	sink StreamSink
	now  func() time.Time

	buf       strings.Builder
	deltas    int       // deltas in buf
	opened    time.Time // when buf's first delta arrived
	chunks    int       // stream_chunk events handed over
	recorded  int       // bytes of text recorded
	bytes     int       // bytes of text received
	total     int       // deltas received
	truncated bool
}

// add takes one delta of text.
func (c *coalescer) add(text string) error {
	if text == "" {
		return nil
	}
	now := c.now()
	if c.deltas == 0 {
		c.opened = now
	}
	c.bytes += len(text)
	c.total++
	c.deltas++
	if room := StreamMaxRecordBytes - c.recorded - c.buf.Len(); room < len(text) {
		text = cutUTF8(text, max(room, 0))
		c.truncated = true
	}
	c.buf.WriteString(text)
	if c.chunks == StreamMaxChunks-1 {
		return nil // the last chunk takes the rest
	}
	if c.buf.Len() >= StreamChunkMinBytes || now.Sub(c.opened) >= StreamChunkMaxWait {
		return c.flush()
	}
	return nil
}

// flush hands over the chunk being built, if it has any delta.
func (c *coalescer) flush() error {
	if c.deltas == 0 {
		return nil
	}
	chunk := xctevent.StreamChunk{Index: c.chunks, Content: c.buf.String(), Tokens: c.deltas}
	c.recorded += c.buf.Len()
	c.chunks++
	c.buf.Reset()
	c.deltas = 0
	return c.sink(chunk)
}

// cutUTF8 is s cut to at most n bytes on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sseChunk is one streamed chat completion chunk.
type sseChunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// Streaming reports whether the adapter streams (OpenAIConfig.Stream).
func (p *openAIProposer) Streaming() bool { return p.cfg.Stream }

// ProposeStream asks the server for a streamed chat completion ("stream":
// true, server-sent events) and records it through sink. A server that
// answers with a whole (not streamed) completion is read as Propose
// reads it, with no streaming events.
func (p *openAIProposer) ProposeStream(ctx context.Context, req *xctv1.ProposeRequest, sink StreamSink) (*xctv1.ProposeResponse, error) {
	resp, err := p.post(ctx, req, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, p.failure(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return p.completion(resp)
	}
	now := p.now
	if now == nil {
		now = time.Now
	}
	started := now()
	if err := sink(xctevent.StreamStart{
		Model: p.model, ExpectedChunks: streamExpectedUnknown,
		Coalesce: xctevent.Coalesce{MinBytes: StreamChunkMinBytes, MaxWaitMS: StreamChunkMaxWait.Milliseconds(), MaxChunks: StreamMaxChunks, MaxRecordedBytes: StreamMaxRecordBytes},
	}); err != nil {
		return nil, err
	}
	c := &coalescer{sink: sink, now: now}
	var out strings.Builder
	model := ""
	var usage *xctv1.Usage
	finish := ""
	status, fail := streamStatusCut, error(nil)
	sinkErr := error(nil)
	onChunk := func(ch *sseChunk) error {
		if ch.Error != nil {
			return streamError(p.model, ch.Error.Message, ch.Error.Type, ch.Error.Code)
		}
		if ch.Model != "" {
			model = ch.Model
		}
		if ch.Usage != nil {
			usage = &xctv1.Usage{InputTokens: ch.Usage.PromptTokens, OutputTokens: ch.Usage.CompletionTokens}
		}
		if len(ch.Choices) == 0 {
			return nil // the usage chunk has none
		}
		choice := ch.Choices[0] // one decision: the first choice only
		if out.Len()+len(choice.Delta.Content) > int(p.cfg.MaxResponseBytes) {
			return &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: fmt.Sprintf("streamed answer is larger than %d bytes", p.cfg.MaxResponseBytes)}
		}
		out.WriteString(choice.Delta.Content)
		if err := c.add(choice.Delta.Content); err != nil {
			sinkErr = err
			return err
		}
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			finish = *choice.FinishReason
		}
		return nil
	}
	done, err := readSSE(resp.Body, onChunk)
	switch {
	case sinkErr != nil:
		return nil, sinkErr
	case err != nil:
		var me *ModelError
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			status, fail = streamStatusCut, &ModelError{Model: p.model, Code: wire.CodeTimeout, Msg: "the stream was cut at the deadline", Err: ctx.Err()}
		case ctx.Err() != nil:
			status, fail = streamStatusCut, &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: "the stream was cancelled", Err: ctx.Err()}
		case errors.As(err, &me):
			status, fail = streamStatusError, me
		default:
			status, fail = streamStatusError, &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: err.Error(), Err: err}
		}
	case !done:
		fail = &ModelError{Model: p.model, Code: wire.CodeGenerationFailed, Msg: "the stream ended before [DONE]"}
	default:
		status = streamStatusOK
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	end := xctevent.StreamEnd{
		TotalChunks: c.chunks, Deltas: c.total, Bytes: c.bytes, DurationMS: durationMS(now().Sub(started)), Status: status,
		TotalTokens: int64(c.total), FinishReason: finish, Truncated: c.truncated,
	}
	if usage != nil {
		end.TotalTokens = usage.OutputTokens
		end.Usage = &xctevent.Tokens{Input: usage.InputTokens, Output: usage.OutputTokens}
	}
	if fail != nil {
		end.Error, end.Code = fail.Error(), FailureCode(fail)
		if me := (*ModelError)(nil); errors.As(fail, &me) {
			me.Usage = &xctv1.Usage{OutputTokens: end.TotalTokens}
			if usage != nil {
				me.Usage = usage
			}
		}
	}
	if err := sink(end); err != nil {
		return nil, err
	}
	tokens := end.TotalTokens
	if fail != nil {
		return nil, fail
	}
	if model == "" {
		model = p.model
	}
	if usage == nil {
		usage = &xctv1.Usage{OutputTokens: tokens}
	}
	return &xctv1.ProposeResponse{Output: out.String(), Model: model, Usage: usage}, nil
}

// streamError is the ModelError of an error the server sent mid-stream.
func streamError(model, msg, typ string, code any) *ModelError {
	c := wire.CodeGenerationFailed
	if s := strings.ToLower(fmt.Sprint(typ, " ", code)); strings.Contains(s, "rate_limit") || strings.Contains(s, "429") {
		c = wire.CodeRateLimited
	}
	if msg == "" {
		msg = "an error without a message"
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return &ModelError{Model: model, Code: c, Msg: "error in the stream: " + msg}
}

// errMalformedSSE marks a stream that is not server-sent events of chat
// completion chunks.
var errMalformedSSE = errors.New("malformed server-sent events")

// readSSE reads server-sent events (the WHATWG event stream format) from
// r and hands each data payload, decoded as a chat completion chunk, to
// on. It returns whether [DONE] was read. Comments and other fields are
// skipped; a data payload that is not JSON, a line longer than 1 MiB or
// bytes that are not UTF-8 are errMalformedSSE, naming the line.
func readSSE(r io.Reader, on func(*sseChunk) error) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELineBytes)
	var data bytes.Buffer
	line, hasData := 0, false
	dispatch := func() (bool, error) {
		if !hasData {
			return false, nil
		}
		payload := bytes.TrimSuffix(data.Bytes(), []byte("\n"))
		data.Reset()
		hasData = false
		if string(payload) == "[DONE]" {
			return true, nil
		}
		var ch sseChunk
		if err := json.Unmarshal(payload, &ch); err != nil {
			return false, fmt.Errorf("%w: the event ending at line %d is not a JSON chunk: %w", errMalformedSSE, line, err)
		}
		return false, on(&ch)
	}
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if !utf8.Valid(b) {
			return false, fmt.Errorf("%w: line %d is not UTF-8", errMalformedSSE, line)
		}
		if len(b) == 0 {
			done, err := dispatch()
			if done || err != nil {
				return done, err
			}
			continue
		}
		if b[0] == ':' {
			continue // a comment (keep-alive)
		}
		field, value, _ := bytes.Cut(b, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) == "data" {
			data.Write(value)
			data.WriteByte('\n')
			hasData = true
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return false, fmt.Errorf("%w: line %d is longer than %d bytes", errMalformedSSE, line+1, maxSSELineBytes)
		}
		return false, fmt.Errorf("the stream broke: %w", err)
	}
	// The stream ended: an event without its blank line still counts.
	return dispatch()
}
