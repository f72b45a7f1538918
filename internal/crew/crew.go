// Package crew is the crew file (crew.yaml) of a governed multi-agent run
// and the crew's runtime rules, as pure functions: who the agents are (each
// with its LCTL agent profile, spec part 5), which tools each may propose,
// who may hand control to whom and how often, the agents' contracts (part
// 4), the fact store the agents pull their context from, the confidence
// gate (part 3), and model routing with fallbacks (part 10).
//
// It lives in internal/ next to the other shared plumbing rather than in a
// service: the orchestrator (which owns the loop and writes the chain), the
// validator (which enforces an agent's tools and the handoff policy) and the
// CLI (xct crew check) all read the same file with the same rules. Nothing
// here talks to the network, writes a chain or keeps a clock: every
// function takes the state it decides on and returns typed values, and
// every LCTL event payload it builds has a Go type whose Data method gives
// the event's data in the spec's field names. docs/crews.md describes the
// file and the rules, and how the orchestrator's loop is to call them.
package crew

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xct-dev/xct/lctl/analysis"
)

// System tools are the tools the crew adds to XCT's catalog. An agent
// proposes them like any other tool (one proposal, validated before it
// acts); the orchestrator, not the executor, carries them out.
const (
	ToolHandoff     = "xct.handoff"  // {to, summary}: hand control to another agent
	ToolFactsAdd    = "facts.add"    // {id, text, confidence, source, tags, ...}
	ToolFactsUpdate = "facts.update" // {id, text, confidence, reason, ...}
	ToolFactsQuery  = "facts.query"  // {query}: the spec's query language
)

// SystemTools are the system tools, in the order docs list them.
var SystemTools = []string{ToolHandoff, ToolFactsAdd, ToolFactsUpdate, ToolFactsQuery}

// IsSystemTool reports whether name is one of the crew's system tools.
func IsSystemTool(name string) bool { return slices.Contains(SystemTools, name) }

// AgentTypes is the spec's standard agent type vocabulary (part 5) with
// each type's standard capabilities.
var AgentTypes = map[string][]string{
	"executor":   {"code_execution", "file_access", "tool_use"},
	"analyzer":   {"pattern_detection", "static_analysis"},
	"reviewer":   {"assessment", "approval", "critique"},
	"planner":    {"decomposition", "prioritization", "scheduling"},
	"researcher": {"search", "synthesis", "citation"},
}

// Cycle policies of a crew's handoff graph.
const (
	// CyclesForbid refuses a crew whose handoff graph has a cycle: no
	// agent can receive control twice.
	CyclesForbid = "forbid"
	// CyclesAllow accepts cycles (a reviewer sending work back to a
	// fixer); handoffs.max_visits bounds how often an agent may receive
	// control before a handoff is refused as cycle_detected.
	CyclesAllow = "allow"
)

// Step kinds a routing rule can match. The orchestrator picks a model
// before the model proposes, so a step's kind is what is known then.
const (
	KindStart    = "start"    // the crew's first step
	KindHandoff  = "handoff"  // the first step of an agent that received control
	KindRetry    = "retry"    // the step after an error signal to the agent
	KindVerify   = "verify"   // a step the confidence gate asked for (verification)
	KindContinue = "continue" // any other step
)

// StepKinds are the step kinds, in the order docs list them.
var StepKinds = []string{KindStart, KindHandoff, KindRetry, KindVerify, KindContinue}

// FailureCodes are the model failures (docs/events.md codes) after which a
// crew may fall back to an agent's next model.
var FailureCodes = []string{"RATE_LIMITED", "GENERATION_FAILED", "TIMEOUT"}

// Defaults of a crew file.
const (
	DefaultMaxDepth           = 10
	DefaultMaxVisits          = 3
	DefaultMinAssessors       = 2
	DefaultFallbackConfidence = 0.75
	DefaultRuleConfidence     = 1.0
)

// The values of a crew file's history: what an agent's model is shown of
// the run's steps besides its brief (docs/crews.md, "What a member sees").
const (
	// HistoryOwn shows an agent its own turns only: its proposals and
	// their results. What the others did reaches it as what the crew hands
	// it explicitly: the hand-over summary and the facts in its brief. A
	// file one member may read is not in another member's context.
	HistoryOwn = "own"
	// HistoryShared shows every agent the run's whole history: every
	// member's proposals and results, those it could not have made itself
	// included.
	HistoryShared = "shared"
)

// Crew is a loaded, validated crew file. Load returns one only when every
// rule holds; its fields are then safe to use without checks.
type Crew struct {
	// Name is the crew's name (crew:).
	Name        string
	Description string
	// Agents in the file's order; Agent finds one by name.
	Agents []*Agent
	// Entry is the agent that takes the first step.
	Entry    string
	Handoffs HandoffLimits
	// Contracts are the agents' contracts, parsed by lctl's own contract
	// parser from the file's contracts: section (the crew file is also a
	// contracts file for lctl validate --contracts).
	Contracts  *analysis.ContractSet
	Confidence ConfidenceSettings
	Models     map[string]ModelInfo
	Routing    Routing
	// History is what each agent's model is shown of the run's steps
	// (history:): HistoryOwn, its own turns only (the default), or
	// HistoryShared, every agent's turns (before session 20, the only way).
	History string
	// Authority is who may end the run and whose assessments lift a
	// doubt (authority:).
	Authority Authority
	// Source is the file name Load was given.
	Source string
	// SHA256 is the hex SHA-256 of the file's bytes: what run_started and
	// the validator's CrewContext name the crew by.
	SHA256 string
	// Warnings are things that are allowed but worth a look (an agent
	// capability outside its type's standard list).
	Warnings []string

	byName map[string]*Agent
}

// Agent is one agent of a crew.
type Agent struct {
	Name        string
	Description string
	Profile     Profile
	// Tools are the tools the agent may propose: catalog tools and system
	// tools, named explicitly. The validator refuses any other.
	Tools []string
	// HandsTo are the agents it may hand control to.
	HandsTo []string
	// SuggestedQueries build its context when it receives control (the
	// spec's suggested_queries: hints, parsed at load time).
	SuggestedQueries []string
	// Line is where the agent is defined in the file.
	Line int
}

// Profile is the agent's LCTL agent profile (spec part 5) and its models.
type Profile struct {
	Type         string
	Capabilities []string
	// Model is the primary model reference (scripted:FILE, openai:MODEL,
	// grpc:ADDR); Fallbacks are tried in order when it fails.
	Model            string
	Fallbacks        []string
	ReliabilityScore float64
}

// CapabilityAssessment is the spec's reviewer capability (part 5):
// by default, the agents that have it are the ones whose assessment may
// lift a doubt another agent left on a fact.
const CapabilityAssessment = "assessment"

// Authority is who, in a crew, may do what ends or clears another
// member's work. A crew governs its members: a subordinate (or one
// steered by what it read) must not end the run before the lead's check,
// nor clear the doubt a reviewer raised.
type Authority struct {
	// EndRun are the agents whose answer done ends the run (end_run;
	// default the entry agent). Any other agent's done is refused with a
	// DONE_NOT_ALLOWED signal, and it goes on or hands over.
	EndRun []string
	// LiftDoubts are the agents whose assessment (facts.update with a
	// confidence) may raise a fact above the word another agent left it
	// at, when that word is below proceed: a doubt (lift_doubts; default
	// the agents with the assessment capability). Never the fact's own
	// author. Any other such assessment is refused with an
	// ASSESSMENT_NOT_ALLOWED signal; lowering a fact is anyone's.
	LiftDoubts []string
}

// MayEndRun reports whether agent's done ends the run.
func (c *Crew) MayEndRun(agent string) bool { return slices.Contains(c.Authority.EndRun, agent) }

// MayLiftDoubts reports whether agent's assessment may lift a doubt
// another agent left on a fact it did not add.
func (c *Crew) MayLiftDoubts(agent string) bool {
	return slices.Contains(c.Authority.LiftDoubts, agent)
}

// DeadEnds are the agents that can neither hand control on nor end the
// run (one line each): in a run their done is refused and the run goes
// on until its step budget. StartRun and xct crew check refuse such a
// crew; a run already on a chain still resumes under it.
func (c *Crew) DeadEnds() []string {
	var out []string
	for _, a := range c.Agents {
		if c.MayEndRun(a.Name) || (len(a.HandsTo) > 0 && a.MayPropose(ToolHandoff)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d: agent %s hands control to nobody and may not end the run (authority.end_run: %s): name it in end_run, or let it hand back",
			c.Source, a.Line, a.Name, strings.Join(c.Authority.EndRun, ", ")))
	}
	return out
}

// HandoffLimits bound the handoffs of a run.
type HandoffLimits struct {
	// MaxDepth is the most handoffs a run may make (chain_depth_exceeded
	// beyond).
	MaxDepth int
	// Cycles is CyclesForbid or CyclesAllow.
	Cycles string
	// MaxVisits is how often one agent may receive control, with cycles
	// allowed (cycle_detected beyond). With cycles forbidden it is 1.
	MaxVisits int
}

// ConfidenceSettings are the spec's confidence system (part 3) for a crew.
type ConfidenceSettings struct {
	// DecayRate multiplies every fact's confidence at each hop (a step by
	// another agent than the step before).
	DecayRate  float64
	Thresholds Thresholds
	// MinAssessors is how many agents must assess a fact before its
	// change carries a consensus block.
	MinAssessors int
}

// Thresholds are the lower bounds of the spec's confidence bands: at or
// above Proceed proceeds, at or above Warn proceeds with a warning, at or
// above Verify requests verification, below Verify blocks for a human.
type Thresholds struct {
	Proceed float64
	Warn    float64
	Verify  float64
}

// SpecThresholds are the spec's table: 0.80, 0.60, 0.40.
var SpecThresholds = Thresholds{Proceed: analysis.ThresholdProceed, Warn: analysis.ThresholdWarn, Verify: analysis.ThresholdVerify}

// ModelInfo is what a crew says of a model: its price, for routing by
// cost.
type ModelInfo struct {
	// CostPer1KTokens is in dollars; nil when the file gives none.
	CostPer1KTokens *float64
}

// Routing is how a crew picks an agent's model for a step.
type Routing struct {
	// FallbackOn are the failure codes after which the next model of the
	// agent is tried; any other failure is not routed around.
	FallbackOn []string
	// FallbackConfidence is the confidence recorded on a fallback's
	// model_routing event.
	FallbackConfidence float64
	// Rules are tried in order; the first that matches decides.
	Rules []RoutingRule
}

// RoutingRule picks a model for the steps it matches.
type RoutingRule struct {
	Name string
	When RuleMatch
	// Model is the model to use; with Cheapest the rule instead takes the
	// cheapest of the agent's models (within MaxCostPer1KTokens).
	Model              string
	Cheapest           bool
	MaxCostPer1KTokens *float64
	Reason             string
	Confidence         float64
	Line               int
}

// RuleMatch is the conditions of a rule; empty ones match anything.
type RuleMatch struct {
	StepKind  string
	AgentType string
	Agent     string
}

// Agent returns the agent with that name, or nil.
func (c *Crew) Agent(name string) *Agent { return c.byName[name] }

// AgentNames returns the agents' names in the file's order.
func (c *Crew) AgentNames() []string {
	out := make([]string, len(c.Agents))
	for i, a := range c.Agents {
		out[i] = a.Name
	}
	return out
}

// MayPropose reports whether the agent may propose the tool: the check the
// validator makes on every proposal of a crew run.
func (a *Agent) MayPropose(tool string) bool { return slices.Contains(a.Tools, tool) }

// MayHandTo reports whether the agent may hand control to the other.
func (a *Agent) MayHandTo(to string) bool { return slices.Contains(a.HandsTo, to) }

// Models returns the agent's primary model then its fallbacks.
func (a *Agent) Models() []string { return append([]string{a.Profile.Model}, a.Profile.Fallbacks...) }

// ModelRefs returns every model reference a run of the crew may call: the
// agents' models and fallbacks and the routing rules' models, sorted,
// each once. A crew run's cost is priced at the dearest of them.
func (c *Crew) ModelRefs() []string {
	var out []string
	for _, a := range c.Agents {
		out = append(out, a.Models()...)
	}
	for _, r := range c.Routing.Rules {
		if r.Model != "" {
			out = append(out, r.Model)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Band places a confidence in the thresholds' bands (analysis.Band*
// names: proceed, warn, verify, block).
func (t Thresholds) Band(c float64) string {
	switch {
	case c >= t.Proceed:
		return analysis.BandProceed
	case c >= t.Warn:
		return analysis.BandWarn
	case c >= t.Verify:
		return analysis.BandVerify
	}
	return analysis.BandBlock
}
