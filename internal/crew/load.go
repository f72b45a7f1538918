package crew

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// Bounds of a crew file: a crew comes from whoever starts a run, so its
// size and the work its validation takes are bounded.
const (
	MaxFileBytes      = 1 << 20
	MaxAgents         = 100
	MaxToolsPerAgent  = 128
	MaxListPerAgent   = 64 // hands_to, suggested_queries, capabilities, fallbacks
	MaxRoutingRules   = 200
	MaxContractAgents = MaxAgents
)

// fileYAML is the crew file as YAML has it; Load decodes it strictly
// (unknown fields are errors) and then checks the rules.
type fileYAML struct {
	Crew        string               `yaml:"crew"`
	Description string               `yaml:"description"`
	Agents      []agentYAML          `yaml:"agents"`
	Handoffs    handoffsYAML         `yaml:"handoffs"`
	Contracts   yaml.Node            `yaml:"contracts"` // lctl's contract parser reads it
	Confidence  confidenceYAML       `yaml:"confidence"`
	Models      map[string]modelYAML `yaml:"models"`
	Routing     routingYAML          `yaml:"routing"`
	History     string               `yaml:"history"`
	Authority   authorityYAML        `yaml:"authority"`
}

// authorityYAML is who may end the run and whose assessments lift a
// doubt; a list left out takes its default, an empty one names nobody.
type authorityYAML struct {
	EndRun     *[]string `yaml:"end_run"`
	LiftDoubts *[]string `yaml:"lift_doubts"`
}

type agentYAML struct {
	Name             string      `yaml:"name"`
	Description      string      `yaml:"description"`
	Profile          profileYAML `yaml:"profile"`
	Tools            []string    `yaml:"tools"`
	HandsTo          []string    `yaml:"hands_to"`
	SuggestedQueries []string    `yaml:"suggested_queries"`
}

type profileYAML struct {
	Type             string   `yaml:"type"`
	Capabilities     []string `yaml:"capabilities"`
	Model            string   `yaml:"model"`
	Fallbacks        []string `yaml:"fallbacks"`
	ReliabilityScore *float64 `yaml:"reliability_score"`
}

type handoffsYAML struct {
	Entry     string `yaml:"entry"`
	MaxDepth  *int   `yaml:"max_depth"`
	Cycles    string `yaml:"cycles"`
	MaxVisits *int   `yaml:"max_visits"`
}

type confidenceYAML struct {
	DecayRate    *float64        `yaml:"decay_rate"`
	Thresholds   *thresholdsYAML `yaml:"thresholds"`
	MinAssessors *int            `yaml:"min_assessors"`
}

type thresholdsYAML struct {
	Proceed *float64 `yaml:"proceed"`
	Warn    *float64 `yaml:"warn"`
	Verify  *float64 `yaml:"verify"`
}

type modelYAML struct {
	CostPer1KTokens *float64 `yaml:"cost_per_1k_tokens"`
}

type routingYAML struct {
	FallbackOn         []string   `yaml:"fallback_on"`
	FallbackConfidence *float64   `yaml:"fallback_confidence"`
	Rules              []ruleYAML `yaml:"rules"`
}

type ruleYAML struct {
	Name               string        `yaml:"name"`
	When               ruleMatchYAML `yaml:"when"`
	Model              string        `yaml:"model"`
	Cheapest           bool          `yaml:"cheapest"`
	MaxCostPer1KTokens *float64      `yaml:"max_cost_per_1k_tokens"`
	Reason             string        `yaml:"reason"`
	Confidence         *float64      `yaml:"confidence"`
}

type ruleMatchYAML struct {
	StepKind  string `yaml:"step_kind"`
	AgentType string `yaml:"agent_type"`
	Agent     string `yaml:"agent"`
}

// LoadFile reads and validates a crew file.
func LoadFile(path string) (*Crew, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names the crew file
	if err != nil {
		return nil, fmt.Errorf("read crew file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: nothing to flush
	raw, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read crew file %s: %w", path, err)
	}
	return Load(path, raw)
}

// Load parses and validates a crew file. name is the file's name, used in
// errors ("crew.yaml:12: ..."). Every problem found is reported, one per
// line, in the order of the file; a crew is returned only when there is
// none.
func Load(name string, raw []byte) (*Crew, error) {
	if len(raw) > MaxFileBytes {
		return nil, fmt.Errorf("%s: the file is larger than %d bytes", name, MaxFileBytes)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, yamlError(name, err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", name)
	}
	if root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: a crew file is a mapping (crew, agents, handoffs, contracts, ...)", name, root.Content[0].Line)
	}
	var fy fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&fy); err != nil {
		return nil, yamlError(name, err)
	}
	v := &validator{name: name, root: root.Content[0]}
	c := v.build(&fy, raw)
	if len(v.errs) == 0 && c.Contracts != nil && len(c.Contracts.Agents) > MaxContractAgents {
		v.errorf(v.line("contracts"), "contracts: at most %d agents", MaxContractAgents)
	}
	if len(v.errs) > 0 {
		sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].line < v.errs[j].line })
		msgs := make([]string, len(v.errs))
		for i, e := range v.errs {
			msgs[i] = e.String()
		}
		return nil, &LoadError{File: name, Problems: msgs}
	}
	return c, nil
}

// LoadError is a crew file that does not validate: every problem, each
// "file:line: message".
type LoadError struct {
	File     string
	Problems []string
}

func (e *LoadError) Error() string { return strings.Join(e.Problems, "\n") }

// yamlLine finds "line N:" in the YAML library's messages.
var yamlLine = regexp.MustCompile(`line (\d+): `)

// yamlError turns the YAML library's error into "file:line: message"
// lines, unknown fields said plainly.
func yamlError(name string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		m = tidyYAML(m)
		if loc := yamlLine.FindStringSubmatchIndex(m); loc != nil && loc[0] == 0 {
			out[i] = fmt.Sprintf("%s:%s: %s", name, m[loc[2]:loc[3]], m[loc[1]:])
		} else {
			out[i] = name + ": " + m
		}
	}
	return &LoadError{File: name, Problems: out}
}

var notFound = regexp.MustCompile(`field (\S+) not found in type crew\.(\w+)`)

func tidyYAML(m string) string {
	m = notFound.ReplaceAllString(m, "unknown field $1 (in $2)")
	for _, r := range []struct{ from, to string }{
		{"(in fileYAML)", "at the top level"}, {"(in agentYAML)", "in an agent"}, {"(in profileYAML)", "in an agent's profile"},
		{"(in handoffsYAML)", "in handoffs"}, {"(in confidenceYAML)", "in confidence"}, {"(in thresholdsYAML)", "in confidence.thresholds"},
		{"(in modelYAML)", "in a model"}, {"(in routingYAML)", "in routing"}, {"(in ruleYAML)", "in a routing rule"},
		{"(in ruleMatchYAML)", "in a routing rule's when"},
	} {
		m = strings.ReplaceAll(m, r.from, r.to)
	}
	return m
}

// problem is one validation error at a line of the file.
type problem struct {
	name string
	line int
	msg  string
}

func (p problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.name, p.line, p.msg)
	}
	return fmt.Sprintf("%s: %s", p.name, p.msg)
}

type validator struct {
	name string
	root *yaml.Node
	errs []problem
}

func (v *validator) errorf(line int, format string, args ...any) {
	v.errs = append(v.errs, problem{v.name, line, fmt.Sprintf(format, args...)})
}

// line finds a line by its path from the root: mapping keys and sequence
// indexes (as ints). A path ending in a key gives the key's line; it falls
// back to the deepest node found.
func (v *validator) line(path ...any) int {
	n := v.root
	for pi, p := range path {
		next := (*yaml.Node)(nil)
		switch k := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
						if pi == len(path)-1 || next.Line == 0 {
							next = n.Content[i] // the key: where the field is named
						}
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k >= 0 && k < len(n.Content) {
				next = n.Content[k]
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return n.Line
}

var (
	agentName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	toolName  = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// modelKinds are the model references a crew may name (the orchestrator's
// proposers; func:NAME is a proposer a Go program embedding the
// orchestrator registered, orchestrator.WithProposer).
var modelKinds = []string{"scripted", "openai", "grpc", "func"}

func checkModelRef(ref string) string {
	kind, arg, ok := strings.Cut(ref, ":")
	if !ok || arg == "" || !slices.Contains(modelKinds, kind) {
		return fmt.Sprintf("model %q is not a model reference (want scripted:FILE, openai:MODEL or grpc:ADDR)", ref)
	}
	return ""
}

func badConfidence(f float64) bool { return math.IsNaN(f) || f < 0 || f > 1 }

func (v *validator) build(fy *fileYAML, raw []byte) *Crew {
	sum := sha256.Sum256(raw)
	c := &Crew{Name: fy.Crew, Description: fy.Description, Source: v.name, SHA256: hex.EncodeToString(sum[:]), byName: map[string]*Agent{}, Models: map[string]ModelInfo{}}
	if fy.Crew == "" {
		v.errorf(v.root.Line, "crew: names the crew and is required")
	} else if !agentName.MatchString(fy.Crew) {
		v.errorf(v.line("crew"), "crew name %q: use lower case letters, digits, - and _ (up to 63)", fy.Crew)
	}
	if len(fy.Agents) == 0 {
		v.errorf(v.line("agents"), "agents: a crew needs at least one agent")
	}
	if len(fy.Agents) > MaxAgents || len(fy.Routing.Rules) > MaxRoutingRules {
		v.errorf(v.root.Line, "a crew has at most %d agents and %d routing rules (this one: %d, %d)", MaxAgents, MaxRoutingRules, len(fy.Agents), len(fy.Routing.Rules))
		return c
	}
	for i, a := range fy.Agents {
		if len(a.Tools) > MaxToolsPerAgent || len(a.HandsTo) > MaxListPerAgent || len(a.SuggestedQueries) > MaxListPerAgent ||
			len(a.Profile.Capabilities) > MaxListPerAgent || len(a.Profile.Fallbacks) > MaxListPerAgent {
			v.errorf(v.line("agents", i), "agent %d: at most %d tools and %d each of hands_to, suggested_queries, capabilities, fallbacks", i+1, MaxToolsPerAgent, MaxListPerAgent)
			return c
		}
	}
	v.history(c, fy)
	v.agents(c, fy)
	v.handoffs(c, fy)
	v.confidence(c, fy)
	v.models(c, fy)
	v.routing(c, fy)
	v.contracts(c, raw, &fy.Contracts)
	v.authority(c, fy)
	return c
}

// authority reads authority: who may end the run (end_run, default the
// entry agent) and whose assessment may lift a doubt another agent left
// on a fact (lift_doubts, default the agents whose capabilities name
// assessment: the spec's reviewer capability, part 5).
func (v *validator) authority(c *Crew, fy *fileYAML) {
	names := func(key string, list []string) []string {
		out := make([]string, 0, len(list))
		for i, n := range list {
			switch {
			case c.byName[n] == nil:
				v.errorf(v.line("authority", key, i), "authority.%s: %q is no agent of the crew", key, n)
			case slices.Contains(out, n):
				v.errorf(v.line("authority", key, i), "authority.%s names %s twice", key, n)
			default:
				out = append(out, n)
			}
		}
		return out
	}
	if l := fy.Authority.EndRun; l != nil {
		c.Authority.EndRun = names("end_run", *l)
		if len(*l) == 0 {
			v.errorf(v.line("authority", "end_run"), "authority.end_run is empty: no agent could end the run (leave it out for the entry agent)")
		}
	} else if c.Entry != "" {
		c.Authority.EndRun = []string{c.Entry}
	}
	if l := fy.Authority.LiftDoubts; l != nil {
		c.Authority.LiftDoubts = names("lift_doubts", *l)
	} else {
		c.Authority.LiftDoubts = []string{}
		for _, a := range c.Agents {
			if slices.Contains(a.Profile.Capabilities, CapabilityAssessment) {
				c.Authority.LiftDoubts = append(c.Authority.LiftDoubts, a.Name)
			}
		}
	}
}

// history reads history: own (the default) or shared.
func (v *validator) history(c *Crew, fy *fileYAML) {
	switch fy.History {
	case "", HistoryOwn:
		c.History = HistoryOwn
	case HistoryShared:
		c.History = HistoryShared
	default:
		v.errorf(v.line("history"), "history %q: %s (each agent is shown its own turns; the default) or %s (every agent is shown every agent's turns)",
			fy.History, HistoryOwn, HistoryShared)
	}
}

func (v *validator) agents(c *Crew, fy *fileYAML) {
	for i, ay := range fy.Agents {
		at := func(path ...any) int { return v.line(append([]any{"agents", i}, path...)...) }
		a := &Agent{Name: ay.Name, Description: ay.Description, Tools: ay.Tools, HandsTo: ay.HandsTo, SuggestedQueries: ay.SuggestedQueries, Line: at()}
		switch {
		case ay.Name == "":
			v.errorf(at(), "agent %d has no name", i+1)
		case !agentName.MatchString(ay.Name):
			v.errorf(at("name"), "agent name %q: use lower case letters, digits, - and _ (up to 63), starting with a letter", ay.Name)
		case c.byName[ay.Name] != nil:
			v.errorf(at("name"), "duplicate agent name %q (first defined at line %d)", ay.Name, c.byName[ay.Name].Line)
		case ay.Name == "system" || ay.Name == "orchestrator" || ay.Name == "validator" || ay.Name == "executor":
			v.errorf(at("name"), "agent name %q is reserved for XCT's own events", ay.Name)
		}
		who := ay.Name
		if who == "" {
			who = fmt.Sprintf("agent %d", i+1)
		}
		p := ay.Profile
		std, known := AgentTypes[p.Type]
		switch {
		case p.Type == "":
			v.errorf(at("profile"), "%s: profile.type is required (one of %s)", who, typeList())
		case !known:
			v.errorf(at("profile", "type"), "%s: unknown agent type %q (the spec's types: %s)", who, p.Type, typeList())
		}
		if len(p.Capabilities) == 0 {
			v.errorf(at("profile"), "%s: profile.capabilities is required (the %s type's are %s)", who, p.Type, strings.Join(std, ", "))
		}
		for j, cp := range p.Capabilities {
			switch {
			case !snakeCase.MatchString(cp):
				v.errorf(at("profile", "capabilities", j), "%s: capability %q: use snake_case", who, cp)
			case slices.Index(p.Capabilities, cp) != j:
				v.errorf(at("profile", "capabilities", j), "%s: capability %q is listed twice", who, cp)
			case known && !slices.Contains(std, cp):
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: %s: capability %q is not one of the %s type's standard ones (%s)", v.name, at("profile", "capabilities", j), who, cp, p.Type, strings.Join(std, ", ")))
			}
		}
		if p.Model == "" {
			v.errorf(at("profile"), "%s: profile.model is required", who)
		} else if m := checkModelRef(p.Model); m != "" {
			v.errorf(at("profile", "model"), "%s: %s", who, m)
		}
		for j, fb := range p.Fallbacks {
			switch {
			case checkModelRef(fb) != "":
				v.errorf(at("profile", "fallbacks", j), "%s: fallback %s", who, checkModelRef(fb))
			case fb == p.Model:
				v.errorf(at("profile", "fallbacks", j), "%s: fallback %q is the primary model", who, fb)
			case slices.Index(p.Fallbacks, fb) != j:
				v.errorf(at("profile", "fallbacks", j), "%s: fallback %q is listed twice", who, fb)
			}
		}
		a.Profile = Profile{Type: p.Type, Capabilities: p.Capabilities, Model: p.Model, Fallbacks: p.Fallbacks, ReliabilityScore: 1}
		if p.ReliabilityScore != nil {
			if badConfidence(*p.ReliabilityScore) {
				v.errorf(at("profile", "reliability_score"), "%s: reliability_score %v is not in [0, 1]", who, *p.ReliabilityScore)
			}
			a.Profile.ReliabilityScore = *p.ReliabilityScore
		}
		if len(ay.Tools) == 0 {
			v.errorf(at(), "%s: no tools: an agent must be able to propose something (list catalog tools and system tools: %s)", who, strings.Join(SystemTools, ", "))
		}
		for j, t := range ay.Tools {
			switch {
			case !toolName.MatchString(t):
				v.errorf(at("tools", j), "%s: tool %q is not a tool name", who, t)
			case slices.Index(ay.Tools, t) != j:
				v.errorf(at("tools", j), "%s: tool %q is listed twice", who, t)
			case (strings.HasPrefix(t, "xct.") || strings.HasPrefix(t, "facts.")) && !IsSystemTool(t):
				v.errorf(at("tools", j), "%s: unknown system tool %q (the system tools: %s)", who, t, strings.Join(SystemTools, ", "))
			}
		}
		for j, q := range ay.SuggestedQueries {
			if _, err := analysis.ParseQuery(q); err != nil {
				v.errorf(at("suggested_queries", j), "%s: suggested query %q: %v", who, q, err)
			}
		}
		if ay.Name != "" && c.byName[ay.Name] == nil {
			c.byName[ay.Name] = a
		}
		c.Agents = append(c.Agents, a)
	}
	// Edges, once every agent is known.
	for i, a := range c.Agents {
		for j, to := range a.HandsTo {
			line := v.line("agents", i, "hands_to", j)
			switch {
			case c.byName[to] == nil:
				v.errorf(line, "%s: hands_to %q: no agent of the crew has that name (agents: %s)", a.Name, to, strings.Join(c.AgentNames(), ", "))
			case to == a.Name:
				v.errorf(line, "%s: hands_to itself", a.Name)
			case slices.Index(a.HandsTo, to) != j:
				v.errorf(line, "%s: hands_to %q is listed twice", a.Name, to)
			}
		}
		has := a.MayPropose(ToolHandoff)
		switch {
		case len(a.HandsTo) > 0 && !has:
			v.errorf(v.line("agents", i, "tools"), "%s: may hand to %s but cannot propose %s: add it to its tools", a.Name, strings.Join(a.HandsTo, ", "), ToolHandoff)
		case len(a.HandsTo) == 0 && has:
			v.errorf(v.line("agents", i, "tools"), "%s: may propose %s but hands_to names no agent", a.Name, ToolHandoff)
		}
	}
}

func typeList() string {
	names := make([]string, 0, len(AgentTypes))
	for t := range AgentTypes {
		names = append(names, t)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func (v *validator) handoffs(c *Crew, fy *fileYAML) {
	h := fy.Handoffs
	c.Entry = h.Entry
	if c.Entry == "" && len(c.Agents) > 0 {
		c.Entry = c.Agents[0].Name
	}
	if h.Entry != "" && c.byName[h.Entry] == nil {
		v.errorf(v.line("handoffs", "entry"), "handoffs.entry %q: no agent of the crew has that name", h.Entry)
	}
	c.Handoffs = HandoffLimits{MaxDepth: DefaultMaxDepth, Cycles: CyclesForbid, MaxVisits: DefaultMaxVisits}
	if h.MaxDepth != nil {
		if *h.MaxDepth < 0 || *h.MaxDepth > 1000 {
			v.errorf(v.line("handoffs", "max_depth"), "handoffs.max_depth %d: want 0 (no handoff) to 1000", *h.MaxDepth)
		}
		c.Handoffs.MaxDepth = *h.MaxDepth
	}
	switch h.Cycles {
	case "", CyclesForbid:
	case CyclesAllow:
		c.Handoffs.Cycles = CyclesAllow
	default:
		v.errorf(v.line("handoffs", "cycles"), "handoffs.cycles %q: want %s or %s", h.Cycles, CyclesForbid, CyclesAllow)
	}
	if h.MaxVisits != nil {
		if c.Handoffs.Cycles != CyclesAllow {
			v.errorf(v.line("handoffs", "max_visits"), "handoffs.max_visits needs cycles: allow (with cycles forbidden an agent receives control at most once)")
		} else if *h.MaxVisits < 1 || *h.MaxVisits > 1000 {
			v.errorf(v.line("handoffs", "max_visits"), "handoffs.max_visits %d: want 1 to 1000", *h.MaxVisits)
		}
		c.Handoffs.MaxVisits = *h.MaxVisits
	}
	if c.Handoffs.Cycles == CyclesForbid {
		c.Handoffs.MaxVisits = 1
		if cyc := c.findCycle(); cyc != nil {
			i := slices.IndexFunc(c.Agents, func(a *Agent) bool { return a.Name == cyc[0] })
			v.errorf(v.line("agents", i, "hands_to"), "the handoff graph has a cycle %s, and handoffs.cycles is %s (set cycles: allow with max_visits to permit it)", strings.Join(cyc, " -> "), CyclesForbid)
		}
	}
	// Every agent should be reachable from the entry: an agent nobody can
	// hand to never works.
	if c.byName[c.Entry] != nil {
		reach := c.reachable(c.Entry)
		for i, a := range c.Agents {
			if a.Name != "" && !reach[a.Name] && c.byName[a.Name] == a {
				v.errorf(v.line("agents", i), "%s: no handoff path leads to it from the entry agent %s", a.Name, c.Entry)
			}
		}
	}
}

// findCycle returns a cycle of the handoff graph (first agent repeated at
// the end), or nil.
func (c *Crew) findCycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		a := c.byName[n]
		if a != nil {
			for _, to := range a.HandsTo {
				if c.byName[to] == nil {
					continue
				}
				switch color[to] {
				case grey:
					i := slices.Index(stack, to)
					found = append(append([]string{}, stack[i:]...), to)
					return true
				case white:
					if visit(to) {
						return true
					}
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, a := range c.Agents {
		if color[a.Name] == white && c.byName[a.Name] == a && visit(a.Name) {
			return found
		}
	}
	return nil
}

// reachable returns the agents a handoff path from start reaches (start
// included).
func (c *Crew) reachable(start string) map[string]bool {
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		a := c.byName[queue[0]]
		queue = queue[1:]
		if a == nil {
			continue
		}
		for _, to := range a.HandsTo {
			if !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	return seen
}

func (v *validator) confidence(c *Crew, fy *fileYAML) {
	cy := fy.Confidence
	c.Confidence = ConfidenceSettings{DecayRate: analysis.DefaultDecayRate, Thresholds: SpecThresholds, MinAssessors: DefaultMinAssessors}
	if cy.DecayRate != nil {
		if d := *cy.DecayRate; math.IsNaN(d) || d <= 0 || d > 1 {
			v.errorf(v.line("confidence", "decay_rate"), "confidence.decay_rate %v: want a rate in (0, 1] (1 turns decay off)", d)
		}
		c.Confidence.DecayRate = *cy.DecayRate
	}
	if t := cy.Thresholds; t != nil {
		for _, f := range []struct {
			name string
			v    *float64
			dst  *float64
		}{{"proceed", t.Proceed, &c.Confidence.Thresholds.Proceed}, {"warn", t.Warn, &c.Confidence.Thresholds.Warn}, {"verify", t.Verify, &c.Confidence.Thresholds.Verify}} {
			if f.v == nil {
				continue
			}
			if badConfidence(*f.v) {
				v.errorf(v.line("confidence", "thresholds", f.name), "confidence.thresholds.%s %v is not in [0, 1]", f.name, *f.v)
			}
			*f.dst = *f.v
		}
		th := c.Confidence.Thresholds
		if !(th.Verify < th.Warn && th.Warn < th.Proceed) {
			v.errorf(v.line("confidence", "thresholds"), "confidence.thresholds: want verify < warn < proceed, have %v, %v, %v", th.Verify, th.Warn, th.Proceed)
		}
	}
	if cy.MinAssessors != nil {
		if *cy.MinAssessors < 2 || *cy.MinAssessors > 100 {
			v.errorf(v.line("confidence", "min_assessors"), "confidence.min_assessors %d: a consensus takes 2 to 100 agents", *cy.MinAssessors)
		}
		c.Confidence.MinAssessors = *cy.MinAssessors
	}
}

func (v *validator) models(c *Crew, fy *fileYAML) {
	names := make([]string, 0, len(fy.Models))
	for m := range fy.Models {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		info := fy.Models[m]
		if msg := checkModelRef(m); msg != "" {
			v.errorf(v.line("models", m), "models: %s", msg)
		}
		if p := info.CostPer1KTokens; p != nil && (math.IsNaN(*p) || *p < 0 || math.IsInf(*p, 0)) {
			v.errorf(v.line("models", m, "cost_per_1k_tokens"), "models.%s.cost_per_1k_tokens %v: want a price of 0 or more", m, *p)
		}
		c.Models[m] = ModelInfo(info)
	}
}

func (v *validator) routing(c *Crew, fy *fileYAML) {
	ry := fy.Routing
	c.Routing = Routing{FallbackOn: ry.FallbackOn, FallbackConfidence: DefaultFallbackConfidence}
	if ry.FallbackOn == nil {
		c.Routing.FallbackOn = slices.Clone(FailureCodes)
	}
	for j, code := range ry.FallbackOn {
		if !slices.Contains(FailureCodes, code) {
			v.errorf(v.line("routing", "fallback_on", j), "routing.fallback_on %q: want model failure codes (%s)", code, strings.Join(FailureCodes, ", "))
		}
	}
	if ry.FallbackConfidence != nil {
		if badConfidence(*ry.FallbackConfidence) {
			v.errorf(v.line("routing", "fallback_confidence"), "routing.fallback_confidence %v is not in [0, 1]", *ry.FallbackConfidence)
		}
		c.Routing.FallbackConfidence = *ry.FallbackConfidence
	}
	byCost := false
	seen := map[string]int{}
	for i, ry := range ry.Rules {
		at := func(path ...any) int { return v.line(append([]any{"routing", "rules", i}, path...)...) }
		r := RoutingRule{Name: ry.Name, When: RuleMatch(ry.When), Model: ry.Model, Cheapest: ry.Cheapest, MaxCostPer1KTokens: ry.MaxCostPer1KTokens,
			Reason: ry.Reason, Confidence: DefaultRuleConfidence, Line: at()}
		who := ry.Name
		switch {
		case ry.Name == "":
			who = fmt.Sprintf("routing rule %d", i+1)
			v.errorf(at(), "%s has no name", who)
		case seen[ry.Name] != 0:
			v.errorf(at("name"), "routing rule %q: the name is taken (line %d)", ry.Name, seen[ry.Name])
		default:
			seen[ry.Name] = at()
		}
		w := ry.When
		if w.StepKind != "" && !slices.Contains(StepKinds, w.StepKind) {
			v.errorf(at("when", "step_kind"), "%s: step_kind %q: want one of %s", who, w.StepKind, strings.Join(StepKinds, ", "))
		}
		if _, ok := AgentTypes[w.AgentType]; w.AgentType != "" && !ok {
			v.errorf(at("when", "agent_type"), "%s: unknown agent type %q (the spec's types: %s)", who, w.AgentType, typeList())
		}
		if w.Agent != "" && c.byName[w.Agent] == nil {
			v.errorf(at("when", "agent"), "%s: agent %q: no agent of the crew has that name", who, w.Agent)
		}
		switch {
		case ry.Model != "" && ry.Cheapest:
			v.errorf(at(), "%s: give model or cheapest: true, not both", who)
		case ry.Model == "" && !ry.Cheapest:
			v.errorf(at(), "%s: give model (the model to use) or cheapest: true (the cheapest of the agent's models)", who)
		case ry.Model != "":
			if msg := checkModelRef(ry.Model); msg != "" {
				v.errorf(at("model"), "%s: %s", who, msg)
			}
		}
		if ry.MaxCostPer1KTokens != nil {
			if !ry.Cheapest {
				v.errorf(at("max_cost_per_1k_tokens"), "%s: max_cost_per_1k_tokens goes with cheapest: true", who)
			} else if p := *ry.MaxCostPer1KTokens; math.IsNaN(p) || p < 0 {
				v.errorf(at("max_cost_per_1k_tokens"), "%s: max_cost_per_1k_tokens %v: want a price of 0 or more", who, p)
			}
		}
		if ry.Cheapest {
			byCost = true
		}
		if ry.Confidence != nil {
			if badConfidence(*ry.Confidence) {
				v.errorf(at("confidence"), "%s: confidence %v is not in [0, 1]", who, *ry.Confidence)
			}
			r.Confidence = *ry.Confidence
		}
		if r.Reason == "" {
			r.Reason = ry.Name
		}
		c.Routing.Rules = append(c.Routing.Rules, r)
	}
	if byCost {
		for i, a := range c.Agents {
			for _, m := range a.Models() {
				if m != "" && c.Models[m].CostPer1KTokens == nil {
					v.errorf(v.line("agents", i, "profile"), "%s: model %q has no cost_per_1k_tokens under models:, and a routing rule routes by cost", a.Name, m)
				}
			}
		}
	}
}

// contracts parses the contracts: section with lctl's contract parser and
// checks that each contract can be satisfied by this crew.
func (v *validator) contracts(c *Crew, raw []byte, node *yaml.Node) {
	c.Contracts = analysis.NewContractSet()
	if node.Kind == 0 {
		return
	}
	if err := c.Contracts.Add(v.name, raw); err != nil {
		msg := err.Error()
		line := 0
		if rest, ok := strings.CutPrefix(msg, v.name+":"); ok {
			if n, after, ok := strings.Cut(rest, ":"); ok {
				if l, err := strconv.Atoi(n); err == nil {
					line, msg = l, strings.TrimSpace(after)
				}
			}
		}
		v.errorf(line, "contracts: %s", strings.TrimPrefix(msg, v.name+": "))
		return
	}
	for _, agent := range c.Contracts.Agents {
		ct := c.Contracts.Contracts[agent]
		a := c.byName[agent]
		if a == nil {
			v.errorf(v.line("contracts", agent), "contracts: %s: no agent of the crew has that name (agents: %s)", agent, strings.Join(c.AgentNames(), ", "))
			continue
		}
		for _, r := range ct.Outputs {
			v.checkRuleType(agent, "outputs", r)
			if r.Type == "fact" && !a.MayPropose(ToolFactsAdd) && !a.MayPropose(ToolFactsUpdate) {
				v.errorf(ruleLine(r), "contracts: %s must output facts, but cannot propose %s or %s", agent, ToolFactsAdd, ToolFactsUpdate)
			}
		}
		for _, r := range ct.Inputs {
			v.checkRuleType(agent, "inputs", r)
			if r.Type != "fact" {
				continue
			}
			v.checkInputSatisfiable(c, a, r)
		}
	}
}

func (v *validator) checkRuleType(agent, dir string, r analysis.ContractRule) {
	if r.Type != "fact" && !lctl.IsKnownType(r.Type) && r.Type != lctl.TypeHandoff {
		v.errorf(ruleLine(r), "contracts: %s.%s: rule type %q is neither fact nor an LCTL event type", agent, dir, r.Type)
	}
	if r.Type != "fact" {
		return
	}
	for _, f := range r.RequiredFields {
		if slices.Contains(eventFields, f) {
			v.errorf(ruleLine(r), "contracts: %s.%s: a fact cannot have field %s (a name the chain's readers take for the event's own; facts.add refuses it)", agent, dir, f)
		}
	}
}

// coreFactFields are the fields every fact of facts.add carries.
var coreFactFields = []string{"id", "text", "confidence", "source", "tags"}

// checkInputSatisfiable checks that some agent that can hand (directly or
// not) to a can produce facts that meet the input rule r: it can propose
// facts.add or facts.update, every required field is a core field or one
// its output contract requires, and its output values for a field are not
// all outside the input's allowed values.
func (v *validator) checkInputSatisfiable(c *Crew, a *Agent, r analysis.ContractRule) {
	var producers []*Agent
	for _, p := range c.Agents {
		if p == a || c.byName[p.Name] != p || (!p.MayPropose(ToolFactsAdd) && !p.MayPropose(ToolFactsUpdate)) {
			continue
		}
		if c.reachable(p.Name)[a.Name] {
			producers = append(producers, p)
		}
	}
	if len(producers) == 0 {
		v.errorf(ruleLine(r), "contracts: %s requires facts as input, but no agent that can hand to it can produce facts (%s)", a.Name, ToolFactsAdd)
		return
	}
	var reasons []string
	for _, p := range producers {
		if why := producerMisses(c, p, r); why != "" {
			reasons = append(reasons, p.Name+": "+why)
			continue
		}
		return
	}
	v.errorf(ruleLine(r), "contracts: %s's input cannot be satisfied by any agent that can hand to it (%s)", a.Name, strings.Join(reasons, "; "))
}

// producerMisses says why p's facts cannot meet input rule r ("" if they
// can).
func producerMisses(c *Crew, p *Agent, r analysis.ContractRule) string {
	var outs []analysis.ContractRule
	if ct := c.Contracts.Contracts[p.Name]; ct != nil {
		for _, o := range ct.Outputs {
			if o.Type == "fact" {
				outs = append(outs, o)
			}
		}
	}
	for _, f := range r.RequiredFields {
		if slices.Contains(coreFactFields, f) {
			continue
		}
		if !slices.ContainsFunc(outs, func(o analysis.ContractRule) bool { return slices.Contains(o.RequiredFields, f) }) {
			return fmt.Sprintf("its output contract does not promise field %s", f)
		}
	}
	for field, allowed := range r.Values {
		for _, o := range outs {
			theirs, ok := o.Values[field]
			if !ok {
				continue
			}
			if !slices.ContainsFunc(theirs, func(x any) bool {
				return slices.ContainsFunc(allowed, func(y any) bool { return reflect.DeepEqual(x, y) })
			}) {
				return fmt.Sprintf("its %s values %v and the input's %v have nothing in common", field, theirs, allowed)
			}
		}
	}
	return ""
}

// ruleLine is the line lctl's contract parser recorded for a rule.
func ruleLine(r analysis.ContractRule) int {
	if i := strings.LastIndex(r.Where, ":"); i >= 0 {
		if n, err := strconv.Atoi(r.Where[i+1:]); err == nil {
			return n
		}
	}
	return 0
}
