package crew

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// ModelFailure is a model call of this step that failed, with its code
// (RATE_LIMITED, GENERATION_FAILED, TIMEOUT, ...).
type ModelFailure struct {
	Model string
	Code  string
}

// RouteRequest asks which model serves the next step of an agent.
type RouteRequest struct {
	Agent    string
	StepKind string
	// Failures are this step's failed model calls, oldest first.
	Failures []ModelFailure
}

// Route is the routing decision: the model to call, and the model_routing
// event to record when the choice is not simply the agent's primary
// model (a rule matched, or a model failed). Signal is set instead when no
// model is left (or a failure is not one the crew routes around).
type Route struct {
	Model  string
	Event  *ModelRouting
	Signal *Signal
}

// Route picks the model for an agent's step: the first routing rule that
// matches orders the candidates (a named model first, or the agent's models
// by cost), otherwise the agent's primary model then its fallbacks; models
// that failed this step with a code in fallback_on are skipped.
func (c *Crew) Route(req RouteRequest) Route {
	a := c.Agent(req.Agent)
	if a == nil {
		return Route{Signal: signal("orchestration_error", "routing_failed", CodeUnknownAgent, "check_the_crew_file", false, "agent %q is not in crew %s", req.Agent, c.Name)}
	}
	if req.StepKind == "" {
		req.StepKind = KindContinue
	}
	candidates := a.Models()
	order, rule := candidates, (*RoutingRule)(nil)
	for i := range c.Routing.Rules {
		r := &c.Routing.Rules[i]
		if !r.matches(a, req.StepKind) {
			continue
		}
		if o := c.ruleOrder(r, candidates); len(o) > 0 {
			order, rule = o, r
			break
		}
	}
	failed := map[string]string{}
	var last ModelFailure
	for _, f := range req.Failures {
		if !slices.Contains(c.Routing.FallbackOn, f.Code) {
			return Route{Signal: signal("orchestration_error", "routing_failed", CodeNoModel, "retry_later", true,
				"model %s failed with %s, which crew %s does not route around (fallback_on: %s)", f.Model, f.Code, c.Name, strings.Join(c.Routing.FallbackOn, ", "))}
		}
		failed[f.Model] = f.Code
		last = f
	}
	chosen := ""
	for _, m := range order {
		if _, bad := failed[m]; !bad {
			chosen = m
			break
		}
	}
	if chosen == "" {
		return Route{Signal: signal("orchestration_error", "routing_failed", CodeNoModel, "retry_later", true,
			"every model of %s failed this step (%s)", a.Name, strings.Join(order, ", "))}
	}
	if rule == nil && len(req.Failures) == 0 {
		return Route{Model: chosen}
	}
	ev := &ModelRouting{Decision: "route_to_" + shortModel(chosen), For: a.Name, Model: chosen, StepKind: req.StepKind, AlternativesConsidered: []string{}}
	for _, m := range order {
		if m != chosen {
			ev.AlternativesConsidered = append(ev.AlternativesConsidered, m)
		}
	}
	var reasons []string
	conf := 1.0
	if rule != nil {
		ev.Rule = rule.Name
		reasons = append(reasons, rule.Reason)
		conf = rule.Confidence
	}
	if len(req.Failures) > 0 {
		ev.FailedModel, ev.FailureCode = last.Model, last.Code
		reasons = append(reasons, fmt.Sprintf("fallback_after_%s", strings.ToLower(last.Code)))
		conf = min(conf, c.Routing.FallbackConfidence)
	}
	ev.Reason = strings.Join(reasons, "; ")
	ev.Confidence = conf
	return Route{Model: chosen, Event: ev}
}

func (r *RoutingRule) matches(a *Agent, kind string) bool {
	w := r.When
	return (w.Agent == "" || w.Agent == a.Name) && (w.AgentType == "" || w.AgentType == a.Profile.Type) && (w.StepKind == "" || w.StepKind == kind)
}

// ruleOrder is the order of models a rule gives: its model then the
// agent's others, or the agent's models by cost within the rule's bound
// (empty when none is within it: the rule does not apply).
func (c *Crew) ruleOrder(r *RoutingRule, candidates []string) []string {
	if !r.Cheapest {
		out := []string{r.Model}
		for _, m := range candidates {
			if m != r.Model {
				out = append(out, m)
			}
		}
		return out
	}
	var out []string
	for _, m := range candidates {
		p := c.Models[m].CostPer1KTokens
		if p == nil || (r.MaxCostPer1KTokens != nil && *p > *r.MaxCostPer1KTokens) {
			continue
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return *c.Models[out[i]].CostPer1KTokens < *c.Models[out[j]].CostPer1KTokens })
	return out
}

var notWord = regexp.MustCompile(`[^a-z0-9]+`)

// shortModel is a model reference as a decision's name: "openai:gpt-4o" →
// "gpt_4o".
func shortModel(ref string) string {
	_, name, _ := strings.Cut(ref, ":")
	name = strings.TrimSuffix(name, ".yaml")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return strings.Trim(notWord.ReplaceAllString(strings.ToLower(name), "_"), "_")
}
