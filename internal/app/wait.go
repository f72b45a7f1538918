package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/provision"
)

// Services that wait instead of dying (issue 12): a process started while
// NATS or JetStream is not ready serves gRPC at once, reports NOT_SERVING
// on health and refuses calls with UNAVAILABLE saying what it waits for,
// and starts its services (in start order) once JetStream answers.

// jetStreamProbe bounds one readiness probe.
const jetStreamProbe = 2 * time.Second

// jetStreamReady reports what is missing for the services to start: NATS
// not connected, or JetStream not answering. nil when it answers.
func jetStreamReady(ctx context.Context, nc *nats.Conn, url string) error {
	if !nc.IsConnected() {
		reason := "not reachable"
		if err := nc.LastError(); err != nil {
			reason = "not reachable: " + err.Error()
		}
		return fmt.Errorf("waiting for NATS at %s (%s)", url, reason)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("waiting for NATS JetStream at %s: %w", url, err)
	}
	pctx, cancel := context.WithTimeout(ctx, jetStreamProbe)
	defer cancel()
	if _, err := js.AccountInfo(pctx); err != nil {
		return fmt.Errorf("waiting for NATS JetStream at %s (%s)", url, jetStreamReason(err))
	}
	return nil
}

// jetStreamReason says in words why JetStream did not answer.
func jetStreamReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "JetStream did not answer within " + jetStreamProbe.String() + ": not ready yet (no stream leader?)"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "JetStream is not enabled on the server or for this account"
	case errors.Is(err, nats.ErrNoResponders):
		return "no JetStream responded: not ready yet"
	}
	return err.Error()
}

// dependencyErr names the dependency behind a start error that is only a
// timeout ("context deadline exceeded" says nothing of what was missing).
func dependencyErr(err error, url string) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w (NATS JetStream at %s did not answer in time: is it up, with a stream leader?)", err, url)
	}
	return err
}

// waitingFor records what the services wait for; nil: they are started.
func (a *App) waitingFor(err error) {
	if err == nil {
		a.waiting.Store(nil)
		return
	}
	a.waiting.Store(&err)
}

// notReady is the servers' readiness check (grpcx.WithReady).
func (a *App) notReady() error {
	if p := a.waiting.Load(); p != nil {
		return *p
	}
	return nil
}

// StartRetry is how a process waits for NATS and starts its services.
// While it waits every service is served NOT_SERVING, refusing calls with
// UNAVAILABLE and the reason (which dependency, at which address): NATS
// not reachable, JetStream not answering, a stream not provisioned, or a
// service's start that failed on one of them. Probes are made, and
// starts tried again, after a wait that doubles from 250 ms up to
// MaxWait.
type StartRetry struct {
	// Timeout bounds one start of a service (0: DefaultStartTimeout).
	Timeout time.Duration
	// MaxWait is the longest wait between two attempts (0:
	// DefaultStartMaxWait).
	MaxWait time.Duration
	// GiveUp, when set, ends the process (exit 1, naming what it waited
	// for) when its services have not all started that long after it
	// began: for a supervisor that should see the failure. 0: wait for
	// as long as it takes.
	GiveUp time.Duration
}

// Defaults of StartRetry.
const (
	DefaultStartTimeout = time.Minute
	DefaultStartMaxWait = 5 * time.Second
	firstStartWait      = 250 * time.Millisecond
)

// RegisterFlags registers the start retry flags.
func (r *StartRetry) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&r.Timeout, "start-timeout", DefaultStartTimeout, "bound of one start of a service once NATS answers; a start that fails on NATS is tried again")
	fs.DurationVar(&r.MaxWait, "start-retry-max-wait", DefaultStartMaxWait, "longest wait between two probes of NATS, or two starts of a service that failed on NATS (the wait doubles from 250ms)")
	fs.DurationVar(&r.GiveUp, "start-give-up", 0, "exit 1 when the services have not all started this long after the process began (NATS down, not provisioned, starts failing); 0: wait, NOT_SERVING, for as long as it takes")
}

// Validate refuses negative durations, and a give-up shorter than one
// attempt.
func (r StartRetry) Validate() error {
	if r.Timeout < 0 || r.MaxWait < 0 || r.GiveUp < 0 {
		return fmt.Errorf("--start-timeout, --start-retry-max-wait and --start-give-up may not be negative")
	}
	if r.GiveUp > 0 && r.GiveUp < r.timeout() {
		return fmt.Errorf("--start-give-up %s is shorter than one start (--start-timeout %s)", r.GiveUp, r.timeout())
	}
	return nil
}

func (r StartRetry) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultStartTimeout
}

func (r StartRetry) maxWait() time.Duration {
	if r.MaxWait > 0 {
		return r.MaxWait
	}
	return DefaultStartMaxWait
}

// pause waits d, or until Stop (false).
func (a *App) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.stopped:
		return false
	case <-t.C:
		return true
	}
}

// gaveUp reports, once, that the process waited past --start-give-up
// (since began) for reason: the process ends (Err).
func (a *App) gaveUp(began time.Time, reason error) bool {
	if a.retry.GiveUp <= 0 || time.Since(began) < a.retry.GiveUp {
		return false
	}
	err := fmt.Errorf("gave up after %s (--start-give-up): %w", a.retry.GiveUp, reason)
	a.log.Error("services not started: giving up", "err", err)
	a.fatal <- err
	return true
}

// dependencyFailure reports whether a start failed on NATS or JetStream
// (no answer in time, no responders, the connection gone, a stream not
// there yet), not on the service's own configuration or files: such a
// start is worth trying again once NATS answers. Every service's Start
// may be called again after it failed: it keeps nothing of a failed
// attempt that a new one does not replace.
func dependencyFailure(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jsguard.ErrMissing) ||
		(errors.As(err, &apiErr) && apiErr.Code >= 500)
}

// startWhenReady probes JetStream with backoff until it answers, then
// starts every service not started yet in start order and reports
// SERVING. A service whose start failed on NATS (a leader election that
// left a request unanswered, NATS gone again between the probe and the
// start) is started again, with backoff, NOT_SERVING with the reason
// meanwhile: the process does not exit after it said it listens (which
// a supervisor would restart in a loop). Any other failed start ends the
// process (Err); so does waiting past --start-give-up; nothing does
// once Stop was called.
func (a *App) startWhenReady(url string, conns []*nats.Conn) {
	began := time.Now()
	wait := firstStartWait
	for {
		if !a.pause(wait) {
			return
		}
		err := a.ready(context.Background(), conns, url)
		if err == nil {
			break
		}
		if p := a.waiting.Load(); p == nil || (*p).Error() != err.Error() {
			a.log.Warn("still waiting for NATS", "reason", err)
			if errors.Is(err, jsguard.ErrMissing) {
				a.log.Error("XCT's streams are not there: waiting for an administrator to run "+jsguard.ProvisionCommand, "reason", err)
			}
		}
		a.waitingFor(err)
		if a.gaveUp(began, err) {
			return
		}
		wait = min(wait*2, a.retry.maxWait())
	}
	a.starting.Lock()
	defer a.starting.Unlock()
	select {
	case <-a.stopped:
		return
	default:
	}
	a.mu.Lock()
	modules := a.modules
	a.mu.Unlock()
	wait = firstStartWait
	for i := 0; i < len(modules); {
		m := modules[i]
		a.mu.Lock()
		started := m.started
		a.mu.Unlock()
		if started {
			i++
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.retry.timeout())
		err := m.svc.Start(ctx)
		cancel()
		if err != nil {
			err = fmt.Errorf("start %s: %w", m.target, dependencyErr(err, url))
			a.waitingFor(err)
			if !dependencyFailure(err) {
				a.log.Error("could not start after NATS came", "service", m.target, "err", err)
				a.fatal <- err
				return
			}
			a.log.Warn("could not start: NATS did not answer it; starting it again", "service", m.target, "err", err, "delay", wait)
			if a.gaveUp(began, err) || !a.pause(wait) {
				return
			}
			wait = min(wait*2, a.retry.maxWait())
			continue
		}
		a.mu.Lock()
		m.started = true
		a.mu.Unlock()
		a.log.Info("started", "service", m.target)
		i++
	}
	a.waitingFor(nil)
	if err := a.store.Err(); err != nil {
		a.log.Info("NATS answers: every service started; NOT_SERVING while a stream cannot store", "reason", err)
		a.setServing(false)
		return
	}
	a.log.Info("NATS answers: every service started, reporting SERVING")
	a.setServing(true)
}

// allReady is jetStreamReady for every connection of the process: each
// target's user must be let in.
func allReady(ctx context.Context, conns []*nats.Conn, url string) error {
	for _, nc := range conns {
		if err := jetStreamReady(ctx, nc, url); err != nil {
			return err
		}
	}
	return nil
}

// ready is allReady, then provisioned: every target's streams are there.
func (a *App) ready(ctx context.Context, conns []*nats.Conn, url string) error {
	if err := allReady(ctx, conns, url); err != nil {
		return err
	}
	return provisioned(ctx, a.byTarget)
}

// provisioned reports the first stream or bucket a target binds that does
// not exist (jsguard.ErrMissing, naming what to run): the services only
// bind, the admin makes them (internal/provision). A process started
// before `xct nats provision` ran (a Kubernetes Job beside it) waits,
// NOT_SERVING with that reason, instead of dying and restarting.
func provisioned(ctx context.Context, conns map[string]*nats.Conn) error {
	targets := make([]string, 0, len(conns))
	for t := range conns {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	for _, t := range targets {
		js, err := jetstream.New(conns[t])
		if err != nil {
			return fmt.Errorf("waiting for NATS JetStream: %w", err)
		}
		for _, sp := range provision.Specs(provision.Defaults()) {
			if !slices.Contains(sp.Users, t) {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, jetStreamProbe)
			_, err := js.Stream(pctx, sp.Stream)
			cancel()
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%s: %w", t, jsguard.Missing(string(sp.Kind), sp.Name))
			}
			if err != nil {
				return fmt.Errorf("waiting for NATS JetStream (%s)", jetStreamReason(err))
			}
			if sp.Name == provision.RedactionBucket {
				if err := redactionKeyMade(ctx, js); err != nil {
					return fmt.Errorf("%s: %w", t, err)
				}
			}
		}
	}
	return nil
}

// redactionKeyMade reports the redaction key missing from its bucket: the
// admin makes it with the bucket (xct nats provision), a moment after it.
func redactionKeyMade(ctx context.Context, js jetstream.JetStream) error {
	pctx, cancel := context.WithTimeout(ctx, jetStreamProbe)
	defer cancel()
	kv, err := js.KeyValue(pctx, provision.RedactionBucket)
	if err == nil {
		_, err = kv.Get(pctx, provision.RedactionKey)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return jsguard.Missing("redaction key in bucket", provision.RedactionBucket)
	}
	if err != nil {
		return fmt.Errorf("waiting for NATS JetStream (%s)", jetStreamReason(err))
	}
	return nil
}
