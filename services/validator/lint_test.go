package validator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/services/validator"
)

// TestLint checks what lint reports, with file, line and rule id.
func TestLint(t *testing.T) {
	t.Parallel()
	const policy = `rate_limits:
  - {tool: "http.*", per_run: 10/1m}
rules:
  - id: no-deletes
    effect: deny
    tools: ["fs.delete", "fs.write"]
  - id: allow-write
    effect: allow
    tools: ["fs.write"]
  - id: no-shell
    effect: deny
    tools: ["shell.*"]
  - id: approve-shell-exec
    effect: require_approval
    tools: ["shell.exec"]
    when: 'args.command.startsWith("rm")'
  - id: allow-read
    effect: allow
    effects: [read]
  - id: allow-read-again
    effect: allow
    tools: ["fs.read"]
    effects: [read]
  - id: never
    effect: allow
    when: 'false && tool == "fs.read"'
  - id: always
    effect: allow
    tools: ["legacy.tool"]
    when: '1 == 1'
  - id: same-condition-a
    effect: require_approval
    tools: ["fs.*"]
    when: 'args.path.startsWith("config/")'
  - id: same-condition-b
    effect: allow
    tools: ["fs.w*"]
    when: 'args.path.startsWith( "config/" )'
  - id: typo
    effect: allow
    tools: ["fs.raed"]
  - id: typo-in-condition
    effect: allow
    when: 'tool == "fs.lst" || tool in ["fs.read", "shell.exe"]'
  - id: approve-irreversible
    effect: require_approval
    tools: ["shell.exec"]
    effects: [irreversible]
  - id: deny-shell-when
    effect: deny
    tools: ["shell.exec"]
    when: 'run.step > 3'
  - id: allow-on-a-label
    effect: allow
    effects: [reversible]
    when: '!has(run.labels.env) || run.labels.env != "prod"'
  - id: allow-on-the-crew
    effect: allow
    tools: ["fs.read"]
    when: 'crew.agent == "fixer" && crew.name == "release" && goal != ""'
  - id: ask-on-a-label
    effect: require_approval
    effects: [reversible]
    when: 'has(run.labels.env) && run.labels.env == "prod"'
  - id: allow-on-the-roles
    effect: allow
    effects: [reversible]
    when: '"operator" in run.roles && run.principal != "" && args.path != "x"'
`
	path := writeFile(t, "policy.yaml", policy)
	findings, err := validator.LintFiles(catalog.Static(testTools()...), path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`:7: warning: rule "allow-write": never decides: rule "no-deletes" (` + path + `:4, deny) matches whenever this allow rule does, and deny wins`,
		`:13: warning: rule "approve-shell-exec": never decides: rule "no-shell"`,
		`:20: warning: rule "allow-read-again": adds nothing: rule "allow-read"`,
		`:24: warning: rule "never": never matches: its condition is always false`,
		`:27: warning: rule "always": its condition is always true; leave ` + "`when`" + ` out`,
		`:35: warning: rule "same-condition-b": never decides: rule "same-condition-a"`,
		`:39: error: rule "typo": tools pattern "fs.raed" matches no tool in the catalog; did you mean "fs.read"?`,
		`:42: error: rule "typo-in-condition": the condition compares tool with "fs.lst"`,
		`:42: error: rule "typo-in-condition": the condition compares tool with "shell.exe", which is not in the catalog; did you mean "shell.exec"?`,
		`:45: warning: rule "approve-irreversible": never decides: rule "no-shell"`,
		`:49: warning: rule "deny-shell-when": adds nothing: rule "no-shell"`,
		// What the submitter writes (labels, the crew file's names, the
		// goal) may ask for more, never allow: roles and arguments may.
		`:53: warning: rule "allow-on-a-label": allows on what the run's submitter writes (run.labels): a submitter can write whatever this rule allows on`,
		`:57: warning: rule "allow-on-the-crew": allows on what the run's submitter writes (crew.agent, crew.name, goal)`,
		`:4: error: rule "no-deletes": tools pattern "fs.delete" matches no tool in the catalog; did you mean "fs.read" or "fs.write"?`,
		`:2: error: rate limit tool pattern "http.*" matches no tool in the catalog`,
	}
	var got strings.Builder
	for _, f := range findings {
		got.WriteString(f.String() + "\n")
		if f.File != path || f.Line == 0 {
			t.Errorf("finding without a position: %+v", f)
		}
	}
	for _, w := range want {
		if !strings.Contains(got.String(), path+w) {
			t.Errorf("missing finding %s%s", path, w)
		}
	}
	if len(findings) != len(want) {
		t.Errorf("%d findings, want %d:\n%s", len(findings), len(want), got.String())
	} else {
		t.Logf("%d findings:\n%s", len(findings), got.String())
	}
}

// TestLintQuiet checks that a policy without problems, like the default,
// gives no findings, and that compile errors come back as errors.
func TestLintQuiet(t *testing.T) {
	t.Parallel()
	findings, err := validator.LintFiles(catalog.Static(testTools()...), writeFile(t, "p.yaml", validator.DefaultPolicyYAML))
	if err != nil || len(findings) != 0 {
		t.Errorf("default policy: %v, %v", findings, err)
	}
	_, err = validator.LintFiles(nil, writeFile(t, "p.yaml", "rules:\n  - id: a\n    effect: allow\n    when: 'x'\n"))
	if !errors.Is(err, validator.ErrInvalidPolicy) || !strings.Contains(err.Error(), "p.yaml:4: ") {
		t.Errorf("err = %v", err)
	}
	// Without a catalog, tool names are not checked.
	findings, err = validator.LintFiles(nil, writeFile(t, "p.yaml", "rules:\n  - id: a\n    effect: allow\n    tools: [nothing.here]\n"))
	if err != nil || len(findings) != 0 {
		t.Errorf("without a catalog: %v, %v", findings, err)
	}
}

// TestLintNestedDirectoryByPrefix checks that lint warns about a deny or
// require_approval rule keeping a nested directory by a prefix check
// (startsWith, matches with ^), which a move or delete of its parent gets
// past (attack16b's finding, TestTouchesCoversATreesParents), and names
// touches; a rule using touches, a top-level directory, an allow rule and
// an unanchored pattern are left alone.
func TestLintNestedDirectoryByPrefix(t *testing.T) {
	t.Parallel()
	const policy = `rules:
  - id: prod-by-regexp
    effect: require_approval
    tools: ["fs.*"]
    when: >-
      [has(args.path) ? args.path : "", has(args.from) ? args.from : "", has(args.to) ? args.to : ""]
      .exists(p, p.matches("^deploy/prod(/|$)"))
  - id: prod-by-prefix
    effect: deny
    tools: ["fs.write"]
    when: 'args.path.startsWith("deploy/prod/") || args.path == "deploy/prod"'
  - id: keys-by-global-matches
    effect: deny
    tools: ["fs.write"]
    when: 'matches(args.path, "^secrets/keys\\.d/.*")'
  - id: prod-by-touches
    effect: require_approval
    tools: ["fs.*"]
    when: 'has(args.path) && args.path.touches("deploy/prod") || has(args.from) && args.from.matches("^deploy/prod(/|$)")'
  - id: top-level
    effect: require_approval
    tools: ["fs.write"]
    when: 'args.path.matches("^config(/|$)")'
  - id: allow-nested
    effect: allow
    tools: ["fs.write"]
    when: 'args.path.startsWith("sandbox/scratch/")'
  - id: unanchored
    effect: deny
    tools: ["fs.write"]
    when: 'args.path.matches("deploy/prod")'
`
	path := writeFile(t, "policy.yaml", policy)
	findings, err := validator.LintFiles(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`:2: warning: rule "prod-by-regexp": checks the nested directory "deploy/prod" by prefix: moving or deleting its parent "deploy" acts on it`,
		`:8: warning: rule "prod-by-prefix": checks the nested directory "deploy/prod" by prefix`,
		`:12: warning: rule "keys-by-global-matches": checks the nested directory "secrets/keys.d" by prefix: moving or deleting its parent "secrets"`,
	}
	var got strings.Builder
	for _, f := range findings {
		got.WriteString(f.String() + "\n")
	}
	for _, w := range want {
		if !strings.Contains(got.String(), path+w) {
			t.Errorf("missing finding %s%s", path, w)
		}
	}
	if !strings.Contains(got.String(), `p.touches("deploy/prod")`) {
		t.Errorf("the findings do not name touches:\n%s", got.String())
	}
	if len(findings) != len(want) {
		t.Errorf("%d findings, want %d:\n%s", len(findings), len(want), got.String())
	}
}

// TestLintSizeOfAnUntypedArgument (session 19): size() counts a string's
// characters but a list's elements, so for an argument the tool's schema
// does not type the proposal chooses what a rule's size() counts (a text
// given as a list of one string has size 1). The argument checks cannot
// tell which the author meant; lint, given the catalog, warns, naming
// size(string(...)). An argument the schema types, and a size of a
// string() of it, and one the schema refuses, are left alone.
func TestLintSizeOfAnUntypedArgument(t *testing.T) {
	t.Parallel()
	policy := `rules:
  - id: big-writes
    effect: require_approval
    tools: ["fs.write"]
    when: 'size(args.content) > 100000'
  - id: big-legacy
    effect: require_approval
    tools: ["legacy.*"]
    when: 'has(args.content) && size(args.content) > 10'
  - id: big-legacy-text
    effect: require_approval
    tools: ["legacy.*"]
    when: 'has(args.content) && size(string(args.content)) > 10'
  - id: many-items
    effect: deny
    effects: [irreversible]
    when: 'has(args.items) && args.items.size() > 3'
  - id: long-args
    effect: deny
    tools: ["shell.exec"]
    when: 'size(args.args) > 20 || has(args.argv) && size(args.argv) > 20'
`
	findings, err := validator.LintFiles(catalog.Static(testTools()...), writeFile(t, "p.yaml", policy))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
	}
	want := []string{
		`:6: warning: rule "big-legacy": takes size() of args.content, which tool "legacy.tool" does not type in its schema`,
		`:14: warning: rule "many-items": takes size() of args.items, which tool "`,
	}
	if len(got) != len(want) {
		t.Fatalf("findings:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) || !strings.Contains(got[i], "size(string(") {
			t.Errorf("finding %d: %s\nwant %s", i, got[i], w)
		}
	}
}
