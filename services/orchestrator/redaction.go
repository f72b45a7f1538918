package orchestrator

import (
	"maps"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/lctl"
)

// Secrets in tool arguments and results never reach the chain: every event
// is redacted in record, before it is appended (docs/security.md,
// Redaction). The model's context is a fold over the recorded events, so
// the model sees the markers too; the executor, validator and approver are
// sent the real proposal, and step ids are computed over the real
// arguments. A step's events share one redaction scope, opened at its
// step_start, so a secret found under a key in the arguments is also
// replaced where the result or an error message repeats it.

// redactEvent returns an event's data with its secrets replaced. The
// run_started event (the caller's goal and labels) gets the same rules in
// a scope of its own: a token pasted into a goal never reaches the chain,
// which cannot be purged. The model is still given the goal as written.
func (r *run) redactEvent(eventType string, data map[string]any) map[string]any {
	red := r.svc.redactor
	if red == nil {
		return data
	}
	if eventType == lctl.TypeRunStarted {
		if labels, ok := data["labels"].(map[string]string); ok {
			m := make(map[string]any, len(labels))
			for k, v := range labels {
				m[k] = v
			}
			data = maps.Clone(data)
			data["labels"] = m
		}
		return red.Scope().Map(data)
	}
	if eventType == lctl.TypeStepStart || r.scope == nil {
		r.scope = red.Scope()
	}
	return r.scope.Map(data)
}

// redactText replaces the secrets of the current step in a message meant
// for a span or a log line.
func (r *run) redactText(s string) string {
	if r.scope != nil {
		return r.scope.Text(s)
	}
	return r.svc.redactor.Text(s) // nil-safe: a nil Redactor's scope is nil
}

// redactPreview returns what an approver is shown, with the step's secrets
// replaced (a diff of a file that holds a password, say).
func (r *run) redactPreview(p *xctv1.Preview) *xctv1.Preview {
	if p == nil || r.svc.redactor == nil {
		return p
	}
	out := proto.CloneOf(p)
	out.Content = r.redactText(p.GetContent())
	return out
}
