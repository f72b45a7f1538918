package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
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
		fmt.Fprintf(p.w, "run %s started by %s\n  goal:  %s\n  model: %s\n", line(e.GetChainId()), line(x.Principal), line(x.Goal), line(x.Model))
	case xctevent.StepStart:
		if x.Raw != nil {
			if _, isString := ev.Data["raw"].(string); isString {
				fmt.Fprintf(p.w, "%s proposal  (invalid output) %q\n", stepTag(x.Step), truncate(*x.Raw, 70))
				return
			}
		}
		by := ""
		if _, crewStep := ev.Data["agent_profile"]; crewStep {
			by = line(e.GetAgent()) + ": "
		}
		fmt.Fprintf(p.w, "%s proposal  %s%s  (goal: %s)\n", stepTag(x.Step), by, line(x.InputSummary), truncate(x.Intent, 70))
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
		fmt.Fprintf(p.w, "%s error     %s: %s\n", stepTag(x.Step), line(x.Code), truncate(x.Message, 100))
	case xctevent.ApprovalRequested:
		fmt.Fprintf(p.w, "%s waiting   for a human: xct approve %s %d  (or xct deny …; expires %s)\n", stepTag(x.Step), e.GetChainId(), x.Step, x.ExpiresAt)
	case xctevent.StepInDoubt:
		fmt.Fprintf(p.w, "%s IN DOUBT  %s (record %s); the run waits: %s\n", stepTag(x.Step), truncate(x.Reason, 100), x.RecordState, x.Resolve)
	case xctevent.ApprovalDecided:
		who := x.By
		if who == "" {
			who = "no one"
		}
		fmt.Fprintf(p.w, "%s approval  %s by %s  %s\n", stepTag(x.Step), line(strings.ToUpper(x.Decision)), line(who), truncate(x.Reason, 80))
	case xctevent.RunReleased:
		fmt.Fprintf(p.w, "%s handover  %s stopped: %s\n", stepTag(x.Step), line(x.Instance), line(x.Reason))
	case xctevent.RunResumed:
		fmt.Fprintf(p.w, "%s resumed   by %s (%s)\n", stepTag(x.Step), line(x.Instance), line(strings.ReplaceAll(x.Reason, "_", " ")))
	case xctevent.RunFinished:
		p.finalStatus = x.Status
		fmt.Fprintf(p.w, "%s: %s\n", line(p.finalStatus), line(x.Message))
	default:
		p.printCrew(e.GetType(), e.GetAgent(), ev.Data)
	}
}

// printCrew prints the events of a crew run (docs/crews.md) and of a
// streaming model.
func (p *stepPrinter) printCrew(typ, agent string, d map[string]any) {
	str := func(k string) string { s, _ := d[k].(string); return line(s) }
	agent = line(agent)
	num := func(k string) string {
		if f, ok := d[k].(float64); ok {
			return strconv.FormatFloat(f, 'g', 4, 64)
		}
		return "-"
	}
	switch typ {
	case lctl.TypeModelRouting:
		why := str("reason")
		if c := str("failure_code"); c != "" {
			why = str("failed_model") + " failed: " + c
		}
		fmt.Fprintf(p.w, "[routing]  %s on %s  (%s)\n", str("for"), str("model"), why)
	case lctl.TypeFactAdded:
		fmt.Fprintf(p.w, "[fact]     %s added by %s, confidence %s: %s\n", str("id"), agent, num("confidence"), truncate(str("text"), 80))
	case lctl.TypeFactModified:
		fmt.Fprintf(p.w, "[fact]     %s updated by %s, confidence %s: %s\n", str("id"), agent, num("confidence"), truncate(str("reason"), 80))
	case lctl.TypeContractValidation:
		fmt.Fprintf(p.w, "[contract] %s %s: %s\n", str("contract"), str("direction"), strings.ToUpper(str("status")))
	case lctl.TypeHandoff:
		fmt.Fprintf(p.w, "[handoff]  %s -> %s: %s\n", str("from"), str("to"), truncate(str("summary"), 80))
	case lctl.TypeCheckpoint:
		fmt.Fprintf(p.w, "[checkpoint] state %s\n", truncate(str("state_hash"), 19))
	case lctl.TypeStreamStart:
		fmt.Fprintf(p.w, "[stream]   %s answering…\n", agent)
	case lctl.TypeStreamChunk:
		fmt.Fprintf(p.w, "           %s\n", truncate(strings.Join(strings.Fields(str("content")), " "), 100))
	case lctl.TypeStreamEnd:
		fmt.Fprintf(p.w, "[stream]   %s: %s chunks, %s\n", str("status"), num("total_chunks"), num("duration_ms")+" ms")
	}
}
