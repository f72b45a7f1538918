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
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
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

// Reserved reason ids: rules cannot use them.
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
	Rules []ruleSpec `yaml:"rules"`
}

// ruleSpec is the YAML shape of one rule.
type ruleSpec struct {
	ID      string       `yaml:"id"`
	Effect  ruleAction   `yaml:"effect"`
	Message string       `yaml:"message"`
	Tools   []string     `yaml:"tools"`
	Effects []toolEffect `yaml:"effects"`
}

// rule is a checked rule, ready to match.
type rule struct {
	id      string
	action  ruleAction
	message string
	tools   []string  // glob patterns; nil matches every tool
	effects effectSet // 0 matches every effect class
}

func (r *rule) matches(tool string, effect xctv1.Effect) bool {
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

// RulesPolicy is a Policy made of YAML rules; the package doc describes the
// format and the semantics. It is immutable and safe for concurrent use.
type RulesPolicy struct {
	file    string
	version string
	rules   []rule
}

var _ Policy = (*RulesPolicy)(nil)

// LoadRulesFile reads and checks the rules policy in the file at path.
// Problems in the file are *PolicyError values (joined when there are
// several) naming the file and line.
func LoadRulesFile(path string) (*RulesPolicy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	return ParseRules(path, data)
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

// ParseRules checks a rules policy given as YAML text. file names the text
// in error messages. Decoding is strict: unknown fields, duplicate keys,
// values of the wrong kind, unknown effects, empty selectors, missing or
// duplicate rule ids and more than one YAML document are errors. Every
// problem found is reported, each as a *PolicyError.
func ParseRules(file string, data []byte) (*RulesPolicy, error) {
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

	// A second pass keeps the node tree, for the line of each rule.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlErrors(file, err)
	}
	rulesLine, ruleLines := ruleLinesOf(&root)

	var problems []error
	add := func(line int, format string, args ...any) {
		problems = append(problems, &PolicyError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if spec.Rules == nil {
		add(rulesLine, `"rules" is required; write "rules: []" to deny every tool`)
	}
	p := &RulesPolicy{file: file, rules: make([]rule, 0, len(spec.Rules))}
	seen := map[string]int{}
	for i, rs := range spec.Rules {
		line := 0
		if i < len(ruleLines) {
			line = ruleLines[i]
		}
		name := fmt.Sprintf("rule %d", i+1)
		if rs.ID != "" {
			name = fmt.Sprintf("rule %q", truncate(rs.ID, maxRuleIDLen))
		}
		switch {
		case rs.ID == "":
			add(line, "%s: id is required", name)
		case !validRuleID(rs.ID):
			add(line, "%s: id must be 1 to %d letters, digits, '.', '_', ':' or '-'", name, maxRuleIDLen)
		case rs.ID == reasonDefaultDeny || strings.HasPrefix(rs.ID, reservedRulePrefix):
			add(line, "%s: id is reserved (%q and ids starting with %q)", name, reasonDefaultDeny, reservedRulePrefix)
		default:
			if first, dup := seen[rs.ID]; dup {
				add(line, "%s: duplicate id, first used at line %d", name, first)
			} else {
				seen[rs.ID] = line
			}
		}
		if rs.Effect == actionNone {
			add(line, "%s: effect is required (allow, deny or require_approval)", name)
		}
		r := rule{id: rs.ID, action: rs.Effect, message: strings.TrimSpace(rs.Message)}
		if r.message == "" {
			r.message = defaultRuleMessage + " (" + rs.Effect.String() + ")"
		}
		if rs.Tools != nil {
			if len(rs.Tools) == 0 {
				add(line, "%s: tools is an empty list; leave it out to match every tool", name)
			}
			for _, pat := range rs.Tools {
				if err := checkPattern(pat); err != "" {
					add(line, "%s: tools pattern %q %s", name, truncate(pat, maxPatternLen), err)
				}
			}
			r.tools = append([]string{}, rs.Tools...)
		}
		if rs.Effects != nil {
			if len(rs.Effects) == 0 {
				add(line, "%s: effects is an empty list; leave it out to match every effect class", name)
			}
			for _, e := range rs.Effects {
				r.effects |= effectBit(xctv1.Effect(e))
			}
		}
		p.rules = append(p.rules, r)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	sum := sha256.Sum256(data)
	p.version = policyVersionPrefix + hex.EncodeToString(sum[:])
	return p, nil
}

// Version is "sha256:" and the hex SHA-256 of the policy's file content.
func (p *RulesPolicy) Version() string { return p.version }

// File is the name the policy was loaded from.
func (p *RulesPolicy) File() string { return p.file }

// Evaluate matches every rule against the proposed tool. Deny beats
// require_approval beats allow; no match is a deny with reason
// "default-deny". Reasons list every matching rule in file order.
func (p *RulesPolicy) Evaluate(_ context.Context, in *Input) (Outcome, error) {
	if in == nil || in.Tool == nil {
		return Outcome{}, ErrNoToolDescriptor
	}
	name := in.Tool.GetName()
	effect := classOf(in.Tool.GetEffect())
	var (
		out                   Outcome
		deny, approve, allows bool
	)
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matches(name, effect) {
			continue
		}
		out.Reasons = append(out.Reasons, &xctv1.Reason{RuleId: r.id, Message: r.message})
		switch r.action {
		case actionDeny:
			deny = true
		case actionApproval:
			approve = true
		case actionAllow:
			allows = true
		}
	}
	switch {
	case deny:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		out.Message = fmt.Sprintf("the policy denies tool %s: %s", quoteName(name), p.messages(name, effect, actionDeny))
	case approve:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_NEEDS_APPROVAL
		out.Message = fmt.Sprintf("tool %s needs a human's approval: %s", quoteName(name), p.messages(name, effect, actionApproval))
	case allows:
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_ALLOW
	default:
		msg := fmt.Sprintf("no policy rule allows tool %s", quoteName(name))
		out.Decision = xctv1.VerdictDecision_VERDICT_DECISION_DENY
		out.Reasons = append(out.Reasons, &xctv1.Reason{RuleId: reasonDefaultDeny, Message: msg})
		out.Message = msg
	}
	return out, nil
}

// messages joins the messages of the matching rules with the given action.
func (p *RulesPolicy) messages(tool string, effect xctv1.Effect, action ruleAction) string {
	var b strings.Builder
	for i := range p.rules {
		r := &p.rules[i]
		if r.action != action || !r.matches(tool, effect) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.message)
	}
	return b.String()
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

// ruleLinesOf finds, in a parsed policy, the line of the "rules" key (or of
// the document) and the line of every rule.
func ruleLinesOf(root *yaml.Node) (rulesLine int, ruleLines []int) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	rulesLine = n.Line
	if n.Kind != yaml.MappingNode {
		return rulesLine, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "rules" {
			continue
		}
		rulesLine = n.Content[i].Line
		seq := n.Content[i+1]
		if seq.Kind == yaml.AliasNode && seq.Alias != nil {
			seq = seq.Alias
		}
		for _, item := range seq.Content {
			ruleLines = append(ruleLines, item.Line)
		}
	}
	return rulesLine, ruleLines
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
			"into []validator.toolEffect", "into a list of effects (read, reversible, irreversible)",
			"into []string", "into a list of strings",
			"into validator.ruleFile", `into a policy (a mapping with a "rules" list)`,
			"into validator.ruleSpec", "into a rule (a mapping)",
			"into string", "into a string",
		).Replace(pe.Msg)
	}
	// "field x not found in type validator.ruleSpec" names a Go type too.
	if field, typ, ok := strings.Cut(pe.Msg, " not found in type "); ok {
		if name, ok := strings.CutPrefix(field, "field "); ok {
			where := "at the top level (allowed: rules)"
			if strings.HasSuffix(typ, "ruleSpec") {
				where = "in a rule (allowed: id, effect, message, tools, effects)"
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
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// quoteName quotes a model-supplied tool name for a message, shortened so a
// huge name cannot blow up the error signal.
func quoteName(name string) string { return strconv.Quote(truncate(name, maxToolNameInMsg)) }
