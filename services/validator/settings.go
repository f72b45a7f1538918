package validator

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// Defaults and bounds of a policy's settings.
const (
	// DefaultApprovalTTL is how long an approval stays valid when the
	// policy does not say (approval_ttl).
	DefaultApprovalTTL = time.Hour
	maxApprovalTTL     = 30 * 24 * time.Hour
	maxRateCount       = 100_000
	minRateWindow      = time.Second
	maxRateWindow      = 24 * time.Hour

	// The LCTL confidence thresholds (spec part 3).
	defaultProceed = 0.80
	defaultWarn    = 0.60
	defaultVerify  = 0.40
)

// Reason ids of the built-in checks that a policy's settings drive.
const (
	reasonBudget     = "builtin.budget"
	reasonConfidence = "builtin.confidence"
	reasonRateLimit  = "builtin.rate_limit"
	reasonApproval   = "approval"
)

// policyMode says whether a policy file's verdicts are enforced or only
// recorded.
type policyMode uint8

const (
	modeEnforce policyMode = iota
	modeShadow
)

func (m policyMode) String() string {
	if m == modeShadow {
		return "shadow"
	}
	return "enforce"
}

// UnmarshalYAML reads "enforce" or "shadow".
func (m *policyMode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "enforce":
			*m = modeEnforce
			return nil
		case "shadow":
			*m = modeShadow
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: mode %s is not one of enforce, shadow", n.Line, nodeText(n))}}
}

// yamlDuration is a duration written with its unit ("90s", "30m", "1h").
// A bare number is refused: 3600 could mean seconds or nanoseconds.
type yamlDuration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *yamlDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if v, err := time.ParseDuration(n.Value); err == nil && strings.ContainsAny(n.Value, "hmsuµn") {
			*d = yamlDuration(v)
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s is not a duration with a unit, such as 90s, 30m or 1h", n.Line, nodeText(n))}}
}

// rate is "at most n calls per window".
type rate struct {
	n      int
	window time.Duration
}

func (r rate) String() string { return strconv.Itoa(r.n) + "/" + r.window.String() }

// UnmarshalYAML reads "N/DURATION", e.g. "10/1m"; a bare unit means one
// of it ("10/m" is "10/1m").
func (r *rate) UnmarshalYAML(n *yaml.Node) error {
	bad := func(why string) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: rate %s %s; write N/DURATION, e.g. 10/1m", n.Line, nodeText(n), why)}}
	}
	if n.Kind != yaml.ScalarNode {
		return bad("is not a plain value")
	}
	count, window, ok := strings.Cut(n.Value, "/")
	if !ok {
		return bad("has no '/'")
	}
	c, err := strconv.Atoi(strings.TrimSpace(count))
	if err != nil || c < 1 || c > maxRateCount {
		return bad(fmt.Sprintf("has a count that is not between 1 and %d", maxRateCount))
	}
	window = strings.TrimSpace(window)
	if window == "s" || window == "m" || window == "h" {
		window = "1" + window
	}
	w, err := time.ParseDuration(window)
	if err != nil || w < minRateWindow || w > maxRateWindow {
		return bad(fmt.Sprintf("has a window that is not a duration between %v and %v", minRateWindow, maxRateWindow))
	}
	*r = rate{n: c, window: w}
	return nil
}

// confidenceSpec is the YAML shape of the confidence thresholds.
type confidenceSpec struct {
	Proceed *float64 `yaml:"proceed"`
	Warn    *float64 `yaml:"warn"`
	Verify  *float64 `yaml:"verify"`
}

// budgetSpec is the YAML shape of a policy's run budgets.
type budgetSpec struct {
	MaxSteps             *int64        `yaml:"max_steps"`
	MaxWallTime          *yamlDuration `yaml:"max_wall_time"`
	MaxTokens            *int64        `yaml:"max_tokens"`
	MaxCostUSD           *float64      `yaml:"max_cost_usd"`
	MaxConsecutiveErrors *int64        `yaml:"max_consecutive_errors"`
}

// priceSpec is the YAML shape of one model's price.
type priceSpec struct {
	InputPer1K  *float64 `yaml:"input_per_1k"`
	OutputPer1K *float64 `yaml:"output_per_1k"`
}

// rateLimitSpec is the YAML shape of one rate limit.
type rateLimitSpec struct {
	Tool         string `yaml:"tool"`
	PerRun       *rate  `yaml:"per_run"`
	PerPrincipal *rate  `yaml:"per_principal"`
	Global       *rate  `yaml:"global"`
}

// thresholds are the confidence gate's bounds: at or above proceed a
// proposal passes, at or above warn it passes with a warning, at or above
// verify it needs a human, below verify it is denied.
type thresholds struct {
	proceed, warn, verify float64
}

func defaultThresholds() thresholds {
	return thresholds{proceed: defaultProceed, warn: defaultWarn, verify: defaultVerify}
}

// budgets are a run's limits; zero means no limit.
type budgets struct {
	maxSteps    int64
	maxWallTime time.Duration
	maxTokens   int64
	maxCostUSD  float64
	maxErrors   int64
}

// price is a model's price in US dollars per 1000 tokens.
type price struct {
	inPer1K, outPer1K float64
}

// rateLimit is a checked rate limit on the tools matching pattern.
type rateLimit struct {
	pattern string
	perRun  rate // n == 0: none
	// perPrincipal counts the calls of every run of one principal
	// together: a principal's parallel runs share it.
	perPrincipal rate // n == 0: none
	global       rate // n == 0: none
	file         string
	line         int
}

// settings are everything a policy says besides its rules.
type settings struct {
	approvalTTL time.Duration
	confidence  thresholds
	// ttlSet and confidenceSet say the file gave them (not the defaults).
	ttlSet, confidenceSet bool
	budgets               budgets
	prices                map[string]price
	priceLines            map[string]int // where each price is written, for errors
	rateLimits            []rateLimit
}

func defaultSettings() settings {
	return settings{approvalTTL: DefaultApprovalTTL, confidence: defaultThresholds()}
}

// merge folds o into s for a policy made of several files: of the values
// the files give, the strictest wins (the smallest budget and approval
// TTL, the highest confidence thresholds); a setting no file gives keeps
// its default. Rate limits add up, and prices must not disagree. It
// returns the models whose prices conflict.
func (s *settings) merge(o *settings) (conflicts []string) {
	switch {
	case o.ttlSet && s.ttlSet:
		s.approvalTTL = min(s.approvalTTL, o.approvalTTL)
	case o.ttlSet:
		s.approvalTTL, s.ttlSet = o.approvalTTL, true
	}
	switch {
	case o.confidenceSet && s.confidenceSet:
		s.confidence.proceed = max(s.confidence.proceed, o.confidence.proceed)
		s.confidence.warn = max(s.confidence.warn, o.confidence.warn)
		s.confidence.verify = max(s.confidence.verify, o.confidence.verify)
	case o.confidenceSet:
		s.confidence, s.confidenceSet = o.confidence, true
	}
	s.budgets.maxSteps = minLimit(s.budgets.maxSteps, o.budgets.maxSteps)
	s.budgets.maxWallTime = minLimit(s.budgets.maxWallTime, o.budgets.maxWallTime)
	s.budgets.maxTokens = minLimit(s.budgets.maxTokens, o.budgets.maxTokens)
	s.budgets.maxCostUSD = minLimit(s.budgets.maxCostUSD, o.budgets.maxCostUSD)
	s.budgets.maxErrors = minLimit(s.budgets.maxErrors, o.budgets.maxErrors)
	for model, p := range o.prices {
		if s.prices == nil {
			s.prices = map[string]price{}
		}
		if cur, ok := s.prices[model]; ok && cur != p {
			conflicts = append(conflicts, model)
			continue
		}
		s.prices[model] = p
	}
	s.rateLimits = append(s.rateLimits, o.rateLimits...)
	return conflicts
}

// minLimit is the smaller of two limits where zero means none.
func minLimit[T int64 | float64 | time.Duration](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// priceOf finds the price of a model reference: the exact reference
// ("openai:gpt-4o-mini"), then the name after the adapter prefix
// ("gpt-4o-mini"), then the adapter's every model ("scripted:*"), then
// "*".
func priceOf(model string, prices map[string]price) (price, bool) {
	if p, ok := prices[model]; ok {
		return p, true
	}
	if adapter, name, ok := strings.Cut(model, ":"); ok {
		if p, ok := prices[name]; ok {
			return p, true
		}
		if p, ok := prices[adapter+":*"]; ok {
			return p, true
		}
	}
	p, ok := prices["*"]
	return p, ok
}

// runCost is what the run's tokens cost at its model's price. A run that
// used no tokens costs nothing whatever its model; unpriced names the
// model without a price when it used some (the cost is then unknown). A
// crew run (models given) is priced at the dearest of the models it may
// call, input and output each: its own model, "crew:NAME", is no price
// table's, and "*" would make it as cheap as the table's cheapest.
func runCost(run *xctv1.RunContext, prices map[string]price) (cost float64, unpriced string) {
	in, out := run.GetInputTokens(), run.GetOutputTokens()
	if in <= 0 && out <= 0 {
		return 0, ""
	}
	models := run.GetModels()
	if len(models) == 0 {
		models = []string{run.GetModel()}
	}
	var p price
	for _, m := range models {
		mp, ok := priceOf(m, prices)
		if !ok {
			return 0, m
		}
		p.inPer1K, p.outPer1K = max(p.inPer1K, mp.inPer1K), max(p.outPer1K, mp.outPer1K)
	}
	return float64(max(in, 0))/1000*p.inPer1K + float64(max(out, 0))/1000*p.outPer1K, ""
}

// breach is a run budget that is used up.
type breach struct {
	budget  string // the policy key, e.g. "max_steps"
	used    any
	limit   any
	message string
	code    wire.Code
	endsRun bool
}

// check returns the first budget the run has used up, or nil. A budget is
// used up when the amount used is greater than its maximum; consecutive
// errors when they reach it. Budgets that cannot recover (steps, wall time,
// tokens, cost) end the run. Consecutive errors refuse the step and leave
// the model one turn to finish; once more, and the run ends.
func (b *budgets) check(run *xctv1.RunContext, prices map[string]price) *breach {
	if b.maxSteps > 0 {
		if used := int64(run.GetStepsUsed()); used > b.maxSteps {
			return &breach{budget: "max_steps", used: used, limit: b.maxSteps, endsRun: true, code: wire.CodeBudgetExceeded,
				message: fmt.Sprintf("the run's step budget is used up: this is step %d of at most %d", used, b.maxSteps)}
		}
	}
	if b.maxWallTime > 0 {
		if used := run.GetElapsed().AsDuration(); used > b.maxWallTime {
			return &breach{budget: "max_wall_time", used: used.Round(time.Millisecond).String(), limit: b.maxWallTime.String(), endsRun: true, code: wire.CodeBudgetExceeded,
				message: fmt.Sprintf("the run's wall time budget is used up: %v elapsed of at most %v", used.Round(time.Millisecond), b.maxWallTime)}
		}
	}
	if b.maxTokens > 0 {
		if used := run.GetInputTokens() + run.GetOutputTokens(); used > b.maxTokens {
			return &breach{budget: "max_tokens", used: used, limit: b.maxTokens, endsRun: true, code: wire.CodeBudgetExceeded,
				message: fmt.Sprintf("the run's token budget is used up: %d tokens of at most %d", used, b.maxTokens)}
		}
	}
	if b.maxCostUSD > 0 {
		cost, unpriced := runCost(run, prices)
		if unpriced != "" {
			return &breach{budget: "max_cost_usd", used: "unknown", limit: b.maxCostUSD, endsRun: true, code: wire.CodePolicyDenied,
				message: fmt.Sprintf("the policy limits the run's cost to $%s but has no price for model %s, so the cost cannot be checked",
					formatNumber(b.maxCostUSD), quoteName(unpriced))}
		}
		if cost > b.maxCostUSD {
			return &breach{budget: "max_cost_usd", used: roundCents(cost), limit: b.maxCostUSD, endsRun: true, code: wire.CodeBudgetExceeded,
				message: fmt.Sprintf("the run's cost budget is used up: $%s of at most $%s", formatNumber(roundCents(cost)), formatNumber(b.maxCostUSD))}
		}
	}
	if b.maxErrors > 0 {
		if used := int64(run.GetConsecutiveErrors()); used >= b.maxErrors {
			return &breach{budget: "max_consecutive_errors", used: used, limit: b.maxErrors, endsRun: used > b.maxErrors, code: wire.CodeBudgetExceeded,
				message: fmt.Sprintf("the run had %d errors in a row (at most %d); finish with done", used, b.maxErrors)}
		}
	}
	return nil
}

// outcome is the policy outcome of a budget breach.
func (br *breach) outcome() Outcome {
	return Outcome{
		Decision: xctv1.VerdictDecision_VERDICT_DECISION_DENY,
		Reasons:  []*xctv1.Reason{{RuleId: reasonBudget, Message: br.message}},
		Message:  br.message,
		Code:     br.code,
		EndsRun:  br.endsRun,
		Details:  map[string]any{"budget": br.budget, "used": jsonNumber(br.used), "limit": jsonNumber(br.limit), "ends_run": br.endsRun},
	}
}

// jsonNumber turns integer values into float64, the only number structpb
// takes.
func jsonNumber(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return v
}

func roundCents(v float64) float64 { return math.Ceil(v*10000) / 10000 }

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// checkSettings checks a decoded policy's settings and converts them. Each
// problem is reported through add with the line of the offending key.
func checkSettings(spec *ruleFile, file string, lines *nodeIndex, add func(line int, format string, args ...any)) settings {
	s := defaultSettings()
	if spec.ApprovalTTL != nil {
		d := time.Duration(*spec.ApprovalTTL)
		if d <= 0 || d > maxApprovalTTL {
			add(lines.line("approval_ttl"), "approval_ttl %v is not between 1s and %v", d, maxApprovalTTL)
		} else {
			s.approvalTTL, s.ttlSet = d, true
		}
	}
	if c := spec.Confidence; c != nil {
		t := defaultThresholds()
		for _, f := range []struct {
			key string
			v   *float64
			dst *float64
		}{{"proceed", c.Proceed, &t.proceed}, {"warn", c.Warn, &t.warn}, {"verify", c.Verify, &t.verify}} {
			if f.v == nil {
				continue
			}
			if math.IsNaN(*f.v) || *f.v < 0 || *f.v > 1 {
				add(lines.line("confidence", f.key), "confidence.%s %v is not between 0 and 1", f.key, *f.v)
				continue
			}
			*f.dst = *f.v
		}
		if t.verify > t.warn || t.warn > t.proceed {
			add(lines.line("confidence"), "confidence thresholds must satisfy verify <= warn <= proceed (got verify %v, warn %v, proceed %v)",
				t.verify, t.warn, t.proceed)
		}
		s.confidence, s.confidenceSet = t, true
	}
	if b := spec.Budgets; b != nil {
		intBudget := func(key string, v *int64, dst *int64) {
			if v == nil {
				return
			}
			if *v < 0 {
				add(lines.line("budgets", key), "budgets.%s %d is negative; leave it out (or 0) for no limit", key, *v)
				return
			}
			*dst = *v
		}
		intBudget("max_steps", b.MaxSteps, &s.budgets.maxSteps)
		intBudget("max_tokens", b.MaxTokens, &s.budgets.maxTokens)
		intBudget("max_consecutive_errors", b.MaxConsecutiveErrors, &s.budgets.maxErrors)
		if b.MaxWallTime != nil {
			if d := time.Duration(*b.MaxWallTime); d < 0 {
				add(lines.line("budgets", "max_wall_time"), "budgets.max_wall_time %v is negative", d)
			} else {
				s.budgets.maxWallTime = d
			}
		}
		if b.MaxCostUSD != nil {
			if v := *b.MaxCostUSD; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				add(lines.line("budgets", "max_cost_usd"), "budgets.max_cost_usd %v is not a non-negative number", v)
			} else {
				s.budgets.maxCostUSD = v
			}
		}
	}
	if len(spec.Prices) > 0 {
		s.prices = make(map[string]price, len(spec.Prices))
		s.priceLines = make(map[string]int, len(spec.Prices))
	}
	for model, p := range spec.Prices {
		line := lines.line("prices", model)
		if strings.TrimSpace(model) == "" {
			add(line, "prices: a model name is empty")
			continue
		}
		if p.InputPer1K == nil || p.OutputPer1K == nil {
			add(line, "prices.%s needs both input_per_1k and output_per_1k", model)
			continue
		}
		in, out := *p.InputPer1K, *p.OutputPer1K
		if math.IsNaN(in) || math.IsNaN(out) || math.IsInf(in, 0) || math.IsInf(out, 0) || in < 0 || out < 0 {
			add(line, "prices.%s: prices must be non-negative numbers", model)
			continue
		}
		s.prices[model] = price{inPer1K: in, outPer1K: out}
		s.priceLines[model] = line
	}
	for i, rl := range spec.RateLimits {
		line := lines.itemLine("rate_limits", i)
		if msg := checkPattern(rl.Tool); msg != "" {
			add(line, "rate limit %d: tool pattern %q %s", i+1, truncate(rl.Tool, maxPatternLen), msg)
			continue
		}
		if rl.PerRun == nil && rl.PerPrincipal == nil && rl.Global == nil {
			add(line, "rate limit %d: give per_run, per_principal, global or more than one", i+1)
			continue
		}
		l := rateLimit{pattern: rl.Tool, file: file, line: line}
		if rl.PerRun != nil {
			l.perRun = *rl.PerRun
		}
		if rl.PerPrincipal != nil {
			l.perPrincipal = *rl.PerPrincipal
		}
		if rl.Global != nil {
			l.global = *rl.Global
		}
		s.rateLimits = append(s.rateLimits, l)
	}
	return s
}
