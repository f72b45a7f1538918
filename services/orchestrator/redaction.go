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
// replaced (a diff of a file that holds a password, say); a preview with
// a secret replaced is marked redacted, so its file's digest stays off
// the chain (chainBase).
func (r *run) redactPreview(p *xctv1.Preview) *xctv1.Preview {
	if p == nil || r.svc.redactor == nil {
		return p
	}
	out := proto.CloneOf(p)
	out.Content = r.redactText(p.GetContent())
	if out.Content != p.GetContent() {
		out.Redacted = true
	}
	return out
}

// chainBase is what the chain records of the base digest of the approved
// preview p (the file the approval binds). A preview shown whole gives
// its digest as it is, which a reader can compare with the checksums the
// fs tools report. A redacted one (a secret replaced in it, or a file
// the run may not read; sent is what this run sent the validator) gives
// its marker instead: a plain SHA-256 of a file whose content is kept
// from readers would let them confirm guesses of it (a short password in
// an otherwise known file). The digest becomes a secret of the step, so
// the step's result (fs.write's previous_checksum, fs.delete's checksum)
// carries the same marker: a reader still sees that the approval bound
// the file the step changed. Without a redactor it is not recorded.
func (r *run) chainBase(p, sent *xctv1.Preview) string {
	base := p.GetBaseDigest()
	if base == "" || !p.GetRedacted() && !sent.GetRedacted() {
		return base
	}
	if r.scope == nil && r.svc.redactor != nil {
		r.scope = r.svc.redactor.Scope() // resumed: the step's scope starts here
	}
	return r.scope.Keep(base)
}
