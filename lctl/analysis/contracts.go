package analysis

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/lctl"
)

// ContractSet is the spec's contracts (part 4): per agent, what it may take
// as input and must produce as output.
//
//	contracts:
//	  security-reviewer:
//	    inputs:
//	      - type: fact
//	        required_fields: [id, text]
//	    outputs:
//	      - type: fact
//	        required_fields: [id, text, confidence, severity]
//	        confidence_min: 0.5
//	        severity_values: [low, medium, high, critical]
type ContractSet struct {
	// Agents in the order the files name them.
	Agents    []string
	Contracts map[string]*Contract
	// from says which file defined each agent's contract.
	from map[string]string
}

// Contract is one agent's contract.
type Contract struct {
	Agent   string         `json:"agent"`
	Inputs  []ContractRule `json:"inputs"`
	Outputs []ContractRule `json:"outputs"`
}

// ContractRule is one entry of inputs or outputs.
type ContractRule struct {
	// Type is "fact" (fact_added and fact_modified, checked on the fact as
	// it stands after the event) or an event type.
	Type           string   `json:"type"`
	RequiredFields []string `json:"required_fields,omitempty"`
	ConfidenceMin  *float64 `json:"confidence_min,omitempty"`
	// Values are the allowed values of a field, from FIELD_values.
	Values map[string][]any `json:"values,omitempty"`
	// Where says where the rule was written: "file:line".
	Where string `json:"where"`
}

// NewContractSet returns an empty set to add files to.
func NewContractSet() *ContractSet {
	return &ContractSet{Contracts: map[string]*Contract{}, from: map[string]string{}}
}

// Add parses one contracts file (YAML or JSON) into the set. Errors name the
// file and line; an agent defined in two files, an unknown key (a typo
// such as required_feilds) and a value of the wrong type are errors.
func (cs *ContractSet) Add(name string, raw []byte) error {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return fmt.Errorf("%s: the file is empty", name)
	}
	top := resolve(root.Content[0])
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: a contracts file is a mapping with a contracts: section", name, top.Line)
	}
	var section *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "contracts" {
			section = resolve(top.Content[i+1])
		}
	}
	if section == nil {
		return fmt.Errorf("%s: no contracts: section", name)
	}
	if section.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: contracts: must map agent names to their contracts", name, section.Line)
	}
	for i := 0; i+1 < len(section.Content); i += 2 {
		agent, body := section.Content[i].Value, resolve(section.Content[i+1])
		at := fmt.Sprintf("%s:%d", name, section.Content[i].Line)
		if prev, dup := cs.from[agent]; dup {
			return fmt.Errorf("%s: agent %s already has a contract (%s)", at, agent, prev)
		}
		c := &Contract{Agent: agent, Inputs: []ContractRule{}, Outputs: []ContractRule{}}
		if body.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: the contract of %s must be a mapping with inputs and/or outputs", at, agent)
		}
		for j := 0; j+1 < len(body.Content); j += 2 {
			k, v := body.Content[j], resolve(body.Content[j+1])
			var dst *[]ContractRule
			switch k.Value {
			case "inputs":
				dst = &c.Inputs
			case "outputs":
				dst = &c.Outputs
			default:
				return fmt.Errorf("%s:%d: unknown key %q in the contract of %s (want inputs, outputs)", name, k.Line, k.Value, agent)
			}
			if v.Kind != yaml.SequenceNode {
				return fmt.Errorf("%s:%d: %s.%s must be a list of rules", name, v.Line, agent, k.Value)
			}
			for _, item := range v.Content {
				rule, err := parseRule(name, agent+"."+k.Value, resolve(item))
				if err != nil {
					return err
				}
				*dst = append(*dst, rule)
			}
		}
		cs.Agents = append(cs.Agents, agent)
		cs.Contracts[agent] = c
		cs.from[agent] = at
	}
	return nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func parseRule(file, where string, n *yaml.Node) (ContractRule, error) {
	at := func(line int) string { return fmt.Sprintf("%s:%d", file, line) }
	r := ContractRule{Where: at(n.Line)}
	if n.Kind != yaml.MappingNode {
		return r, fmt.Errorf("%s: each rule of %s is a mapping (type, required_fields, ...)", at(n.Line), where)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch key := k.Value; {
		case key == "type":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return r, fmt.Errorf("%s: type must name fact or an event type", at(v.Line))
			}
			r.Type = v.Value
		case key == "required_fields":
			if err := v.Decode(&r.RequiredFields); err != nil {
				return r, fmt.Errorf("%s: required_fields must be a list of field names", at(v.Line))
			}
		case key == "confidence_min":
			var f float64
			if err := v.Decode(&f); err != nil || f < 0 || f > 1 {
				return r, fmt.Errorf("%s: confidence_min must be a number between 0 and 1", at(v.Line))
			}
			r.ConfidenceMin = &f
		case strings.HasSuffix(key, "_values") && len(key) > len("_values"):
			var vals []any
			if err := v.Decode(&vals); err != nil || len(vals) == 0 {
				return r, fmt.Errorf("%s: %s must be a non-empty list of allowed values", at(v.Line), key)
			}
			for i, x := range vals {
				vals[i] = normalizeValue(x)
			}
			if r.Values == nil {
				r.Values = map[string][]any{}
			}
			r.Values[strings.TrimSuffix(key, "_values")] = vals
		default:
			return r, fmt.Errorf("%s: unknown key %q in a rule of %s (want type, required_fields, confidence_min, FIELD_values)", at(k.Line), key, where)
		}
	}
	if r.Type == "" {
		return r, fmt.Errorf("%s: a rule of %s has no type", at(n.Line), where)
	}
	return r, nil
}

// normalizeValue turns YAML's ints into the float64 JSON events carry.
func normalizeValue(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
}

// ValidationReport is the spec's `lctl validate`.
type ValidationReport struct {
	ChainID   string           `json:"chain_id"`
	Events    int              `json:"events"`
	Contracts int              `json:"contracts"`
	Results   []ContractResult `json:"results"`
	// Violations counts every violation; Violated counts the results with
	// at least one.
	Violations int  `json:"violations"`
	Violated   int  `json:"violated"`
	OK         bool `json:"ok"`
	// Recorded are the contract_validation events the chain itself holds
	// that did not pass (shown, not counted).
	Recorded []lctl.ContractValidation `json:"recorded"`
}

// ContractResult is one agent's contract in one direction.
type ContractResult struct {
	Agent     string `json:"agent"`
	Direction string `json:"direction"` // "inputs" or "outputs"
	// Checked counts what was checked: facts or events.
	Checked    int         `json:"checked"`
	OK         bool        `json:"ok"`
	Violations []Violation `json:"violations"`
}

// Violation is one broken rule, named by the event.
type Violation struct {
	Seq      uint64 `json:"seq"`
	Position int    `json:"position"`
	// Subject is what broke the rule: "fact_added F3".
	Subject string `json:"subject"`
	Message string `json:"message"`
	Rule    string `json:"rule"` // where the rule is written
}

// ValidateContracts checks a chain against contracts. An agent's outputs
// are its own events of the rule's type; for facts, the fact as it stands
// after the agent's event. Its inputs are what it receives: the facts (or
// events) other agents produced before each of its steps.
func ValidateContracts(chainID string, events []lctl.Event, cs *ContractSet) *ValidationReport {
	r := &ValidationReport{ChainID: chainID, Events: len(events), Contracts: len(cs.Agents), Results: []ContractResult{}, Recorded: []lctl.ContractValidation{}}
	for _, agent := range cs.Agents {
		c := cs.Contracts[agent]
		if len(c.Inputs) > 0 {
			r.add(checkInputs(events, agent, c.Inputs))
		}
		if len(c.Outputs) > 0 {
			r.add(checkOutputs(events, agent, c.Outputs))
		}
	}
	for _, cv := range lctl.Replay(chainID, events, 0).ContractValidations {
		if cv.Status != "passed" && cv.Status != "" {
			r.Recorded = append(r.Recorded, cv)
		}
	}
	r.OK = r.Violations == 0
	return r
}

func (r *ValidationReport) add(res ContractResult) {
	res.OK = len(res.Violations) == 0
	if !res.OK {
		r.Violated++
		r.Violations += len(res.Violations)
	}
	r.Results = append(r.Results, res)
}

// item is something a rule checks: a fact as it stood, or an event.
type item struct {
	seq     uint64
	pos     int
	subject string
	fields  map[string]any
	conf    *float64
	key     string // what makes two checks of the same input the same
}

func checkOutputs(events []lctl.Event, agent string, rules []ContractRule) ContractResult {
	res := ContractResult{Agent: agent, Direction: "outputs", Violations: []Violation{}}
	store := newFactTracker()
	for i := range events {
		e := &events[i]
		store.apply(e)
		if e.Agent != agent {
			continue
		}
		for _, rule := range rules {
			it, ok := outputItem(e, i, rule, store)
			if !ok {
				continue
			}
			res.Checked++
			res.Violations = append(res.Violations, checkItem(it, rule)...)
		}
	}
	return res
}

func checkInputs(events []lctl.Event, agent string, rules []ContractRule) ContractResult {
	res := ContractResult{Agent: agent, Direction: "inputs", Violations: []Violation{}}
	store := newFactTracker()
	seen := map[string]bool{}
	var handed []item // events by other agents, for rules on event types
	for i := range events {
		e := &events[i]
		if e.Type == lctl.TypeStepStart && e.Agent == agent {
			for _, rule := range rules {
				var inputs []item
				if rule.Type == "fact" {
					for _, id := range store.order {
						f := store.facts[id]
						if f.lastBy != agent {
							inputs = append(inputs, f.item())
						}
					}
				} else {
					for _, it := range handed {
						if it.subject == rule.Type {
							inputs = append(inputs, it)
						}
					}
				}
				for _, it := range inputs {
					k := rule.Where + "|" + it.key
					if seen[k] {
						continue
					}
					seen[k] = true
					res.Checked++
					for _, v := range checkItem(it, rule) {
						v.Message = fmt.Sprintf("received at step %d: %s", e.Seq, v.Message)
						res.Violations = append(res.Violations, v)
					}
				}
			}
		}
		store.apply(e)
		if e.Agent != agent && e.Type != lctl.TypeFactAdded && e.Type != lctl.TypeFactModified {
			handed = append(handed, item{seq: e.Seq, pos: i + 1, subject: e.Type, fields: e.Data, conf: confOf(e.Data), key: fmt.Sprintf("event %d", e.Seq)})
		}
	}
	return res
}

func outputItem(e *lctl.Event, i int, rule ContractRule, store *factTracker) (item, bool) {
	if rule.Type == "fact" {
		if e.Type != lctl.TypeFactAdded && e.Type != lctl.TypeFactModified {
			return item{}, false
		}
		id, _ := e.Data["id"].(string)
		f := store.facts[id]
		if f == nil {
			return item{}, false
		}
		it := f.item()
		it.seq, it.pos, it.subject = e.Seq, i+1, e.Type+" "+id
		return it, true
	}
	if e.Type != rule.Type {
		return item{}, false
	}
	subject, _ := Summarize(e)
	return item{seq: e.Seq, pos: i + 1, subject: strings.TrimSpace(e.Type + " " + subject), fields: e.Data, conf: confOf(e.Data)}, true
}

func confOf(d map[string]any) *float64 {
	if c, ok := numberOf(d["confidence"]); ok {
		return &c
	}
	return nil
}

// checkItem applies one rule to one item.
func checkItem(it item, rule ContractRule) []Violation {
	var out []Violation
	add := func(format string, args ...any) {
		out = append(out, Violation{Seq: it.seq, Position: it.pos, Subject: it.subject, Message: fmt.Sprintf(format, args...), Rule: rule.Where})
	}
	for _, f := range rule.RequiredFields {
		v, ok := it.fields[f]
		if !ok || v == nil || v == "" {
			add("missing required field %s", f)
		}
	}
	if rule.ConfidenceMin != nil {
		switch {
		case it.conf == nil:
			if !slices.Contains(rule.RequiredFields, "confidence") {
				add("no confidence, and confidence_min is %.2f", *rule.ConfidenceMin)
			}
		case *it.conf < *rule.ConfidenceMin:
			add("confidence %.2f is below confidence_min %.2f", *it.conf, *rule.ConfidenceMin)
		}
	}
	fields := make([]string, 0, len(rule.Values))
	for f := range rule.Values {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	for _, f := range fields {
		v, ok := it.fields[f]
		if !ok || v == nil {
			continue // required_fields says whether it must be there
		}
		allowed := rule.Values[f]
		if !slices.ContainsFunc(allowed, func(a any) bool { return sameValue(a, v) }) {
			var names []string
			for _, a := range allowed {
				names = append(names, fmt.Sprint(a))
			}
			add("%s %s is not one of %s", f, FieldValue(v), strings.Join(names, ", "))
		}
	}
	return out
}

// factTracker is the fact store as events arrive, for contract checks.
type factTracker struct {
	facts map[string]*trackedFact
	order []string
}

type trackedFact struct {
	id     string
	fields map[string]any
	lastBy string
	seq    uint64
}

func newFactTracker() *factTracker { return &factTracker{facts: map[string]*trackedFact{}} }

func (t *factTracker) apply(e *lctl.Event) {
	if e.Type != lctl.TypeFactAdded && e.Type != lctl.TypeFactModified {
		return
	}
	id, _ := e.Data["id"].(string)
	if id == "" {
		return
	}
	f := t.facts[id]
	if f == nil || e.Type == lctl.TypeFactAdded {
		if f == nil {
			t.order = append(t.order, id)
		}
		f = &trackedFact{id: id, fields: map[string]any{}}
		t.facts[id] = f
	} else {
		// Changes must not reach items already handed out.
		fields := make(map[string]any, len(f.fields)+len(e.Data))
		for k, v := range f.fields {
			fields[k] = v
		}
		f.fields = fields
	}
	for k, v := range e.Data {
		f.fields[k] = v
	}
	f.lastBy, f.seq = e.Agent, e.Seq
}

func (f *trackedFact) item() item {
	return item{seq: f.seq, subject: "fact " + f.id, fields: f.fields, conf: confOf(f.fields), key: fmt.Sprintf("fact %s@%d", f.id, f.seq)}
}
