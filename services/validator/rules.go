package validator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl/text"
)

// DefaultPolicyYAML is the built-in policy, used when no policy file is
// configured: read-only and reversible tools run, irreversible ones (and
// tools that declare no effect class) wait for a human, anything else is
// denied. examples/policies/default.yaml holds the same text.
const DefaultPolicyYAML = `# The built-in XCT validator policy, used when no -policy file is given.
# Rules are evaluated in full: deny beats require_approval beats allow, and
# a proposal no rule matches is denied.
rules:
  - id: allow-read
    effect: allow
    message: tools that only read may run
    effects: [read]
  - id: allow-reversible
    effect: allow
    message: tools whose effects can be compensated may run
    effects: [reversible]
  - id: approve-irreversible
    effect: require_approval
    message: tools with irreversible effects need a human's approval
    effects: [irreversible]
  - id: protected-paths
    effect: deny
    message: version control metadata, XCT's state, the configuration files of the programs the executor runs and the files that run code for whoever opens the workspace next are protected (the executor refuses to change them too)
    tools: ["fs.*"]
    effects: [reversible]
    when: >-
      [has(args.path) ? string(args.path) : "", has(args.from) ? string(args.from) : "", has(args.to) ? string(args.to) : ""].exists(p,
      p.lowerAscii().matches(r'(^|[/\\])\.(git|xct|hg|svn|husky|ssh|gnupg|direnv|vscode|idea|devcontainer|mise|cargo|lefthook|lefthook-local|claude|cursor|gemini|codex|zed|helix)[. ]*([/\\]|$)') ||
      p.lowerAscii().matches(r'(^|[/\\])(\.gitconfig|\.gitmodules|\.gitattributes|\.npmrc|\.yarnrc|\.yarnrc\.yml|\.pnpmfile\.cjs|\.envrc|\.bashrc|\.bash_profile|\.bash_login|\.profile|\.zshrc|\.zshenv|\.zprofile|\.inputrc|\.netrc|\.curlrc|\.wgetrc|pip\.conf|\.pypirc|\.pre-commit-config\.yaml|\.devcontainer\.json|mise\.toml|\.mise\.toml|mise\.local\.toml|\.mise\.local\.toml|\.tool-versions|bunfig\.toml|\.bunfig\.toml|\.exrc|\.vimrc|\.nvimrc|\.nvim\.lua|\.?lefthook(-local)?\.(yml|yaml|toml|json|jsonc)|\.pre-commit-config\.yml|prek\.toml|head|\.pdbrc|\.perldb|\.rprofile|\.ghci|\.pryrc|\.irbrc|\.octaverc|\.gdbinit|\.lldbinit|\.mcp\.json|\.aider\.conf\.yml|rust-toolchain(\.toml)?|\.bazelversion|\.bazeliskrc|\.python-versions?)[. ]*$'))
`

// DefaultPolicyFile is the name the built-in policy reports in errors and logs.
const DefaultPolicyFile = "builtin:default"

// Limits on a policy file.
const (
	maxPolicyBytes   = 1 << 20
	maxRuleIDLen     = 128
	maxPatternLen    = 256
	maxToolNameInMsg = 128
)

// Reserved reason ids: rules cannot use them ("approval" too, in
// settings.go).
const (
	reasonDefaultDeny   = "default-deny"
	reservedRulePrefix  = "builtin."
	reasonCatalog       = "builtin.catalog"
	reasonSchema        = "builtin.schema"
	reasonPolicy        = "builtin.policy"
	defaultRuleMessage  = "matched"
	policyVersionPrefix = "sha256:"
)

// ruleAction is what a matching rule asks for.
type ruleAction uint8

const (
	actionNone ruleAction = iota
	actionAllow
	actionDeny
	actionApproval
)

func (a ruleAction) String() string {
	switch a {
	case actionAllow:
		return "allow"
	case actionDeny:
		return "deny"
	case actionApproval:
		return "require_approval"
	}
	return "none"
}

// UnmarshalYAML reads a rule's effect. A bad value is reported as a type
// error, so decoding goes on and every problem of the file is reported.
func (a *ruleAction) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "allow":
			*a = actionAllow
			return nil
		case "deny":
			*a = actionDeny
			return nil
		case "require_approval":
			*a = actionApproval
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: effect %s is not one of allow, deny, require_approval", n.Line, nodeText(n))}}
}

// effectSet is a set of tool effect classes, one bit per xctv1.Effect.
type effectSet uint8

func effectBit(e xctv1.Effect) effectSet { return 1 << uint(e) }

// toolEffect is one entry of a rule's effects selector.
type toolEffect xctv1.Effect

// UnmarshalYAML reads an effect class name.
func (e *toolEffect) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "read":
			*e = toolEffect(xctv1.Effect_EFFECT_READ)
			return nil
		case "reversible":
			*e = toolEffect(xctv1.Effect_EFFECT_REVERSIBLE)
			return nil
		case "irreversible":
			*e = toolEffect(xctv1.Effect_EFFECT_IRREVERSIBLE)
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: effects entry %s is not one of read, reversible, irreversible", n.Line, nodeText(n))}}
}

// nodeText shows a node's value in an error message, briefly.
func nodeText(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "(not a plain value)"
	}
	return strconv.Quote(truncate(n.Value, 64))
}

// ruleFile is the YAML shape of a policy file.
type ruleFile struct {
	Mode        policyMode           `yaml:"mode"`
	ApprovalTTL *yamlDuration        `yaml:"approval_ttl"`
	Confidence  *confidenceSpec      `yaml:"confidence"`
	Budgets     *budgetSpec          `yaml:"budgets"`
	Prices      map[string]priceSpec `yaml:"prices"`
	RateLimits  []rateLimitSpec      `yaml:"rate_limits"`
	Rules       []ruleSpec           `yaml:"rules"`
}

// ruleSpec is the YAML shape of one rule.
type ruleSpec struct {
	ID      string       `yaml:"id"`
	Effect  ruleAction   `yaml:"effect"`
	Message string       `yaml:"message"`
	Tools   []string     `yaml:"tools"`
	Effects []toolEffect `yaml:"effects"`
	When    *string      `yaml:"when"`
}

// rule is a checked rule, ready to match.
type rule struct {
	id      string
	action  ruleAction
	message string
	tools   []string   // glob patterns; nil matches every tool
	effects effectSet  // 0 matches every effect class
	when    *condition // nil matches unconditionally
	file    string     // where the rule is written, for lint and logs
	line    int
}

// selects reports whether the rule's selectors (tools and effects) take
// in the tool; its condition is evaluated separately.
func (r *rule) selects(tool string, effect xctv1.Effect) bool {
	if r.effects != 0 && r.effects&effectBit(effect) == 0 {
		return false
	}
	if r.tools == nil {
		return true
	}
	for _, p := range r.tools {
		if globMatch(p, tool) {
			return true
		}
	}
	return false
}

// RulesPolicy is one policy file: rules with optional CEL conditions, run
// budgets, a price table, rate limits, confidence thresholds, an approval
// TTL and a mode. The package doc describes the format and the semantics.
// It is immutable and safe for concurrent use.
//
// Its Evaluate applies the budgets, the rules and the confidence gate. Rate
// limits keep state, so the Service applies them (and Recheck simulates
// them); a RulesPolicy evaluated on its own ignores them.
type RulesPolicy struct {
	file    string
	version string
	mode    policyMode
	rs      *ruleSet
}

var _ Policy = (*RulesPolicy)(nil)

// LoadRulesFile reads and checks the policy in the file at path. Problems
// in the file are *PolicyError values (joined when there are several)
// naming the file and line.
func LoadRulesFile(path string) (*RulesPolicy, error) {
	return loadRulesFile(&celEnv{}, path)
}

func loadRulesFile(env *celEnv, path string) (*RulesPolicy, error) {
	data, err := readPolicyFile(path)
	if err != nil {
		return nil, err
	}
	return parsePolicy(env, path, data)
}

// readPolicyFile reads a policy file, refusing one larger than the limit.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	return data, nil
}

// DefaultPolicy returns the built-in policy (DefaultPolicyYAML). Its version
// is the hash of that text.
func DefaultPolicy() *RulesPolicy {
	p, err := ParseRules(DefaultPolicyFile, []byte(DefaultPolicyYAML))
	if err != nil {
		// The text is a constant and a test parses it.
		panic(fmt.Sprintf("validator: built-in policy: %v", err))
	}
	return p
}

// ParseRules checks a policy given as YAML text. file names the text in
// error messages. Decoding is strict: unknown fields, duplicate keys,
// values of the wrong kind, unknown effects, empty selectors, missing or
// duplicate rule ids, conditions that do not compile or type-check, bad
// settings and more than one YAML document are errors. Every problem found
// is reported, each as a *PolicyError.
func ParseRules(file string, data []byte) (*RulesPolicy, error) {
	return parsePolicy(&celEnv{}, file, data)
}

func parsePolicy(env *celEnv, file string, data []byte) (*RulesPolicy, error) {
	if len(data) > maxPolicyBytes {
		return nil, &PolicyError{File: file, Msg: fmt.Sprintf("the file is larger than %d bytes", maxPolicyBytes)}
	}
	var spec ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&spec); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &PolicyError{File: file, Msg: `the policy is empty; write "rules: []" to deny every tool`}
		}
		return nil, yamlErrors(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &PolicyError{File: file, Line: extra.Line, Msg: "only one YAML document is allowed"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlErrors(file, err)
	}

	// A second pass keeps the node tree, for the line of each problem.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlErrors(file, err)
	}
	lines := newNodeIndex(&root)

	var problems []error
	add := func(line int, format string, args ...any) {
		problems = append(problems, &PolicyError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if spec.Rules == nil {
		add(lines.line("rules"), `"rules" is required; write "rules: []" to deny every tool`)
	}
	st := checkSettings(&spec, file, lines, add)
	rs := &ruleSet{rules: make([]rule, 0, len(spec.Rules)), settings: st}
	seen := map[string]int{}
	for i, spec := range spec.Rules {
		line := lines.itemLine("rules", i)
		name := fmt.Sprintf("rule %d", i+1)
		if spec.ID != "" {
			name = fmt.Sprintf("rule %q", truncate(spec.ID, maxRuleIDLen))
		}
		switch {
		case spec.ID == "":
			add(line, "%s: id is required", name)
		case !validRuleID(spec.ID):
			add(line, "%s: id must be 1 to %d letters, digits, '.', '_', ':' or '-'", name, maxRuleIDLen)
		case reservedRuleID(spec.ID):
			add(line, "%s: id is reserved (%q, %q and ids starting with %q)", name, reasonDefaultDeny, reasonApproval, reservedRulePrefix)
		default:
			if first, dup := seen[spec.ID]; dup {
				add(line, "%s: duplicate id, first used at line %d", name, first)
			} else {
				seen[spec.ID] = line
			}
		}
		if spec.Effect == actionNone {
			add(line, "%s: effect is required (allow, deny or require_approval)", name)
		}
		r := rule{id: spec.ID, action: spec.Effect, message: strings.TrimSpace(spec.Message), file: file, line: line}
		if r.message == "" {
			r.message = defaultRuleMessage + " (" + spec.Effect.String() + ")"
		}
		if spec.Tools != nil {
			if len(spec.Tools) == 0 {
				add(line, "%s: tools is an empty list; leave it out to match every tool", name)
			}
			for _, pat := range spec.Tools {
				if err := checkPattern(pat); err != "" {
					add(line, "%s: tools pattern %q %s", name, truncate(pat, maxPatternLen), err)
				}
			}
			r.tools = append([]string{}, spec.Tools...)
		}
		if spec.Effects != nil {
			if len(spec.Effects) == 0 {
				add(line, "%s: effects is an empty list; leave it out to match every effect class", name)
			}
			for _, e := range spec.Effects {
				r.effects |= effectBit(xctv1.Effect(e))
			}
		}
		if spec.When != nil {
			cond, errs := compileCondition(env, *spec.When)
			whenNode := lines.itemKey("rules", i, "when")
			for _, e := range errs {
				at := line
				if whenNode != nil {
					at = exprLine(whenNode, e.line)
				}
				if e.column > 0 {
					add(at, "%s: when: %s (column %d of the expression)", name, e.msg, e.column)
				} else {
					add(at, "%s: when: %s", name, e.msg)
				}
			}
			r.when = cond
		}
		rs.rules = append(rs.rules, r)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	sum := sha256.Sum256(data)
	return &RulesPolicy{
		file:    file,
		version: policyVersionPrefix + hex.EncodeToString(sum[:]),
		mode:    spec.Mode,
		rs:      rs,
	}, nil
}

// reservedRuleID reports whether id is kept for reasons the validator
// itself gives.
func reservedRuleID(id string) bool {
	return id == reasonDefaultDeny || id == reasonApproval || strings.HasPrefix(id, reservedRulePrefix)
}

// exprLine maps a line inside a condition to a line of the file. A block
// scalar ("when: |") starts on the line after its key.
func exprLine(n *yaml.Node, exprLine int) int {
	if exprLine < 1 {
		exprLine = 1
	}
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return n.Line + exprLine
	}
	return n.Line + exprLine - 1
}

// Version is "sha256:" and the hex SHA-256 of the policy's file content.
func (p *RulesPolicy) Version() string { return p.version }

// File is the name the policy was loaded from.
func (p *RulesPolicy) File() string { return p.file }

// Shadow reports whether the file declares mode: shadow: its verdicts are
// recorded as would-have-been, never enforced.
func (p *RulesPolicy) Shadow() bool { return p.mode == modeShadow }

// Rules is the number of rules in the file.
func (p *RulesPolicy) Rules() int { return len(p.rs.rules) }

// ApprovalTTL is how long an approval the policy asks for stays valid.
func (p *RulesPolicy) ApprovalTTL() time.Duration { return p.rs.settings.approvalTTL }

// Evaluate applies the policy's budgets, rules and confidence gate to one
// proposal (not its rate limits, which the Service applies). Budgets come
// first: a used-up budget denies with BUDGET_EXCEEDED before any rule is
// looked at. Then every rule whose selectors take in the tool and whose
// condition holds matches; deny beats require_approval beats allow, and no
// match is a deny with reason "default-deny". A condition that fails to
// evaluate denies. Reasons list every matching rule in file order, then
// the confidence gate's, then the default deny.
func (p *RulesPolicy) Evaluate(_ context.Context, in *Input) (Outcome, error) {
	return p.rs.evaluate(in)
}

// classOf maps a tool's declared effect to the class rules match: anything
// but read or reversible (UNSPECIFIED, or a value this build does not know)
// is irreversible, the fail-safe reading.
func classOf(e xctv1.Effect) xctv1.Effect {
	switch e {
	case xctv1.Effect_EFFECT_READ, xctv1.Effect_EFFECT_REVERSIBLE:
		return e
	}
	return xctv1.Effect_EFFECT_IRREVERSIBLE
}

// nodeIndex finds where keys are in a parsed policy, for error positions.
type nodeIndex struct {
	top     *yaml.Node // the document's top-level node
	topLine int
}

func newNodeIndex(root *yaml.Node) *nodeIndex {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	return &nodeIndex{top: deref(n), topLine: n.Line}
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// child returns the key and value nodes of key in mapping n.
func child(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], deref(n.Content[i+1])
		}
	}
	return nil, nil
}

// line is the line of the deepest key of path that exists, or of the
// document.
func (x *nodeIndex) line(path ...string) int {
	line, n := x.topLine, x.top
	for _, key := range path {
		k, v := child(n, key)
		if k == nil {
			break
		}
		line, n = k.Line, v
	}
	return line
}

// item is the i-th entry of the list at key.
func (x *nodeIndex) item(key string, i int) *yaml.Node {
	_, seq := child(x.top, key)
	if seq == nil || seq.Kind != yaml.SequenceNode || i >= len(seq.Content) {
		return nil
	}
	return deref(seq.Content[i])
}

// itemLine is the line of the i-th entry of the list at key.
func (x *nodeIndex) itemLine(key string, i int) int {
	if n := x.item(key, i); n != nil {
		return n.Line
	}
	return x.line(key)
}

// itemKey is the value node of field in the i-th entry of the list at key.
func (x *nodeIndex) itemKey(key string, i int, field string) *yaml.Node {
	_, v := child(x.item(key, i), field)
	return v
}

// yamlErrors turns a YAML decoding error into PolicyErrors with lines.
func yamlErrors(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		errs := make([]error, 0, len(te.Errors))
		for _, s := range te.Errors {
			errs = append(errs, positioned(file, s))
		}
		return errors.Join(errs...)
	}
	return positioned(file, err.Error())
}

// positioned reads "yaml: line N: message" (or "line N: message").
func positioned(file, text string) *PolicyError {
	text = strings.TrimPrefix(text, "yaml: ")
	pe := &PolicyError{File: file, Msg: text}
	if rest, ok := strings.CutPrefix(text, "line "); ok {
		if num, msg, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				pe.Line, pe.Msg = n, msg
			}
		}
	}
	// The YAML parser (unlike its scanner) reports 0-based lines, and none
	// at all for line 0: make them 1-based. The line is where the broken
	// construct starts, e.g. an unclosed '[' or the mapping missing a key.
	if isParserProblem(pe.Msg) {
		pe.Line++
	}
	// Type errors name Go types; say what they mean instead.
	if strings.HasPrefix(pe.Msg, "cannot unmarshal ") {
		pe.Msg = strings.NewReplacer(
			"into []validator.ruleSpec", "into a list of rules",
			"into []validator.rateLimitSpec", "into a list of rate limits",
			"into []validator.toolEffect", "into a list of effects (read, reversible, irreversible)",
			"into []string", "into a list of strings",
			"into map[string]validator.priceSpec", "into a price table (model: {input_per_1k, output_per_1k})",
			"into validator.ruleFile", `into a policy (a mapping with a "rules" list)`,
			"into validator.ruleSpec", "into a rule (a mapping)",
			"into validator.rateLimitSpec", "into a rate limit (a mapping)",
			"into validator.priceSpec", "into a price (a mapping)",
			"into validator.budgetSpec", "into budgets (a mapping)",
			"into validator.confidenceSpec", "into confidence thresholds (a mapping)",
			"into float64", "into a number",
			"into int64", "into an integer",
			"into string", "into a string",
		).Replace(pe.Msg)
	}
	// "field x not found in type validator.ruleSpec" names a Go type too.
	if field, typ, ok := strings.Cut(pe.Msg, " not found in type "); ok {
		if name, ok := strings.CutPrefix(field, "field "); ok {
			where := "at the top level (allowed: mode, approval_ttl, confidence, budgets, prices, rate_limits, rules)"
			switch strings.TrimPrefix(typ, "validator.") {
			case "ruleSpec":
				where = "in a rule (allowed: id, effect, message, tools, effects, when)"
			case "budgetSpec":
				where = "in budgets (allowed: max_steps, max_wall_time, max_tokens, max_cost_usd, max_consecutive_errors)"
			case "confidenceSpec":
				where = "in confidence (allowed: proceed, warn, verify)"
			case "priceSpec":
				where = "in a price (allowed: input_per_1k, output_per_1k)"
			case "rateLimitSpec":
				where = "in a rate limit (allowed: tool, per_run, per_principal, global)"
			}
			pe.Msg = fmt.Sprintf("unknown field %q %s", name, where)
		}
	}
	return pe
}

// isParserProblem reports whether msg is one of the YAML parser's (not
// scanner's) problems, whose line numbers are 0-based.
func isParserProblem(msg string) bool {
	switch msg {
	case "did not find expected <stream-start>",
		"did not find expected <document start>",
		"did not find expected node content",
		"did not find expected '-' indicator",
		"did not find expected key",
		"did not find expected ',' or ']'",
		"did not find expected ',' or '}'",
		"found undefined tag handle",
		"found duplicate %YAML directive",
		"found duplicate %TAG directive",
		"found incompatible YAML document":
		return true
	}
	return false
}

func validRuleID(id string) bool {
	if id == "" || len(id) > maxRuleIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// checkPattern says what is wrong with a tools pattern, or "".
func checkPattern(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > maxPatternLen:
		return fmt.Sprintf("is longer than %d bytes", maxPatternLen)
	case !utf8.ValidString(p):
		return "is not valid UTF-8"
	}
	for _, r := range p {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "contains white space or a control character"
		}
	}
	return ""
}

// truncate shortens s to at most n bytes, on a character boundary.
func truncate(s string, n int) string { return text.Truncate(s, n) }

// quoteName quotes a model-supplied tool name for a message, shortened so a
// huge name cannot blow up the error signal.
func quoteName(name string) string { return strconv.Quote(truncate(name, maxToolNameInMsg)) }
