package crew

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// SystemToolDescriptor is the catalog entry of a system tool, as the
// model and the validator see it: its schema (SystemToolSchemas), effect
// read for facts.query and reversible for the others (they change the
// run's own state, nothing outside it), source "crew". nil for a name that
// is no system tool.
func SystemToolDescriptor(name string) *xctv1.ToolDescriptor {
	schema, ok := SystemToolSchemas[name]
	if !ok {
		return nil
	}
	d := &xctv1.ToolDescriptor{Name: name, Description: systemToolDescriptions[name], InputSchema: schema,
		Effect: xctv1.Effect_EFFECT_REVERSIBLE, Source: "crew", EffectFrom: "builtin", Timeout: durationpb.New(0), MaxOutputBytes: 1 << 20}
	if name == ToolFactsQuery {
		d.Effect, d.Idempotent = xctv1.Effect_EFFECT_READ, true
	}
	return d
}

var systemToolDescriptions = map[string]string{
	ToolHandoff:     "Hand control to another agent of the crew, with a summary of what it should do. Your output contract and its input contract are checked first.",
	ToolFactsAdd:    "Record a new fact in the crew's fact store: id, text, confidence in [0, 1], source, tags; other fields under fields.",
	ToolFactsUpdate: "Change a fact: a reason is required; a confidence is your assessment of it (several agents' assessments make a consensus).",
	ToolFactsQuery:  "Query the crew's fact store: SELECT * | fields [FROM facts] [WHERE ...] [ORDER BY ...] [LIMIT n].",
}

// Catalog is the catalog of the agent in control: the tools of the run's
// catalog all that its crew file lists, in the file's order, and its
// system tools. A listed tool the run's catalog does not have is left out
// (the validator would refuse it as unknown).
func (s *Session) Catalog(all []*xctv1.ToolDescriptor) []*xctv1.ToolDescriptor {
	a := s.Current()
	out := make([]*xctv1.ToolDescriptor, 0, len(a.Tools))
	for _, name := range a.Tools {
		if d := SystemToolDescriptor(name); d != nil {
			out = append(out, d)
			continue
		}
		for _, t := range all {
			if t.GetName() == name {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// ReliesOn are the facts a proposal of tool with args and goal, by the
// agent in control, relies on, for the confidence gate: every fact
// another agent has given a confidence (the agent's inputs: what it is
// handed to work on, whether or not its proposal names them), and the
// facts whose id the goal or an argument names as a word ("fix F1"). Which
// facts count is not the proposing model's choice: a step that names no
// fact still relies on what the others doubt. The system tools rely on
// none: they are how a low confidence is repaired (facts.update) or sent
// to a verifier (xct.handoff), so the gate must not stop them.
func (s *Session) ReliesOn(tool string, args map[string]any, goal string) []*Fact {
	if IsSystemTool(tool) {
		return nil
	}
	agent := s.Current().Name
	words := map[string]bool{}
	addWords(words, goal)
	budget := 10000 // values visited: arguments are bounded by the validator, this bounds the walk anyway
	var walk func(v any)
	walk = func(v any) {
		if budget--; budget < 0 {
			return
		}
		switch x := v.(type) {
		case string:
			addWords(words, x)
		case []any:
			for _, y := range x {
				walk(y)
			}
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(args)
	var out []*Fact
	for _, f := range s.store.Facts() {
		if _, others := f.GateConfidence(agent); others || words[f.ID] {
			out = append(out, f)
		}
	}
	return out
}

// addWords adds the words of text: runs of the characters a fact id may
// have, without the punctuation that may end a sentence.
func addWords(words map[string]bool, text string) {
	if len(text) > 64<<10 {
		text = text[:64<<10]
	}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' && r != '.' && r != ':' && r != '-'
	}) {
		if w = strings.TrimRight(w, ".:-"); w != "" {
			words[w] = true
		}
	}
}

// CrewContext is what the validator is told of a proposal of tool by the
// agent in control: the agent, its tools, the thresholds, the facts the
// proposal relies on (ReliesOn) and its verifier.
func (s *Session) CrewContext(tool string, args map[string]any, goal string) *xctv1.CrewContext {
	a := s.Current()
	th := s.crew.Confidence.Thresholds
	cc := &xctv1.CrewContext{
		Crew: s.crew.Name, CrewSha256: s.crew.SHA256, Agent: a.Name, AgentType: a.Profile.Type, Tools: slices.Clone(a.Tools),
		Thresholds:  &xctv1.CrewThresholds{Proceed: th.Proceed, Warn: th.Warn, Verify: th.Verify},
		Verifier:    s.crew.verifierFor(a.Name),
		HandoffPath: slices.Clone(s.hs.Path),
	}
	for _, f := range s.ReliesOn(tool, args, goal) {
		c, _ := f.GateConfidence(a.Name)
		cc.ReliesOn = append(cc.ReliesOn, &xctv1.FactConfidence{Id: f.ID, Confidence: c})
	}
	return cc
}

// Outcome is what a system tool proposal came to: the events to append,
// in order, then either the result for the model (Signal nil: the loop
// records it as the step's tool_call output, outcome success) or the
// signal (the loop records it as the step's error, outcome error).
type Outcome struct {
	Events []Emit
	Result any
	Signal *Signal
}

// Carry carries out an allowed proposal of a system tool by agent: the
// orchestrator calls it after the allow verdict is on the chain, never the
// executor. facts.add and facts.update give fact_added / fact_modified
// (with the consensus block once enough agents assessed the fact);
// facts.query gives the facts (no event: the tool_call records them);
// xct.handoff gives the contract validations and, when they hold, the
// handoff. A refusal (bad arguments, a fact the store refuses, an agent not
// in control, a tool the agent may not propose, a handoff the rules or the
// contracts refuse) is the signal, with the taxonomy's code; the contract
// validations are recorded even then.
func (s *Session) Carry(agent, tool string, args map[string]any) Outcome {
	if !IsSystemTool(tool) {
		return Outcome{Signal: signal("input_error", "invalid_format", "UNKNOWN_TOOL", "choose_a_tool_from_the_catalog", true, "%s is no system tool of the crew", tool)}
	}
	if sig := s.crew.CheckTool(agent, tool); sig != nil {
		return Outcome{Signal: sig}
	}
	if agent != s.hs.Current {
		return Outcome{Signal: signal("orchestration_error", "delegation_rejected", CodeNotInControl, "wait_for_control", false,
			"%s is not in control (%s is)", agent, s.hs.Current)}
	}
	switch tool {
	case ToolFactsAdd, ToolFactsUpdate:
		in, sig := ParseFactArgs(tool, args)
		if sig != nil {
			return Outcome{Signal: sig}
		}
		if tool == ToolFactsUpdate {
			if sig := s.checkLift(agent, in); sig != nil {
				return Outcome{Signal: sig}
			}
		}
		scratch := s.store.Clone()
		var p Payload
		if tool == ToolFactsAdd {
			fa, sig := scratch.Add(agent, in)
			if sig != nil {
				return Outcome{Signal: sig}
			}
			p = fa
		} else {
			fm, sig := scratch.Update(agent, in)
			if sig != nil {
				return Outcome{Signal: sig}
			}
			p = fm
		}
		f := scratch.Fact(in.ID)
		res := map[string]any{"fact": s.View(f)}
		if fm, ok := p.(FactModified); ok && fm.Consensus != nil {
			res["consensus"] = fm.Consensus
		}
		return Outcome{Events: []Emit{{Agent: agent, Payload: p}}, Result: jsonValue(res)}
	case ToolFactsQuery:
		q, sig := ParseQueryArgs(args)
		if sig != nil {
			return Outcome{Signal: sig}
		}
		got, sig := s.store.Query(q.Query)
		if sig != nil {
			return Outcome{Signal: sig}
		}
		res := map[string]any{"count": len(got)}
		if len(got) > MaxContextFacts {
			got, res["truncated_to"] = got[:MaxContextFacts], MaxContextFacts
		}
		res["facts"] = s.views(got)
		return Outcome{Result: jsonValue(res)}
	default: // ToolHandoff
		h, sig := ParseHandoff(args)
		if sig != nil {
			return Outcome{Signal: sig}
		}
		r := s.crew.Handoff(s.hs.clone(), s.store, agent, h.To, h.Summary)
		var out Outcome
		for _, v := range r.Validations {
			out.Events = append(out.Events, Emit{Agent: AgentSystem, Payload: v})
		}
		if r.Signal != nil {
			out.Signal = r.Signal
			return out
		}
		out.Events = append(out.Events, Emit{Agent: agent, Payload: *r.Handoff})
		out.Result = jsonValue(map[string]any{"handed_to": h.To, "depth": r.Handoff.Depth, "facts": s.views(r.Context)})
		return out
	}
}

// checkLift refuses an assessment by agent that lifts a doubt it may not
// lift: another agent left the fact below proceed, the new confidence is
// higher than that word, and agent is not in the crew's
// authority.lift_doubts or is the fact's author (a member other than the
// one assessed verifies). Lowering a fact, an update without a
// confidence, or raising a fact no other agent doubts is anyone's. The
// rule governs proposals only: a chain written before it was kept still
// replays (FactStore.Update does not apply it).
func (s *Session) checkLift(agent string, in FactInput) *Signal {
	f := s.store.Fact(in.ID)
	if f == nil || in.Confidence == nil {
		return nil
	}
	word, ok := f.OthersWord(agent)
	th := s.crew.Confidence.Thresholds
	if !ok || word >= th.Proceed || *in.Confidence <= word {
		return nil
	}
	why := "the crew's authority.lift_doubts does not name it (" + strings.Join(s.crew.Authority.LiftDoubts, ", ") + ")"
	if len(s.crew.Authority.LiftDoubts) == 0 {
		why = "the crew's authority.lift_doubts names nobody: a human decides at the confidence gate"
	}
	switch {
	case f.AddedBy == agent:
		why = "it added the fact: another member verifies it"
	case s.crew.MayLiftDoubts(agent):
		return nil
	}
	sig := signal("output_error", "validation_failed", CodeAssessmentNotAllowed, "keep_the_doubt_or_hand_to_a_reviewer", true,
		"%s may not lift the doubt on fact %s: another agent left it at %.2f (below %.2f), and %s; give it at most %.2f, or leave it to a reviewer",
		agent, f.ID, round(word), th.Proceed, why, round(word))
	sig.Details = map[string]any{"fact": f.ID, "others_confidence": round(word), "proposed": *in.Confidence, "author": f.AddedBy,
		"lift_doubts": slices.Clone(s.crew.Authority.LiftDoubts)}
	return sig
}

// Proto is the signal as the error the model receives (the loop records
// it as the step's error event).
func (sig *Signal) Proto() *xctv1.Error {
	e := &xctv1.Error{Code: sig.Code, Message: sig.Message, Category: sig.Category, Type: sig.Type,
		Recoverable: sig.Recoverable, SuggestedAction: sig.SuggestedAction}
	if len(sig.Details) > 0 {
		if d, ok := jsonValue(sig.Details).(map[string]any); ok {
			e.Details, _ = structpb.NewStruct(d)
		}
	}
	return e
}

// CheckCatalog reports the catalog tools the crew's agents list that the
// run's catalog does not have, one line per agent ("agent code-analyzer
// lists fs.list, which the tool catalog does not have"): StartRun refuses
// such a crew (InvalidArgument) rather than let an agent find out by a
// refusal. nil when every listed tool is there.
func (c *Crew) CheckCatalog(all []*xctv1.ToolDescriptor) error {
	have := make(map[string]bool, len(all))
	for _, t := range all {
		have[t.GetName()] = true
	}
	var problems []string
	for _, a := range c.Agents {
		var missing []string
		for _, t := range a.Tools {
			if !IsSystemTool(t) && !have[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("agent %s lists %s, which the tool catalog does not have", a.Name, strings.Join(missing, ", ")))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &LoadError{File: c.Source, Problems: problems}
}
