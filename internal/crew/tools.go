package crew

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// SystemToolSchemas are the JSON Schemas (draft 2020-12) of the system
// tools' arguments: what the catalog shows the model and the validator
// checks, like any tool's. Extra fact fields (severity, ...) go under
// fields.
var SystemToolSchemas = map[string]string{
	ToolHandoff: `{
  "type": "object",
  "properties": {
    "to": {"type": "string", "minLength": 1, "maxLength": 63, "description": "the agent to hand control to"},
    "summary": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "what the receiver should do, and why"}
  },
  "required": ["to", "summary"],
  "additionalProperties": false
}`,
	ToolFactsAdd: `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"},
    "text": {"type": "string", "minLength": 1, "maxLength": 8192},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "source": {"type": "string", "maxLength": 256},
    "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}, "maxItems": 32},
    "fields": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}, "maxProperties": 32}
  },
  "required": ["id", "text", "confidence"],
  "additionalProperties": false
}`,
	ToolFactsUpdate: `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"},
    "text": {"type": "string", "maxLength": 8192},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "reason": {"type": "string", "minLength": 1, "maxLength": 512},
    "source": {"type": "string", "maxLength": 256},
    "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}, "maxItems": 32},
    "fields": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}, "maxProperties": 32}
  },
  "required": ["id", "reason"],
  "additionalProperties": false
}`,
	ToolFactsQuery: `{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "SELECT * | fields [FROM facts] [WHERE ...] [ORDER BY ...] [LIMIT n]"}
  },
  "required": ["query"],
  "additionalProperties": false
}`,
}

// HandoffArgs are xct.handoff's arguments.
type HandoffArgs struct {
	To      string `json:"to"`
	Summary string `json:"summary"`
}

// QueryArgs are facts.query's arguments.
type QueryArgs struct {
	Query string `json:"query"`
}

type factArgs struct {
	ID         string         `json:"id"`
	Text       string         `json:"text"`
	Confidence *float64       `json:"confidence"`
	Source     string         `json:"source"`
	Tags       []string       `json:"tags"`
	Reason     string         `json:"reason"`
	Fields     map[string]any `json:"fields"`
}

func argsError(tool string, err error) *Signal {
	return signal("input_error", "invalid_format", "SCHEMA_INVALID", "fix_arguments", true, "%s: %v", tool, err)
}

// decodeArgs reads a proposal's arguments (as the codec gives them) into
// v, refusing fields v does not have.
func decodeArgs(tool string, args map[string]any, v any) *Signal {
	raw, err := json.Marshal(args)
	if err != nil {
		return argsError(tool, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return argsError(tool, fmt.Errorf("arguments: %w", err))
	}
	return nil
}

// ParseHandoff reads xct.handoff's arguments.
func ParseHandoff(args map[string]any) (HandoffArgs, *Signal) {
	var h HandoffArgs
	if sig := decodeArgs(ToolHandoff, args, &h); sig != nil {
		return h, sig
	}
	if h.To == "" || h.Summary == "" {
		return h, argsError(ToolHandoff, fmt.Errorf("to and summary are required"))
	}
	return h, nil
}

// ParseFactArgs reads facts.add or facts.update's arguments into the
// store's input (the store checks the values).
func ParseFactArgs(tool string, args map[string]any) (FactInput, *Signal) {
	var a factArgs
	if sig := decodeArgs(tool, args, &a); sig != nil {
		return FactInput{}, sig
	}
	if tool == ToolFactsAdd && a.Reason != "" {
		return FactInput{}, argsError(tool, fmt.Errorf("reason belongs to %s", ToolFactsUpdate))
	}
	for k := range a.Fields {
		if slices.Contains(eventFields, k) {
			return FactInput{}, factError(CodeInvalidFact, "invalid_format",
				"fact %s: field %q is a name the chain's readers take for the event's own (its step, its tool): name it otherwise", a.ID, k)
		}
	}
	return FactInput(a), nil
}

// eventFields are names a proposal's fact fields may not use besides the
// store's reserved ones: a fact's fields are at the top level of its
// fact_added / fact_modified data, where the chain's readers take these
// for the event's own (the debugger puts an event with data.step on that
// step, with its agent and verdict, and shows its data.tool). A member
// naming another's step number would have its fact drawn as that
// member's doing. They are refused when proposed, not when a chain is
// read back: a run whose chain holds one (written before) still resumes.
var eventFields = []string{"step", "step_id", "tool", "otel"}

// ParseQueryArgs reads facts.query's arguments.
func ParseQueryArgs(args map[string]any) (QueryArgs, *Signal) {
	var q QueryArgs
	if sig := decodeArgs(ToolFactsQuery, args, &q); sig != nil {
		return q, sig
	}
	if q.Query == "" {
		return q, argsError(ToolFactsQuery, fmt.Errorf("query is required"))
	}
	return q, nil
}
