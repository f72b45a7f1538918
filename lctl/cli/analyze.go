package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

func runDiff(ctx context.Context, c *cmdContext) error {
	c.common()
	ignore := c.fs.String("ignore", "", "more data fields to leave out of the comparison, comma-separated")
	strict := c.fs.Bool("strict", false, "compare every data field, timings and ids included")
	limit := c.fs.Int("max", 50, "differences listed in text output (0: all)")
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.operands) != 2 {
		return usagef("diff compares two chains (files, or --chain ID), got %d", len(c.operands))
	}
	a, err := c.load(ctx, c.operands[0])
	if err != nil {
		return err
	}
	b, err := c.load(ctx, c.operands[1])
	if err != nil {
		return err
	}
	c.reportInput(a)
	c.reportInput(b)
	fields := append([]string{}, analysis.DefaultDiffIgnore()...)
	if *strict {
		fields = []string{}
	}
	for _, f := range strings.Split(*ignore, ",") {
		if f = strings.TrimSpace(f); f != "" {
			fields = append(fields, f)
		}
	}
	r := analysis.Diff(analysis.Chain{Label: "v1", ID: a.id, Events: a.events}, analysis.Chain{Label: "v2", ID: b.id, Events: b.events},
		analysis.DiffOptions{Ignore: fields})
	if c.jsonOut {
		if err := c.printJSON(r); err != nil {
			return err
		}
	} else {
		c.printDiff(r, a.label, b.label, *limit)
	}
	if !r.Identical {
		return errCheckFailed
	}
	return nil
}

func (c *cmdContext) printDiff(r *analysis.DiffReport, la, lb string, limit int) {
	if r.Identical {
		c.out("Chains are identical (%d events; compared without %s).\n", r.V1.Events, ignoredText(r.Ignored))
		return
	}
	f := r.First
	line := func(e *analysis.EventRef) string {
		s := e.Type
		if e.Subject != "" {
			s += " " + e.Subject
		}
		if e.Detail != "" {
			s += " (" + e.Detail + ")"
		}
		return s
	}
	switch f.Kind {
	case analysis.DiffChanged:
		c.out("Events diverged at seq %d:\n", f.V1.Seq)
		c.out("  v1: %s\n", line(f.V1))
		at := ""
		if f.V2.Seq != f.V1.Seq {
			at = fmt.Sprintf(" at seq %d", f.V2.Seq)
		}
		c.out("  v2: %s%s [DIFFERENT]\n", line(f.V2), at)
	case analysis.DiffRemoved:
		c.out("Events diverged at seq %d:\n", f.V1.Seq)
		c.out("  v1: %s [ONLY IN v1]\n", line(f.V1))
		c.out("  v2: -\n")
	case analysis.DiffAdded:
		c.out("Events diverged at seq %d:\n", f.V2.Seq)
		c.out("  v1: -\n")
		c.out("  v2: %s [ONLY IN v2]\n", line(f.V2))
	}
	c.out("\n%d %s (%d changed, %d only in v1, %d only in v2)", len(r.Differences), plural(len(r.Differences), "difference", "differences"), r.Changed, r.Removed, r.Added)
	c.out(", aligned by agent, type and tool:\n")
	c.out("  v1 = %s (%d events), v2 = %s (%d events)\n", la, r.V1.Events, lb, r.V2.Events)
	for i, d := range r.Differences {
		if limit > 0 && i == limit {
			c.out("  ... %d more (--max 0 lists all, --json for scripts)\n", len(r.Differences)-limit)
			break
		}
		switch d.Kind {
		case analysis.DiffChanged:
			where := fmt.Sprintf("v1 [%d] v2 [%d]", d.V1.Seq, d.V2.Seq)
			c.out("  ~ %-17s %s: %s", where, agentOrDash(d.V1.Agent), strings.TrimSpace(d.V1.Type+" "+d.V1.Subject))
			if desc := d.Describe(4); desc != "" {
				c.out(": %s", desc)
			}
			c.out("\n")
		case analysis.DiffRemoved:
			c.out("  - %-17s %s: %s\n", fmt.Sprintf("v1 [%d]", d.V1.Seq), agentOrDash(d.V1.Agent), line(d.V1))
		case analysis.DiffAdded:
			c.out("  + %-17s %s: %s\n", fmt.Sprintf("v2 [%d]", d.V2.Seq), agentOrDash(d.V2.Agent), line(d.V2))
		}
	}
	if !r.Aligned {
		c.out("  (the chains are too different to align past the common part; the rest was compared position by position)\n")
	}
	c.out("Compared without %s (--strict compares everything).\n", ignoredText(r.Ignored))
}

func ignoredText(fields []string) string {
	if len(fields) == 0 {
		return "ignoring nothing"
	}
	return strings.Join(fields, ", ")
}

// loadPrices reads the price table named by --prices or LCTL_PRICES.
func (c *cmdContext) loadPrices(path string) (*analysis.Prices, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &inputError{fmt.Errorf("--prices: %w", err)}
	}
	defer func() { _ = f.Close() }()
	p, err := analysis.LoadPrices(f)
	if err != nil {
		return nil, &inputError{fmt.Errorf("%s: %w", path, err)}
	}
	return p, nil
}

func runStats(ctx context.Context, c *cmdContext) error {
	c.common()
	prices := c.fs.String("prices", c.env.getenv("LCTL_PRICES"), "price table (YAML: models: {NAME: {input_per_1k, output_per_1k}}); env LCTL_PRICES")
	if err := c.parse(); err != nil {
		return err
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	table, err := c.loadPrices(*prices)
	if err != nil {
		return err
	}
	var st *analysis.Stats
	var b *analysis.StatsBuilder
	// The types whose data b reads, set with b before any event is decoded.
	var reads func(typ string) bool
	c.unread = analysis.StatsUnread
	if sd, err := c.streamChain(o, false, nil, func(typ string) bool { return reads(typ) }, func(id string) { b = analysis.NewStatsBuilder(id, table); reads = b.DataTypes() },
		func(e *lctl.StreamEvent) error { b.Add(&e.Event); return nil }); err == nil {
		c.reportInput(sd.data())
		st = b.Stats()
	} else {
		d, err := c.load(ctx, o)
		if err != nil {
			return err
		}
		c.reportInput(d)
		st = analysis.ComputeStats(d.id, d.events, table)
	}
	if c.jsonOut {
		return c.printJSON(st)
	}
	c.out("Chain: %s\n", st.ChainID)
	c.out("Duration: %s\n", durationText(st.DurationMS))
	c.out("Tokens: %s (in: %s / out: %s)\n", analysis.FormatCount(st.TotalTokens), analysis.FormatCount(st.Tokens.Input), analysis.FormatCount(st.Tokens.Output))
	switch {
	case st.Cost != nil && len(st.Unpriced) == 0:
		c.out("Cost: %s\n", analysis.FormatCost(*st.Cost))
	case st.Cost != nil:
		c.out("Cost: %s (not priced: %s)\n", analysis.FormatCost(*st.Cost), strings.Join(st.Unpriced, ", "))
	case table == nil && st.TotalTokens > 0:
		c.out("Cost: unknown (no price table: --prices FILE or LCTL_PRICES)\n")
	case st.TotalTokens == 0:
		c.out("Cost: $0.00\n")
	default:
		c.out("Cost: unknown (no price for %s)\n", strings.Join(st.Unpriced, ", "))
	}
	c.out("Agents: %d\n", len(st.Agents))
	c.out("Errors: %d\n", st.Errors)
	if st.AvgConfidence != nil {
		c.out("Avg confidence: %.2f\n", *st.AvgConfidence)
	} else {
		c.out("Avg confidence: n/a (no facts with a confidence)\n")
	}
	// Beyond the spec's lines: what a reader asks next.
	c.out("Events: %d (%d %s, %d tool %s, %d %s", st.Events, st.Steps, plural(st.Steps, "step", "steps"), st.ToolCalls, plural(st.ToolCalls, "call", "calls"), st.Facts, plural(st.Facts, "fact", "facts"))
	if st.UnknownTypes > 0 {
		c.out(", %d of unknown types", st.UnknownTypes)
	}
	c.out(")\n")
	if len(st.Agents) > 0 {
		names := make([]string, len(st.Agents))
		for i, a := range st.Agents {
			names[i] = a
			for _, p := range st.Profiles {
				if p.Agent == a && p.String() != "" {
					names[i] += " (" + p.String() + ")"
				}
			}
		}
		c.out("Agent names: %s\n", strings.Join(names, ", "))
	}
	if st.Streams > 0 {
		c.out("Streams: %d (%s tokens, %s)\n", st.Streams, analysis.FormatCount(st.StreamTokens), durationText(st.StreamMS))
	}
	if len(st.ErrorsByType) > 0 {
		c.out("Errors by type: %s\n", sortedCounts(st.ErrorsByType))
	}
	if st.DurationSource == "steps" && st.WallClockMS > 0 {
		c.out("Wall clock: %s (first to last event)\n", durationText(st.WallClockMS))
	}
	if st.RunStatus != "" {
		c.out("Run: %s\n", st.RunStatus)
	}
	return nil
}

// durationText renders a duration the way the spec's stats does: 45.2s.
func durationText(ms float64) string {
	if ms >= 1000 && ms < 60_000 {
		return fmt.Sprintf("%.1fs", ms/1000)
	}
	return analysis.FormatDuration(ms)
}

func runBottleneck(ctx context.Context, c *cmdContext) error {
	c.common()
	top := c.fs.Int("top", 5, "how many of the slowest steps to list")
	if err := c.parse(); err != nil {
		return err
	}
	if *top < 1 {
		return usagef("--top must be at least 1")
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	var r *analysis.BottleneckReport
	b := analysis.NewBottleneckBuilder()
	if !c.jsonOut {
		b.Untitled() // the text shows no step's intent nor tool
	}
	c.unread = analysis.BottleneckUnread(!c.jsonOut)
	if sd, err := c.streamChain(o, false, nil, analysis.BottleneckData, func(string) {}, func(e *lctl.StreamEvent) error { b.Add(&e.Event); return nil }); err == nil {
		c.reportInput(sd.data())
		r = b.Report(sd.id, *top)
	} else {
		d, err := c.load(ctx, o)
		if err != nil {
			return err
		}
		c.reportInput(d)
		r = analysis.Bottlenecks(d.id, d.events, *top)
	}
	if c.jsonOut {
		return c.printJSON(r)
	}
	if len(r.Steps) == 0 && len(r.Unfinished) == 0 {
		c.out("No step timing data found.\n")
		return nil
	}
	if len(r.Steps) > 0 {
		c.out("Slowest steps:\n")
		for i, s := range r.Steps {
			what := "step"
			if s.Stream {
				what = "stream at seq"
			}
			// A step with steps inside it is ranked by its own time;
			// its whole duration is said after.
			whole := ""
			if s.SelfMS != s.DurationMS {
				whole = fmt.Sprintf("; %s with what ran inside it", durationText(s.DurationMS))
			}
			c.out("%d. %s (%s %d): %s (%s%s)\n", i+1, agentOrDash(s.Agent), what, s.Step, durationText(s.SelfMS), pct(s.Share), whole)
		}
	}
	for _, u := range r.Unfinished {
		c.out("Unfinished: %s (step %d) started at seq %d and never ended (%s until the last event)\n", agentOrDash(u.Agent), u.Step, u.StartSeq, durationText(u.DurationMS))
	}
	c.out("\nRecommendation: %s\n", r.Recommendation)
	return nil
}

func pct(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

func runConfidence(ctx context.Context, c *cmdContext) error {
	c.common()
	decay := c.fs.Float64("decay", analysis.DefaultDecayRate, "confidence kept per hop (a step handed to another agent); 1 turns decay off")
	if err := c.parse(); err != nil {
		return err
	}
	if *decay <= 0 || *decay > 1 {
		return usagef("--decay must be in (0, 1], got %v", *decay)
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	var r *analysis.ConfidenceReport
	var b *analysis.ConfidenceBuilder
	copts := analysis.ConfidenceOptions{DecayRate: *decay}
	// The text shows the points rendered: a long chain's points (one per
	// fact per hop) are not listed on the way there.
	bopts := copts
	bopts.Rendered = !c.jsonOut
	c.unread = analysis.ConfidenceUnread
	if sd, err := c.streamChain(o, false, nil, analysis.ConfidenceData, func(id string) { b = analysis.NewConfidenceBuilder(id, bopts) },
		func(e *lctl.StreamEvent) error { b.Add(&e.Event); return nil }); err == nil {
		c.reportInput(sd.data())
		r = b.Report()
	} else {
		d, err := c.load(ctx, o)
		if err != nil {
			return err
		}
		c.reportInput(d)
		r = analysis.Confidence(d.id, d.events, copts)
	}
	if c.jsonOut {
		return c.printJSON(r)
	}
	if len(r.Facts) == 0 {
		c.out("No facts found in chain.\n")
		return nil
	}
	c.out("Fact confidence timeline:\n")
	var line []byte
	for _, f := range r.Facts {
		// The fact's id as c.out shows it, its timeline as lctl wrote it
		// (its own numbers, words and arrows: not read for hidden
		// characters), in one write; a long chain's timeline (millions of
		// points) copied once, not as a string and through fmt.
		line = append(append(line[:0], visible(f.ID)...), ": "...)
		line = append(f.AppendRender(line), '\n')
		_, _ = c.env.Stdout.Write(line)
		if cs := f.Consensus; cs != nil {
			var parts []string
			for _, a := range cs.Assessments {
				parts = append(parts, fmt.Sprintf("%s %.2f", a.Agent, a.Confidence))
			}
			recorded := ""
			switch {
			case cs.Agreement != nil && len(cs.Assessors) > 0:
				recorded = fmt.Sprintf("; the chain records agreement %.2f among %s", *cs.Agreement, strings.Join(cs.Assessors, ", "))
			case cs.Agreement != nil:
				recorded = fmt.Sprintf("; the chain records agreement %.2f", *cs.Agreement)
			case len(cs.Assessors) > 0:
				recorded = "; the chain names the assessors " + strings.Join(cs.Assessors, ", ")
			}
			c.out("    consensus %.2f from %s (conflict %.2f)%s\n", cs.Score, strings.Join(parts, ", "), cs.Conflict, recorded)
		}
	}
	if len(r.Warnings) > 0 {
		c.out("\n")
		for _, w := range r.Warnings {
			c.out("%s\n", w)
		}
	}
	return nil
}
