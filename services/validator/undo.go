package validator

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// undoTool is the system tool of a rollback's steps. Its arguments name the
// step to undo and the actions of that step's compensation (the executor
// lists them, and refuses an undo whose compensation differs).
const undoTool = "xct.undo"

// reasonUndo is the builtin reason of an undo whose actions cannot be
// judged.
const reasonUndo = "undo"

// undoAsTool is the fs tool each undo operation amounts to: putting back
// what the step removed or replaced writes it, removing what the step
// created deletes it, renaming an entry back moves it.
var undoAsTool = map[string]string{"restore": "fs.write", "remove": "fs.delete", "rename": "fs.move"}

// judgeUndo judges an undo as the changes it makes. out is the policy's
// judgement of the xct.undo step itself; each of its actions is then
// judged by the same policy as the fs tool it amounts to, for the same run
// (fs.write of the path for a restore, fs.delete for a remove, fs.move
// from..to for a rename), so an undo needs what the change it makes would
// need: denied if any action is denied, a human's approval if any needs
// one, allowed only if all are. The written content of a restore is not
// known here: a rule on args.content cannot evaluate, and a deny rule that
// cannot evaluate denies (fail closed).
func (s *Service) judgeUndo(ctx context.Context, p Policy, in *Input, out Outcome) Outcome {
	if out.Decision != xctv1.VerdictDecision_VERDICT_DECISION_ALLOW && out.Decision != xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
		return out
	}
	deny := func(msg string) Outcome {
		return Outcome{
			Decision: xctv1.VerdictDecision_VERDICT_DECISION_DENY,
			Reasons:  slices.Concat(out.Reasons, []*xctv1.Reason{{RuleId: reasonUndo, Message: msg}}),
			Message:  msg,
		}
	}
	actions, ok := in.Args["actions"].([]any)
	if !ok {
		return deny("the undo names no actions, so what it would change cannot be judged")
	}
	cat := s.catalog.Load()
	if cat == nil && !s.bareTools {
		return deny("the tool catalog is not loaded, so the undo's actions cannot be judged")
	}
	judged := out
	for i, raw := range actions {
		a, _ := raw.(map[string]any)
		op, _ := a["op"].(string)
		path, _ := a["path"].(string)
		from, _ := a["from"].(string)
		tool, known := undoAsTool[op]
		if !known || path == "" || (op == "rename") != (from != "") {
			return deny(fmt.Sprintf("undo action %d is not one that can be judged (op %q)", i+1, truncate(op, maxToolNameInMsg)))
		}
		args := map[string]any{"path": path}
		what := fmt.Sprintf("undo action %d (%s %s) is judged as %s of %s", i+1, op, path, tool, path)
		if op == "rename" {
			args = map[string]any{"from": from, "to": path}
			what = fmt.Sprintf("undo action %d (rename %s back to %s) is judged as fs.move from %s to %s", i+1, from, path, from, path)
		}
		desc, ok := &xctv1.ToolDescriptor{Name: tool}, true // a recheck without a catalog: no effect class, as its other steps
		if cat != nil {
			desc, ok = cat.Get(tool)
		}
		if !ok {
			return deny(what + ", which is not in the catalog, so it is denied")
		}
		st, err := structpb.NewStruct(args)
		if err != nil {
			return deny(what + ": " + err.Error())
		}
		o, err := p.Evaluate(ctx, &Input{
			Run: in.Run, Step: in.Step, StepID: in.StepID, Args: args, Tool: desc, Now: in.Now,
			Proposal: &xctv1.NextStep{Tool: tool, Arguments: st, Goal: in.Proposal.GetGoal()},
		})
		if err != nil {
			s.log.Warn("policy evaluation of an undo action failed; undo denied", "step_id", in.StepID, "action", i+1, "err", err)
			return deny(what + ", and the policy could not evaluate it, so it is denied")
		}
		switch o.Decision {
		case xctv1.VerdictDecision_VERDICT_DECISION_ALLOW:
		case xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL:
			msg := o.Message
			if msg == "" {
				msg = "it needs a human's approval"
			}
			if judged.Decision != xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL {
				judged = Outcome{Decision: o.Decision, Reasons: slices.Clone(out.Reasons), Message: what + ": " + msg, Code: o.Code, ApprovalTTL: o.ApprovalTTL, Details: o.Details}
			} else if o.ApprovalTTL > 0 && (judged.ApprovalTTL <= 0 || o.ApprovalTTL < judged.ApprovalTTL) {
				judged.ApprovalTTL = o.ApprovalTTL
			}
			judged.Reasons = slices.Concat(judged.Reasons, o.Reasons)
		case xctv1.VerdictDecision_VERDICT_DECISION_DENY:
			msg := o.Message
			if msg == "" {
				msg = "the policy denies it"
			}
			return Outcome{
				Decision: o.Decision, Reasons: slices.Concat(out.Reasons, o.Reasons),
				Message: what + ": " + msg, Code: o.Code, Details: o.Details,
			}
		default:
			return deny(what + ", and the policy reached no valid decision, so it is denied")
		}
	}
	return judged
}

// isUndo says whether a judged proposal is a rollback's undo.
func isUndo(in *Input) bool {
	return in.Tool.GetName() == undoTool && wire.IsSystemTool(in.Proposal.GetTool())
}
