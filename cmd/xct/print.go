package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// stepPrinter renders a run's events as one line per governed transition.
type stepPrinter struct {
	w           io.Writer
	finalStatus string
}

func newStepPrinter(w io.Writer) *stepPrinter { return &stepPrinter{w: w} }

func stepTag(n int) string { return fmt.Sprintf("[step %d]", n) }

func (p *stepPrinter) print(e *lctlv1.Event) {
	ev := &lctl.Event{Type: e.GetType(), Data: e.GetData().AsMap()}
	switch x := xctevent.Parse(ev).(type) {
	case xctevent.RunStarted:
		fmt.Fprintf(p.w, "run %s started by %s\n  goal:  %s\n  model: %s\n", e.GetChainId(), x.Principal, x.Goal, x.Model)
	case xctevent.StepStart:
		if x.Raw != nil {
			if _, isString := ev.Data["raw"].(string); isString {
				fmt.Fprintf(p.w, "%s proposal  (invalid output) %q\n", stepTag(x.Step), truncate(*x.Raw, 70))
				return
			}
		}
		fmt.Fprintf(p.w, "%s proposal  %s  (goal: %s)\n", stepTag(x.Step), x.InputSummary, truncate(x.Intent, 70))
	case xctevent.Verdict:
		var rules []string
		for _, r := range x.Reasons {
			rules = append(rules, r.RuleID)
		}
		version := x.PolicyVersion
		if len(version) > 19 {
			version = version[:19] + "…"
		}
		fmt.Fprintf(p.w, "%s verdict   %s  by %s (policy %s)\n", stepTag(x.Step), strings.ToUpper(x.Decision), strings.Join(rules, ", "), version)
	case xctevent.ToolCall:
		out, _ := json.Marshal(x.Output)
		fmt.Fprintf(p.w, "%s result    success %s  (%.1f ms)\n", stepTag(x.Step), truncate(string(out), 90), x.DurationMS)
	case xctevent.Error:
		fmt.Fprintf(p.w, "%s error     %s: %s\n", stepTag(x.Step), x.Code, truncate(x.Message, 100))
	case xctevent.ApprovalRequested:
		fmt.Fprintf(p.w, "%s waiting   for a human: xct approve %s %d  (or xct deny …; expires %s)\n", stepTag(x.Step), e.GetChainId(), x.Step, x.ExpiresAt)
	case xctevent.StepInDoubt:
		fmt.Fprintf(p.w, "%s IN DOUBT  %s (record %s); the run waits: %s\n", stepTag(x.Step), truncate(x.Reason, 100), x.RecordState, x.Resolve)
	case xctevent.ApprovalDecided:
		who := x.By
		if who == "" {
			who = "no one"
		}
		fmt.Fprintf(p.w, "%s approval  %s by %s  %s\n", stepTag(x.Step), strings.ToUpper(x.Decision), who, truncate(x.Reason, 80))
	case xctevent.RunReleased:
		fmt.Fprintf(p.w, "%s handover  %s stopped: %s\n", stepTag(x.Step), x.Instance, x.Reason)
	case xctevent.RunResumed:
		fmt.Fprintf(p.w, "%s resumed   by %s (%s)\n", stepTag(x.Step), x.Instance, strings.ReplaceAll(x.Reason, "_", " "))
	case xctevent.RunFinished:
		p.finalStatus = x.Status
		fmt.Fprintf(p.w, "%s: %s\n", p.finalStatus, x.Message)
	}
}
