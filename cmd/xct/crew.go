package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/xct-dev/xct/internal/crew"
)

const crewUsage = `Usage:
  xct crew check FILE   load and validate a crew file; print its agents, handoff graph,
                        contracts, confidence settings and routing (exit 2 when invalid)

docs/crews.md describes the crew file.
`

// cmdCrew is xct crew check: the crew file's loader and validation, run
// before a crew run so a broken file is found at the desk.
func cmdCrew(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprint(stderr, crewUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		return &exitError{code: 2, err: errors.New("usage: xct crew check FILE")}
	}
	fs := newFlagSet("crew check", stderr)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 2, err: errors.New("usage: xct crew check FILE")}
	}
	c, err := crew.LoadFile(fs.Arg(0))
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if dead := c.DeadEnds(); len(dead) > 0 {
		return &exitError{code: 2, err: errors.New(strings.Join(dead, "\n"))}
	}
	printCrew(stdout, c)
	return nil
}

// printCrew renders a valid crew for people.
func printCrew(w io.Writer, c *crew.Crew) {
	fmt.Fprintf(w, "%s: crew %s: %d agents, entry %s\n", c.Source, c.Name, len(c.Agents), c.Entry)
	if c.Description != "" {
		fmt.Fprintf(w, "  %s\n", c.Description)
	}
	fmt.Fprintln(w, "\nagents:")
	for _, a := range c.Agents {
		p := a.Profile
		models := p.Model
		if len(p.Fallbacks) > 0 {
			models += " (fallbacks: " + strings.Join(p.Fallbacks, ", ") + ")"
		}
		fmt.Fprintf(w, "  %s  type %s, reliability %.2f, model %s\n", a.Name, p.Type, p.ReliabilityScore, models)
		fmt.Fprintf(w, "    capabilities: %s\n", strings.Join(p.Capabilities, ", "))
		fmt.Fprintf(w, "    tools: %s\n", strings.Join(a.Tools, ", "))
		for _, q := range a.SuggestedQueries {
			fmt.Fprintf(w, "    query: %s\n", q)
		}
	}
	h := c.Handoffs
	fmt.Fprintf(w, "\nhandoff graph (max_depth %d, cycles %s, an agent receives control at most %d times):\n", h.MaxDepth, h.Cycles, h.MaxVisits)
	for _, a := range c.Agents {
		if len(a.HandsTo) == 0 {
			fmt.Fprintf(w, "  %s (hands to nobody: ends the work)\n", a.Name)
			continue
		}
		for _, to := range a.HandsTo {
			fmt.Fprintf(w, "  %s -> %s\n", a.Name, to)
		}
	}
	if len(c.Contracts.Agents) > 0 {
		fmt.Fprintln(w, "\ncontracts:")
		for _, name := range c.Contracts.Agents {
			ct := c.Contracts.Contracts[name]
			fmt.Fprintf(w, "  %s: %d input rules, %d output rules\n", name, len(ct.Inputs), len(ct.Outputs))
		}
	}
	cf := c.Confidence
	th := cf.Thresholds
	fmt.Fprintf(w, "\nconfidence: decay %.2f per hop; proceed at %.2f, warn at %.2f, verify at %.2f, block below; consensus from %d assessors\n",
		cf.DecayRate, th.Proceed, th.Warn, th.Verify, cf.MinAssessors)
	lift := strings.Join(c.Authority.LiftDoubts, ", ")
	if lift == "" {
		lift = "nobody (a human, at the confidence gate)"
	}
	fmt.Fprintf(w, "authority: done ends the run from %s; a doubt another agent left on a fact is lifted by %s\n",
		strings.Join(c.Authority.EndRun, ", "), lift)
	if c.History == crew.HistoryShared {
		fmt.Fprintln(w, "history: shared (every agent is shown every agent's turns, the other agents' tool results included)")
	} else {
		fmt.Fprintln(w, "history: own (each agent is shown its own turns, and what is handed to it)")
	}
	fmt.Fprintf(w, "routing: fall back on %s (confidence %.2f)\n", strings.Join(c.Routing.FallbackOn, ", "), c.Routing.FallbackConfidence)
	for _, r := range c.Routing.Rules {
		var when []string
		for _, kv := range [][2]string{{"agent", r.When.Agent}, {"agent_type", r.When.AgentType}, {"step_kind", r.When.StepKind}} {
			if kv[1] != "" {
				when = append(when, kv[0]+"="+kv[1])
			}
		}
		if len(when) == 0 {
			when = []string{"every step"}
		}
		to := r.Model
		if r.Cheapest {
			to = "the cheapest of the agent's models"
			if r.MaxCostPer1KTokens != nil {
				to += fmt.Sprintf(" at most $%g per 1k tokens", *r.MaxCostPer1KTokens)
			}
		}
		fmt.Fprintf(w, "  rule %s: %s -> %s (%s, confidence %.2f)\n", r.Name, strings.Join(when, " "), to, r.Reason, r.Confidence)
	}
	for _, warn := range c.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	fmt.Fprintf(w, "\n%s: ok\n", c.Source)
}

// readCrewFile reads a crew file for xct run and checks it here first, so
// a bad file is reported with its FILE:LINE problems before any run
// starts (the orchestrator checks it again).
func readCrewFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the user names the crew file
	if err != nil {
		return nil, fmt.Errorf("crew file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	raw, err := io.ReadAll(io.LimitReader(f, crew.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("crew file %s: %w", path, err)
	}
	c, err := crew.Load(path, raw)
	if err != nil {
		return nil, err
	}
	if dead := c.DeadEnds(); len(dead) > 0 {
		return nil, errors.New(strings.Join(dead, "\n"))
	}
	return raw, nil
}
