package validator_test

import (
	"context"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/services/validator"
)

// TestTouchesCoversATreesParents: a rule keeping a nested directory for a
// human, written as a prefix check (`p.matches("^deploy/prod(/|$)")` over
// path, from and to), let its tree change with no human: fs.move deploy →
// old (a move of a parent matches no prefix), fs.write old/prod/app.yaml,
// fs.move old → deploy; or fs.delete deploy with recursive. Each step was
// allowed. p.touches(dir) is true when acting on p, as a tree, acts on dir
// or anything in it: the parents' moves and deletes match too. (On main
// the policy did not compile: there was no such function.)
func TestTouchesCoversATreesParents(t *testing.T) {
	schema := `{"type": "object"}`
	cat := catalog.Static(
		&xctv1.ToolDescriptor{Name: "fs.write", InputSchema: schema, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		&xctv1.ToolDescriptor{Name: "fs.move", InputSchema: schema, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
		&xctv1.ToolDescriptor{Name: "fs.delete", InputSchema: schema, Effect: xctv1.Effect_EFFECT_REVERSIBLE},
	)
	policy := writeFile(t, "policy.yaml", `rules:
  - {id: allow-reversible, effect: allow, effects: [reversible]}
  - id: prod-is-kept
    effect: deny
    tools: ["fs.*"]
    when: >-
      [has(args.path) ? args.path : "", has(args.from) ? args.from : "", has(args.to) ? args.to : ""]
      .exists(p, p.touches("deploy/prod"))
`)
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: policy}, cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		tool  string
		args  map[string]any
		allow bool
	}{
		{"fs.move", map[string]any{"from": "deploy", "to": "old"}, false},
		{"fs.move", map[string]any{"from": "old", "to": "deploy"}, false},
		{"fs.delete", map[string]any{"path": "deploy", "recursive": true}, false},
		{"fs.write", map[string]any{"path": "deploy/prod/app.yaml", "content": "x"}, false},
		{"fs.move", map[string]any{"from": "x", "to": "deploy/prod"}, false},
		{"fs.move", map[string]any{"from": "x", "to": "deploy/./prod/y"}, false}, // judged as the path it names
		{"fs.delete", map[string]any{"path": "."}, false},
		{"fs.write", map[string]any{"path": "deploy/production.txt", "content": "x"}, true},
		{"fs.move", map[string]any{"from": "deploy/staging", "to": "deploy/staging-old"}, true},
		{"fs.write", map[string]any{"path": "deployment/prod/x", "content": "x"}, true},
	} {
		resp, err := s.Validate(context.Background(), stepRequest(t, "touch-run", i+1, c.tool, c.args))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetVerdict().GetDecision() == xctv1.VerdictDecision_VERDICT_DECISION_ALLOW; got != c.allow {
			t.Errorf("%s %v: allowed %v, want %v (%v)", c.tool, c.args, got, c.allow, resp.GetVerdict().GetReasons())
		}
	}
}
