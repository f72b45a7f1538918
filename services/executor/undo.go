package executor

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// UndoToolName is the tool that rolls back one earlier step. A rollback is a
// sequence of ordinary governed steps of this tool: validated by policy,
// executed at most once, recorded on the chain.
const UndoToolName = "xct.undo"

// undoTool applies the compensation an earlier step of a reversible tool
// stored before it acted. It refuses when the step has none (an
// irreversible tool), did not succeed, or the workspace changed since the
// step (the compensation checks what it restores over).
//
// The undo names the compensation's actions in its arguments ("actions":
// each op, path and, for a rename, from; UndoActions), which the
// orchestrator learns from the tool's preview: the validator judges each
// as the fs tool it amounts to, and the allow verdict's argument digest
// covers them. The undo refuses a step whose compensation is not exactly
// those actions, so it never does what was not judged.
type undoTool struct{ s *Service }

const undoSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "step_id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$", "description": "The id of the succeeded step to undo."},
    "actions": {
      "type": "array",
      "description": "The compensation's actions, as the tool's preview lists them: the undo refuses a step whose compensation differs.",
      "items": {
        "type": "object",
        "properties": {
          "op": {"enum": ["remove", "restore", "rename"]},
          "path": {"type": "string"},
          "from": {"type": "string"}
        },
        "required": ["op", "path"],
        "additionalProperties": false
      }
    }
  },
  "required": ["step_id", "actions"],
  "additionalProperties": false
}`

func (t *undoTool) Descriptor() *xctv1.ToolDescriptor {
	return &xctv1.ToolDescriptor{
		Name:        UndoToolName,
		Description: "Undo the effect of an earlier succeeded step of a reversible tool, if nothing changed it since. Used by rollbacks.",
		InputSchema: undoSchema,
		Effect:      xctv1.Effect_EFFECT_REVERSIBLE,
	}
}

// UndoResult is what xct.undo returns.
type UndoResult struct {
	StepID  string `json:"step_id"`
	Tool    string `json:"tool"`
	Actions int    `json:"actions"`
}

func (t *undoTool) Invoke(ctx context.Context, args map[string]any) (any, *xctv1.Error) {
	if e := onlyArgs(args, "step_id", "actions"); e != nil {
		return nil, e
	}
	id, e := stringArg(args, "step_id", nil)
	if e != nil {
		return nil, e
	}
	judged, ok := args["actions"].([]any)
	if !ok {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "actions is required: the list of the compensation's actions the undo was judged on")
	}
	rec, c, e := t.compensation(ctx, id)
	if e != nil {
		return nil, e
	}
	// A rollback undoes only steps of the run being rolled back: the undo
	// step's own run must be the target's.
	if g, ok := ctx.Value(gateKey{}).(*gate); !ok || g.runID == "" || g.runID != rec.GetRunId() {
		return nil, wire.Errorf(wire.CodePermissionDenied, "step %s belongs to another run: a rollback undoes only the steps of the run it rolls back", id)
	}
	// The verdict covers the actions named in the arguments: act only if
	// they are the compensation's.
	if !reflect.DeepEqual(judged, UndoActions(c)) {
		return nil, wire.Errorf(wire.CodePermissionDenied, "step %s was not undone: its compensation is not the actions the undo was judged on", id)
	}
	if e := Commit(ctx); e != nil {
		return nil, e
	}
	if err := t.s.ws.undo(c); err != nil {
		if errors.Is(err, ErrUndoConflict) {
			return nil, wire.Errorf(wire.CodeToolFailure, "step %s was not undone: the workspace changed since it ran (%v)", id, err)
		}
		return nil, wire.Errorf(wire.CodeToolFailure, "undo step %s: %v", id, err)
	}
	return UndoResult{StepID: id, Tool: rec.GetTool(), Actions: len(c.Undo)}, nil
}

// Preview lists the actions of the step's compensation (UndoActions, as
// JSON, kind "undo"): what the undo would change, for the orchestrator to
// name in the undo's arguments and for an approver. Paths and operations
// only; no saved content.
func (t *undoTool) Preview(ctx context.Context, args map[string]any) (*xctv1.Preview, *xctv1.Error) {
	if e := onlyArgs(args, "step_id", "actions"); e != nil {
		return nil, e
	}
	id, e := stringArg(args, "step_id", nil)
	if e != nil {
		return nil, e
	}
	_, c, e := t.compensation(ctx, id)
	if e != nil {
		return nil, e
	}
	out, err := json.Marshal(UndoActions(c))
	if err != nil {
		return nil, wire.Errorf(wire.CodeToolFailure, "list the compensation of step %s: %v", id, err)
	}
	return &xctv1.Preview{Kind: UndoPreviewKind, Content: string(out)}, nil
}

// UndoPreviewKind is the kind of xct.undo's preview: a JSON array of the
// actions (UndoActions).
const UndoPreviewKind = "undo"

// UndoActions are c's actions as the undo's arguments name them: op and
// path, and from for a rename, as JSON values.
func UndoActions(c *Compensation) []any {
	out := make([]any, 0, len(c.Undo))
	for _, a := range c.Undo {
		m := map[string]any{"op": a.Op, "path": a.Path}
		if a.From != "" {
			m["from"] = a.From
		}
		out = append(out, m)
	}
	return out
}

// compensation reads the record of the succeeded step id and the
// compensation of its last attempt.
func (t *undoTool) compensation(ctx context.Context, id string) (*xctv1.StepRecord, *Compensation, *xctv1.Error) {
	if !validStepID(id) {
		return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "step_id %q is not a step id", id)
	}
	store, err := t.s.store()
	if err != nil {
		return nil, nil, wire.Errorf(wire.CodeToolFailure, "step records unavailable: %v", err)
	}
	rec, _, err := store.Get(ctx, id)
	if errors.Is(err, ErrStepNotFound) {
		return nil, nil, wire.Errorf(wire.CodeNotFound, "no record of step %s", id)
	}
	if err != nil {
		return nil, nil, wire.Errorf(wire.CodeToolFailure, "read step %s: %v", id, err)
	}
	if rec.GetState() != xctv1.StepRecordState_STEP_RECORD_STATE_SUCCEEDED {
		return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "step %s (%s) did not succeed (%s): there is nothing to undo", id, rec.GetTool(), rec.GetState())
	}
	var comp *xctv1.StepCompensation
	for _, c := range rec.GetCompensations() {
		if c.GetAttempt() == rec.GetAttempt() {
			comp = c
		}
	}
	if comp == nil {
		return nil, nil, wire.Errorf(wire.CodeInvalidArgument, "step %s (%s) left no compensation: it cannot be undone", id, rec.GetTool())
	}
	blob, err := store.Blob(ctx, comp.GetBlob())
	if err != nil {
		return nil, nil, wire.Errorf(wire.CodeToolFailure, "read the compensation of step %s: %v", id, err)
	}
	if checksum(blob) != comp.GetChecksum() {
		return nil, nil, wire.Errorf(wire.CodeToolFailure, "the compensation of step %s does not match its checksum", id)
	}
	var c Compensation
	if err := json.Unmarshal(blob, &c); err != nil {
		return nil, nil, wire.Errorf(wire.CodeToolFailure, "the compensation of step %s is unreadable: %v", id, err)
	}
	return rec, &c, nil
}
