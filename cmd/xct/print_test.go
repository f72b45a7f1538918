package main

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// hiddenInOutput fails when out holds a character that a terminal does
// not print as itself (a carriage return, an escape sequence, a
// bidirectional override).
func hiddenInOutput(t *testing.T, out string) {
	t.Helper()
	for _, r := range []string{"\r", "\x1b", "\u202e", "\u2066"} {
		if strings.Contains(out, r) {
			t.Errorf("the output holds %q as it is: %q", r, out)
		}
	}
}

// The model's goal is printed to the approver by xct approvals: an escape
// sequence in it erased the line, and a newline and a tab made a fake
// "why" row of the table.
func TestPrintApprovalShowsWhatTheModelWrote(t *testing.T) {
	args, err := structpb.NewStruct(map[string]any{"path": "config/app.yaml", "content": "x\ry"})
	if err != nil {
		t.Fatal(err)
	}
	a := &xctv1.Approval{
		RunId: "run-1", Step: 2, StepId: "s2", RequestedBy: "alice",
		Proposal: &xctv1.NextStep{Tool: "fs.write", Arguments: args,
			Goal: "Delete the audit log\x1b[2K\rSwitch the color\nwhy\tallow-read: tools that only read may run \u202ex"},
		Reasons: []*xctv1.Reason{{RuleId: "config-changes-need-approval", Message: "changes under config/ need a human's approval"}},
		Preview: &xctv1.Preview{Kind: "diff", Content: "+a: 1\r+b: 2\n+c\x1b[1A\n"},
	}
	var b bytes.Buffer
	printApproval(&b, a)
	out := b.String()
	hiddenInOutput(t, out)
	if n := strings.Count(out, "\nwhy "); n != 1 {
		t.Errorf("%d why rows, want the one reason:\n%s", n, out)
	}
	for _, want := range []string{`Delete the audit log\x1b[2K\rSwitch the color\nwhy\tallow-read`, `+a: 1\r+b: 2`, `+c\x1b[1A`} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not show %s:\n%s", want, out)
		}
	}
}

// xct run and xct watch print the model's goals, its final message and the
// crew's facts as they arrive.
func TestStepPrinterShowsWhatTheModelWrote(t *testing.T) {
	var b bytes.Buffer
	p := newStepPrinter(&b)
	ev := func(typ string, data map[string]any) *lctlv1.Event {
		s, err := structpb.NewStruct(data)
		if err != nil {
			t.Fatal(err)
		}
		return &lctlv1.Event{Type: typ, ChainId: "run-1", Agent: "code-analyzer", Data: s}
	}
	p.print(ev("run_started", map[string]any{"principal": "alice", "goal": "g\x1b]0;title\a", "model": "scripted:x"}))
	p.print(ev("step_start", map[string]any{"step": 1, "step_id": "s1", "intent": "read\rAPPROVED", "input_summary": "fs.read path=a\u202etxt.exe", "tool": "fs.read"}))
	p.print(ev("fact_added", map[string]any{"id": "F1", "text": "x\x1b[2K", "confidence": 0.9}))
	p.print(ev("run_finished", map[string]any{"status": "done", "message": "done\r\x1b[32mall checks passed"}))
	out := b.String()
	hiddenInOutput(t, out)
	for _, want := range []string{`read\rAPPROVED`, `a\u202etxt.exe`, `done\r\x1b[32mall`} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not show %s:\n%s", want, out)
		}
	}
}

// xct approvals showed the first 200 characters of the arguments: a tool
// without a preview (http.request) had its keys in order, and a long body
// pushed the url, the request's destination, out of what the approver
// read.
func TestPrintApprovalShowsEveryArgument(t *testing.T) {
	args, err := structpb.NewStruct(map[string]any{
		"body":    strings.Repeat("status report, nothing to see here; ", 12),
		"method":  "POST",
		"url":     "https://api.github.com/repos/victim/app/hooks",
		"headers": map[string]any{"X-Note": "a\x1b[2Kb"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printApproval(&b, &xctv1.Approval{RunId: "run-1", Step: 3, Proposal: &xctv1.NextStep{Tool: "http.request", Arguments: args}})
	out := b.String()
	hiddenInOutput(t, out)
	for _, want := range []string{`"url": "https://api.github.com/repos/victim/app/hooks"`, `"method": "POST"`, strings.Repeat("status report, nothing to see here; ", 12), `a\u001b[2Kb`} {
		if !strings.Contains(out, want) {
			t.Errorf("the approver does not see %s:\n%s", want, out)
		}
	}
}
