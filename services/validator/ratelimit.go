package validator

import (
	"fmt"
	"sync"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// sweepEvery is how many takes pass between sweeps of idle windows.
const sweepEvery = 1024

// rateLimiter counts allowed calls in sliding windows in this process: one
// per global limit and one per run for per-run limits. It is the counter of
// a validator without NATS (NewWithCatalog: tests, and policy checks); a
// validator on NATS counts in the cluster's bucket (rateStore), so that
// every replica shares the count. It lives in the Service, so counts
// survive a policy reload (a limit that did not change keeps its window).
// A step is counted once: asking again about an allowed step id does not
// count it twice.
type rateLimiter struct {
	mu      sync.Mutex
	windows map[string]*window
	takes   int
}

// window is the calls counted under one limit (and one run, for per-run
// limits), oldest first.
type window struct {
	span  time.Duration
	calls []call
	steps map[string]struct{}
}

type call struct {
	at     time.Time
	stepID string
}

func newRateLimiter() *rateLimiter { return &rateLimiter{windows: map[string]*window{}} }

// expire drops the calls that left the window at now.
func (w *window) expire(now time.Time) {
	cut := 0
	for cut < len(w.calls) && !w.calls[cut].at.After(now.Add(-w.span)) {
		if w.calls[cut].stepID != "" {
			delete(w.steps, w.calls[cut].stepID)
		}
		cut++
	}
	if cut > 0 {
		w.calls = append(w.calls[:0], w.calls[cut:]...)
	}
}

// rateCheck is one limit that applies to a proposal.
type rateCheck struct {
	key   string
	limit rate
	rl    *rateLimit
	scope string // "per_run", "per_principal" or "global"
}

// rateChecks lists the limits of limits that apply to the tool in a run.
// prefix separates the limiter's users (the enforced policy, each shadow).
func rateChecks(prefix string, limits []rateLimit, tool, runID, principal string) []rateCheck {
	var out []rateCheck
	for i := range limits {
		l := &limits[i]
		if !globMatch(l.pattern, tool) {
			continue
		}
		if l.perRun.n > 0 {
			out = append(out, rateCheck{key: prefix + "\x00r\x00" + l.pattern + "\x00" + l.perRun.String() + "\x00" + runID, limit: l.perRun, rl: l, scope: "per_run"})
		}
		if l.perPrincipal.n > 0 {
			out = append(out, rateCheck{key: prefix + "\x00p\x00" + l.pattern + "\x00" + l.perPrincipal.String() + "\x00" + principal, limit: l.perPrincipal, rl: l, scope: "per_principal"})
		}
		if l.global.n > 0 {
			out = append(out, rateCheck{key: prefix + "\x00g\x00" + l.pattern + "\x00" + l.global.String(), limit: l.global, rl: l, scope: "global"})
		}
	}
	return out
}

// allowLocal is counter.allow in this process.
func (l *rateLimiter) allowLocal(now time.Time, stepID string, checks []rateCheck, take bool) (refused *rateCheck, retryAfter time.Duration) {
	if len(checks) == 0 {
		return nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range checks {
		c := &checks[i]
		w := l.windows[c.key]
		if w == nil {
			continue
		}
		w.span = c.limit.window
		w.expire(now)
		if _, counted := w.steps[stepID]; counted && stepID != "" {
			continue
		}
		if len(w.calls) >= c.limit.n {
			return c, w.calls[0].at.Add(w.span).Sub(now)
		}
	}
	if !take {
		return nil, 0
	}
	for i := range checks {
		c := &checks[i]
		w := l.windows[c.key]
		if w == nil {
			w = &window{span: c.limit.window, steps: map[string]struct{}{}}
			l.windows[c.key] = w
		}
		if _, counted := w.steps[stepID]; counted && stepID != "" {
			continue
		}
		w.calls = append(w.calls, call{at: now, stepID: stepID})
		if stepID != "" {
			w.steps[stepID] = struct{}{}
		}
	}
	l.takes++
	if l.takes%sweepEvery == 0 {
		l.sweep(now)
	}
	return nil, 0
}

// sweep forgets windows whose calls have all left them (ended runs,
// removed limits).
func (l *rateLimiter) sweep(now time.Time) {
	for k, w := range l.windows {
		w.expire(now)
		if len(w.calls) == 0 {
			delete(l.windows, k)
		}
	}
}

// rateLimited is the signal for a refused call.
func rateLimited(tool string, c *rateCheck, retryAfter time.Duration) *xctv1.Error {
	where := "in this run"
	if c.scope == "global" {
		where = "across all runs"
	}
	retryAfter = max(retryAfter, 0)
	e := wire.Errorf(wire.CodeRateLimited,
		"tool %s is rate limited: at most %d calls per %v %s (rate limit on %q, %s:%d); a call frees up in %v",
		quoteName(tool), c.limit.n, c.limit.window, where, c.rl.pattern, c.rl.file, c.rl.line, retryAfter.Round(time.Millisecond))
	return wire.WithDetails(e, map[string]any{
		"tool":           truncate(tool, maxToolNameInMsg),
		"scope":          c.scope,
		"limit":          float64(c.limit.n),
		"window":         c.limit.window.String(),
		"retry_after_ms": float64(retryAfter.Milliseconds()),
		"rule_ids":       []any{reasonRateLimit},
	})
}

// rateUncounted is the signal for a call that could not be counted: the
// count store (NATS) is unreachable. Retryable; nothing ran.
func rateUncounted(tool string, c *rateCheck) *xctv1.Error {
	e := wire.Errorf(wire.CodeValidatorUnavailable,
		"tool %s has a rate limit (on %q, %s:%d) and this call could not be counted (the validator cannot reach its count store), so it is not allowed; try again later",
		quoteName(tool), c.rl.pattern, c.rl.file, c.rl.line)
	return wire.WithDetails(e, map[string]any{
		"tool":     truncate(tool, maxToolNameInMsg),
		"scope":    c.scope,
		"limit":    float64(c.limit.n),
		"window":   c.limit.window.String(),
		"rule_ids": []any{reasonRateLimit},
	})
}

// rateUncountedReason is the verdict reason for a call that could not be
// counted.
func rateUncountedReason(c *rateCheck, err error) string {
	return fmt.Sprintf("%s limit %s on %q could not be counted: %v", c.scope, c.limit, c.rl.pattern, err)
}

// rateReason is the verdict reason for a refused call.
func rateReason(c *rateCheck) string {
	return fmt.Sprintf("%s limit %s on %q reached", c.scope, c.limit, c.rl.pattern)
}
