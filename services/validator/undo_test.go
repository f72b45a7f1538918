package validator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/services/validator"
)

// TestUndoIsJudgedAsItsActions: a rollback's xct.undo is judged as the
// changes it makes, each action as the fs tool it amounts to, under the
// shipped policies: denied if any is denied, a human if any needs one,
// allowed only if all are.
func TestUndoIsJudgedAsItsActions(t *testing.T) {
	t.Parallel()
	tools := append(testTools(),
		&xctv1.ToolDescriptor{Name: "fs.delete", InputSchema: `{"type": "object"}`, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		&xctv1.ToolDescriptor{Name: "fs.move", InputSchema: `{"type": "object"}`, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		&xctv1.ToolDescriptor{Name: "xct.undo", InputSchema: `{"type": "object"}`, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
	)
	service := func(policy string) *validator.Service {
		if !filepath.IsAbs(policy) {
			policy = filepath.Join("..", "..", "examples", "policies", policy)
		}
		s, err := validator.NewWithCatalog(validator.Config{PolicyFile: policy}, catalog.Static(tools...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	act := func(op, path string, from ...string) any {
		m := map[string]any{"op": op, "path": path}
		if len(from) > 0 {
			m["from"] = from[0]
		}
		return m
	}
	const (
		allow = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
		ask   = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
		deny  = xctv1.VerdictDecision_VERDICT_DECISION_DENY
	)
	contentRule := filepath.Join(t.TempDir(), "content.yaml")
	if err := os.WriteFile(contentRule, []byte(`rules:
  - {id: allow-reversible, effect: allow, effects: [reversible]}
  - {id: no-truncating-writes, effect: deny, tools: ["fs.write"], when: 'args.content == ""'}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, policy string
		args         map[string]any
		want         xctv1.VerdictDecision
		rule, msg    string
	}{
		{"nothing to change", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{}}, allow, "", ""},
		{"remove a file", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{act("remove", "notes.txt")}}, allow, "", ""},
		{"restore under config", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{act("restore", "config/app.yaml")}},
			ask, "config-changes-need-approval", "fs.write of config/app.yaml"},
		{"one of two under config", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{act("remove", "notes.txt"), act("remove", "config/new.yaml")}},
			ask, "config-changes-need-approval", "undo action 2 (remove config/new.yaml) is judged as fs.delete"},
		{"rename back out of config", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{act("rename", "old.yaml", "config/app.yaml")}},
			ask, "config-moves-need-approval", "fs.move from config/app.yaml to old.yaml"},
		{"a path that is not plain", "config-approval.yaml", map[string]any{"step_id": "s", "actions": []any{act("restore", "a/../config/app.yaml")}},
			deny, "plain-paths-only", ""},
		{"remove under no-deletes", "no-deletes.yaml", map[string]any{"step_id": "s", "actions": []any{act("remove", "notes.txt")}},
			deny, "no-deletes", "deletes are not allowed"},
		// The content a restore writes is not known to the validator: a
		// deny rule on it cannot evaluate, and denies (fail closed)...
		{"restore under a rule on the content", contentRule, map[string]any{"step_id": "s", "actions": []any{act("restore", "notes.txt")}},
			deny, "no-truncating-writes", ""},
		// ...unless it asks first whether there is content, as the
		// shipped no-deletes.yaml does.
		{"restore under no-deletes", "no-deletes.yaml", map[string]any{"step_id": "s", "actions": []any{act("restore", "notes.txt")}}, allow, "", ""},
		{"protected path", "default.yaml", map[string]any{"step_id": "s", "actions": []any{act("restore", ".git/HEAD")}},
			deny, "protected-paths", ""},
		{"no actions named", "default.yaml", map[string]any{"step_id": "s"}, deny, "undo", "names no actions"},
		{"an unknown operation", "default.yaml", map[string]any{"step_id": "s", "actions": []any{act("chmod", "a")}}, deny, "undo", "not one that can be judged"},
		{"a rename without from", "default.yaml", map[string]any{"step_id": "s", "actions": []any{act("rename", "a")}}, deny, "undo", "not one that can be judged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := stepRequest(t, "run-1", 3, "xct.undo", tc.args)
			req.SystemStep = true
			resp, err := service(tc.policy).Validate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			v := resp.GetVerdict()
			if v.GetDecision() != tc.want || (tc.rule != "" && !slices.Contains(reasonIDs(v), tc.rule)) || !strings.Contains(v.GetError().GetMessage(), tc.msg) {
				t.Fatalf("verdict %s %v: %v", v.GetDecision(), reasonIDs(v), v.GetError())
			}
		})
	}
}
