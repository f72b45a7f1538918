package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
)

// stepPrinter renders a run's events as one line per governed transition.
type stepPrinter struct {
	w           io.Writer
	finalStatus string
}

func newStepPrinter(w io.Writer) *stepPrinter { return &stepPrinter{w: w} }

func (p *stepPrinter) print(e *lctlv1.Event) {
	d := e.GetData().AsMap()
	s := func(k string) string { v, _ := d[k].(string); return v }
	step := func() string { n, _ := d["step"].(float64); return fmt.Sprintf("[step %d]", int(n)) }
	switch e.GetType() {
	case "run_started":
		fmt.Fprintf(p.w, "run %s started by %s\n  goal:  %s\n  model: %s\n", e.GetChainId(), s("principal"), s("goal"), s("model"))
	case "step_start":
		if raw, ok := d["raw"].(string); ok {
			fmt.Fprintf(p.w, "%s proposal  (invalid output) %q\n", step(), truncate(raw, 70))
			return
		}
		fmt.Fprintf(p.w, "%s proposal  %s  (goal: %s)\n", step(), s("input_summary"), truncate(s("intent"), 70))
	case "verdict":
		var rules []string
		if rs, ok := d["reasons"].([]any); ok {
			for _, r := range rs {
				if m, ok := r.(map[string]any); ok {
					id, _ := m["rule_id"].(string)
					rules = append(rules, id)
				}
			}
		}
		version := s("policy_version")
		if len(version) > 19 {
			version = version[:19] + "…"
		}
		fmt.Fprintf(p.w, "%s verdict   %s  by %s (policy %s)\n", step(), strings.ToUpper(s("decision")), strings.Join(rules, ", "), version)
	case "tool_call":
		out, _ := json.Marshal(d["output"])
		ms, _ := d["duration_ms"].(float64)
		fmt.Fprintf(p.w, "%s result    success %s  (%.1f ms)\n", step(), truncate(string(out), 90), ms)
	case "error":
		fmt.Fprintf(p.w, "%s error     %s: %s\n", step(), s("code"), truncate(s("message"), 100))
	case "approval_requested":
		fmt.Fprintf(p.w, "%s waiting   for a human: xct approve %s %d  (or xct deny …; expires %s)\n", step(), e.GetChainId(), int(d["step"].(float64)), s("expires_at"))
	case "step_in_doubt":
		fmt.Fprintf(p.w, "%s IN DOUBT  %s (record %s); the run waits: %s\n", step(), truncate(s("reason"), 100), s("record_state"), s("resolve"))
	case "approval_decided":
		who := s("by")
		if who == "" {
			who = "no one"
		}
		fmt.Fprintf(p.w, "%s approval  %s by %s  %s\n", step(), strings.ToUpper(s("decision")), who, truncate(s("reason"), 80))
	case "run_released":
		fmt.Fprintf(p.w, "%s handover  %s stopped: %s\n", step(), s("instance"), s("reason"))
	case "run_resumed":
		fmt.Fprintf(p.w, "%s resumed   by %s (%s)\n", step(), s("instance"), strings.ReplaceAll(s("reason"), "_", " "))
	case "run_finished":
		p.finalStatus = s("status")
		fmt.Fprintf(p.w, "%s: %s\n", p.finalStatus, s("message"))
	}
}
