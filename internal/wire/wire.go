// Package wire is the model-facing JSON contract of XCT protocol §3-4: it
// parses a model's decision strictly and renders the system's response, and
// it defines the error codes every service returns to models.
//
// Strict means: a JSON object with exactly one of "next_step" or "done";
// next_step has a non-empty "tool", an "arguments" object, an optional
// "goal" and an optional "confidence" (0..1, the model's confidence in the
// facts the step relies on, which the validator gates on); done is true with an optional "message"; no other keys, no
// duplicate keys, nothing after the object, and at most MaxDecisionBytes.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// MaxDecisionBytes is the largest model output parsed.
const MaxDecisionBytes = 256 << 10

// DecisionError says why a model output is not a valid decision. Its message
// goes back to the model, so it names the problem plainly.
type DecisionError struct{ Reason string }

func (e *DecisionError) Error() string { return "invalid decision: " + e.Reason }

func invalid(format string, args ...any) error {
	return &DecisionError{Reason: fmt.Sprintf(format, args...)}
}

// ParseDecision parses one model output.
func ParseDecision(raw []byte) (*xctv1.Decision, error) {
	d, _, err := ParseDecisionArgs(raw)
	return d, err
}

// ParseDecisionArgs is ParseDecision that also returns a next step's
// arguments as JSON values (what the decision's Arguments AsMap gives: the
// same map, without converting them back). The map is the caller's.
func ParseDecisionArgs(raw []byte) (*xctv1.Decision, map[string]any, error) {
	d, args, err := parseDecision(raw)
	if err != nil {
		return nil, nil, err
	}
	return d, args, nil
}

func parseDecision(raw []byte) (*xctv1.Decision, map[string]any, error) {
	if len(raw) > MaxDecisionBytes {
		return nil, nil, invalid("output is %d bytes, the limit is %d", len(raw), MaxDecisionBytes)
	}
	// The decision, next_step and arguments objects are three levels;
	// the arguments may nest MaxDepth levels below their own object.
	if d := Depth(raw); d > MaxDepth+2 {
		return nil, nil, invalid("the output is %v (it nests %d levels; tool arguments may nest at most %d)", ErrTooDeep{MaxDepth}, d, MaxDepth)
	}
	top, err := strictObject(raw)
	if err != nil {
		return nil, nil, err
	}
	_, hasNext := top["next_step"]
	_, hasDone := top["done"]
	switch {
	case hasNext && hasDone:
		return nil, nil, invalid(`exactly one of "next_step" or "done" is allowed, both were given`)
	case !hasNext && !hasDone:
		return nil, nil, invalid(`the object must have "next_step" or "done"`)
	}
	if hasDone {
		for k := range top {
			if k != "done" && k != "message" {
				return nil, nil, invalid("unknown key %q next to \"done\"", k)
			}
		}
		var done bool
		if err := json.Unmarshal(top["done"], &done); err != nil || !done {
			return nil, nil, invalid(`"done" must be true`)
		}
		var msg string
		if m, ok := top["message"]; ok {
			if err := json.Unmarshal(m, &msg); err != nil {
				return nil, nil, invalid(`"message" must be a string`)
			}
		}
		return &xctv1.Decision{Kind: &xctv1.Decision_Done{Done: &xctv1.Done{Message: msg}}}, nil, nil
	}
	for k := range top {
		if k != "next_step" {
			return nil, nil, invalid("unknown key %q next to \"next_step\"", k)
		}
	}
	step, err := strictObject(top["next_step"])
	if err != nil {
		return nil, nil, invalid(`"next_step" must be an object: %s`, reasonOf(err))
	}
	for k := range step {
		if k != "tool" && k != "arguments" && k != "goal" && k != "confidence" {
			return nil, nil, invalid("unknown key %q in \"next_step\"", k)
		}
	}
	var tool string
	if err := json.Unmarshal(step["tool"], &tool); err != nil || tool == "" {
		return nil, nil, invalid(`"next_step.tool" must be a non-empty string`)
	}
	rawArgs, ok := step["arguments"]
	if !ok {
		return nil, nil, invalid(`"next_step.arguments" is required (use {} for none)`)
	}
	if _, err := strictObject(rawArgs); err != nil {
		return nil, nil, invalid(`"next_step.arguments" must be an object: %s`, reasonOf(err))
	}
	var argMap map[string]any
	if err := json.Unmarshal(rawArgs, &argMap); err != nil {
		return nil, nil, invalid(`"next_step.arguments": %v`, err)
	}
	args, err := structpb.NewStruct(argMap)
	if err != nil {
		return nil, nil, invalid(`"next_step.arguments": %v`, err)
	}
	var goal string
	if g, ok := step["goal"]; ok {
		if err := json.Unmarshal(g, &goal); err != nil {
			return nil, nil, invalid(`"next_step.goal" must be a string`)
		}
	}
	ns := &xctv1.NextStep{Tool: tool, Arguments: args, Goal: goal}
	if c, ok := step["confidence"]; ok {
		var conf float64
		if err := json.Unmarshal(c, &conf); err != nil || conf < 0 || conf > 1 {
			return nil, nil, invalid(`"next_step.confidence" must be a number from 0 to 1`)
		}
		ns.Confidence = &conf
	}
	return &xctv1.Decision{Kind: &xctv1.Decision_NextStep{NextStep: ns}}, argMap, nil
}

func reasonOf(err error) string {
	var de *DecisionError
	if errors.As(err, &de) {
		return de.Reason
	}
	return err.Error()
}

// strictObject decodes a JSON object into its members, rejecting anything
// that is not exactly one object, and duplicate keys at its top level.
// Valid JSON that is one object without duplicate keys (every decision a
// model gets right) is split by objectMembers; anything else goes through
// the decoder, whose error is the one the model is told.
func strictObject(raw []byte) (map[string]json.RawMessage, error) {
	if out, ok := objectMembers(raw); ok {
		return out, nil
	}
	return strictObjectDecoded(raw)
}

// strictObjectDecoded is strictObject by encoding/json's token decoder.
func strictObjectDecoded(raw []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, invalid("output is empty, a JSON object was expected")
		}
		return nil, invalid("not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid("a JSON object was expected, got %s", describeToken(tok))
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, invalid("not JSON: %v", err)
		}
		key := kt.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, invalid("not JSON: %v", err)
		}
		if _, dup := out[key]; dup {
			return nil, invalid("duplicate key %q", key)
		}
		out[key] = val
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid("not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("unexpected text after the JSON object")
	}
	return out, nil
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return strconv.Quote(t.String())
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// EncodeDecision renders a decision in the spec's JSON shape.
func EncodeDecision(d *xctv1.Decision) []byte {
	var v any
	switch k := d.GetKind().(type) {
	case *xctv1.Decision_NextStep:
		var args map[string]any
		if k.NextStep.GetArguments() != nil {
			args = k.NextStep.GetArguments().AsMap()
		}
		v = nextStepJSON(k.NextStep.GetTool(), args, k.NextStep.GetGoal(), k.NextStep.Confidence)
	case *xctv1.Decision_Done:
		v = map[string]any{"done": true, "message": k.Done.GetMessage()}
	default:
		v = map[string]any{}
	}
	out, _ := json.Marshal(v)
	return out
}

// EncodeNextStep renders a proposal in the spec's decision shape from its
// fields (the orchestrator's transcript, from the recorded step_start).
//
// The bytes are json.Marshal's of nextStepJSON (keys in order, its
// escaping), written around the parts json.Marshal encodes, without the
// two maps and their sorting.
func EncodeNextStep(tool string, args map[string]any, goal string, confidence *float64) []byte {
	var a []byte
	if args == nil {
		a = []byte("{}")
	} else {
		var err error
		if a, err = json.Marshal(args); err != nil {
			return nil
		}
	}
	out := make([]byte, 0, len(a)+len(tool)+len(goal)+64)
	out = append(out, `{"next_step":{"arguments":`...)
	out = append(out, a...)
	if confidence != nil {
		c, err := json.Marshal(*confidence)
		if err != nil {
			return nil
		}
		out = append(out, `,"confidence":`...)
		out = append(out, c...)
	}
	out = append(out, `,"goal":`...)
	out = appendJSONString(out, goal)
	out = append(out, `,"tool":`...)
	out = appendJSONString(out, tool)
	return append(out, "}}"...)
}

// appendJSONString appends s as json.Marshal writes a string.
func appendJSONString(out []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		out = append(out, '"')
		out = append(out, s...)
		return append(out, '"')
	}
	q, _ := json.Marshal(s) // a string always encodes
	return append(out, q...)
}

func nextStepJSON(tool string, args map[string]any, goal string, confidence *float64) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	step := map[string]any{"tool": tool, "arguments": args, "goal": goal}
	if confidence != nil {
		step["confidence"] = *confidence
	}
	return map[string]any{"next_step": step}
}

// EncodeSuccess renders a tool's result as model-facing JSON text.
// The bytes are json.Marshal's of successJSON, without the map.
func EncodeSuccess(result any) []byte {
	r, err := json.Marshal(result)
	if err != nil {
		return nil
	}
	out := make([]byte, 0, len(r)+32)
	out = append(out, `{"result":`...)
	out = append(out, r...)
	return append(out, `,"status":"success"}`...)
}

func successJSON(result any) map[string]any {
	return map[string]any{"status": "success", "result": result}
}

// ErrorFields are an error signal's fields, as an error event records
// them.
type ErrorFields struct {
	Code, Message, Category, Type, SuggestedAction string
	Recoverable                                    bool
	Details                                        map[string]any
}

// EncodeErrorFields renders an error signal given by its fields as
// model-facing JSON text (the shape of ErrorJSON). Details is not changed.
func EncodeErrorFields(f ErrorFields) []byte {
	out, _ := json.Marshal(errorFieldsJSON(f))
	return out
}

func errorFieldsJSON(f ErrorFields) map[string]any {
	details := make(map[string]any, len(f.Details)+4)
	for k, v := range f.Details {
		details[k] = v
	}
	details["category"] = f.Category
	details["type"] = f.Type
	details["recoverable"] = f.Recoverable
	details["suggested_action"] = f.SuggestedAction
	return map[string]any{"status": "error", "code": f.Code, "message": f.Message, "details": details}
}

// ResponseJSON is a system response in the spec's shape (§4), with the
// stable code next to the message as in the XCT README's example and the
// LCTL taxonomy in details.
func ResponseJSON(r *xctv1.Response) map[string]any {
	switch o := r.GetOutcome().(type) {
	case *xctv1.Response_Success:
		return successJSON(o.Success.GetResult().AsInterface())
	case *xctv1.Response_Error:
		return ErrorJSON(o.Error)
	}
	return ErrorJSON(Errorf(CodeToolFailure, "empty response"))
}

// ErrorJSON renders an error signal in the model-facing shape.
func ErrorJSON(e *xctv1.Error) map[string]any {
	f := ErrorFields{
		Code: e.GetCode(), Message: e.GetMessage(), Category: e.GetCategory(), Type: e.GetType(),
		SuggestedAction: e.GetSuggestedAction(), Recoverable: e.GetRecoverable(),
	}
	if e.GetDetails() != nil {
		f.Details = e.GetDetails().AsMap()
	}
	return errorFieldsJSON(f)
}

// EncodeResponse renders a response as model-facing JSON text.
func EncodeResponse(r *xctv1.Response) []byte {
	out, _ := json.Marshal(ResponseJSON(r))
	return out
}

// StepID is a step's identity and idempotency key: SHA-256 over the
// canonical JSON of (chain id, step number, tool, arguments), 32 hex digits.
// The same proposal at the same step of the same run always has the same id;
// changed arguments give a new one.
func StepID(chainID string, step int, tool string, args *structpb.Struct) string {
	var argMap map[string]any
	if args != nil {
		argMap = args.AsMap()
	}
	return StepIDOf(chainID, step, tool, argMap)
}

// StepIDOf is StepID for arguments already read as JSON values (a nil map
// is no arguments).
func StepIDOf(chainID string, step int, tool string, args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	c, err := lctl.Canonical(args)
	if err != nil {
		// structpb values are always JSON; this cannot happen.
		panic(fmt.Sprintf("step id: %v", err))
	}
	id, err := StepIDOfCanonical(chainID, step, tool, c)
	if err != nil {
		panic(fmt.Sprintf("step id: %v", err))
	}
	return id
}

// StepIDOfCanonical is StepIDOf from arguments already in canonical form:
// the canonical JSON of [chain, step, tool, arguments] is that of each
// element, comma-separated, in brackets, so the arguments are not encoded
// again, and the head is written without boxing its three values.
func StepIDOfCanonical(chainID string, step int, tool string, canonical []byte) (string, error) {
	var scratch [128]byte
	head := append(scratch[:0], '[')
	head, err := appendCanonicalString(head, chainID)
	if err != nil {
		return "", err
	}
	head = append(head, ',')
	if head, err = appendCanonicalStep(head, step); err != nil {
		return "", err
	}
	head = append(head, ',')
	if head, err = appendCanonicalString(head, tool); err != nil {
		return "", err
	}
	head = append(head, ',')
	h := sha256.New()
	h.Write(head)
	h.Write(canonical)
	h.Write([]byte{']'})
	var sum [sha256.Size]byte
	var id [32]byte
	hex.Encode(id[:], h.Sum(sum[:0])[:16])
	return string(id[:]), nil
}

// appendCanonicalString appends the canonical JSON of s: itself in quotes
// when it has only printable ASCII other than the quote and the backslash
// (what a run id and a tool name are), lctl.Canonical's form otherwise.
func appendCanonicalString(b []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			enc, err := lctl.Canonical(s)
			return append(b, enc...), err
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// appendCanonicalStep appends the canonical JSON of float64(step): its
// decimal digits while the float is the integer exactly, lctl.Canonical's
// form otherwise.
func appendCanonicalStep(b []byte, step int) ([]byte, error) {
	if step > -1<<53 && step < 1<<53 {
		return strconv.AppendInt(b, int64(step), 10), nil
	}
	enc, err := lctl.Canonical(float64(step))
	return append(b, enc...), err
}

// SystemToolPrefix starts the names of the system's own tools (xct.undo):
// they are not in a model's catalog and a model cannot propose them.
const SystemToolPrefix = "xct."

// IsSystemTool reports whether a tool is the system's own.
func IsSystemTool(name string) bool { return strings.HasPrefix(name, SystemToolPrefix) }
