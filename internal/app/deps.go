package app

import (
	"context"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/services/orchestrator"
)

// The orchestrator's dependencies on health (issue 17): a process running
// the orchestrator serves, beside "" and grpcx.LivenessService, the health
// services orchestrator.DepsHealthService (SERVING while "" is and the
// validator and the executor answer SERVING) and one per dependency
// (".validator", ".executor"), on every listener of the process, the
// health-only one included. "" and liveness do not follow them
// (orchestrator/deps.go says why).

// depsState is what the last probe of the dependencies found (guarded by
// App.mu).
type depsState struct {
	// probed: a probe has run; ok: every dependency answered SERVING.
	probed, ok bool
}

// depsNames are the health services the dependencies are reported on.
func depsNames() []string {
	return []string{orchestrator.DepsHealthService,
		orchestrator.DepsHealthService + "." + orchestrator.DepValidator,
		orchestrator.DepsHealthService + "." + orchestrator.DepExecutor}
}

// depsNotServing reports the dependencies NOT_SERVING until a probe says
// otherwise (a probe asking a service not set would be answered NOT_FOUND).
func (a *App) depsNotServing() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.modules {
		for _, n := range depsNames() {
			m.srv.Health.SetServingStatus(n, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
}

// watchDeps asks o's dependencies every o.DepsProbe() until Stop and
// reports each on its health service, logging when one goes away or comes
// back. done is closed when it returns.
func (a *App) watchDeps(o *orchestrator.Service, done chan<- struct{}) {
	defer close(done)
	every := o.DepsProbe()
	if every < 0 {
		return
	}
	last := map[string]string{} // dependency -> last error ("": serving)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-a.stopped:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-a.stopped: // Stop does not wait out a probe
				cancel()
			case <-ctx.Done():
			}
		}()
		deps := o.CheckDependencies(ctx)
		cancel()
		ok := true
		for _, d := range deps {
			why := ""
			if d.Err != nil {
				why, ok = d.Err.Error(), false
			}
			if prev, seen := last[d.Name]; !seen || prev != why {
				switch {
				case why != "":
					a.log.Warn("orchestrator dependency not serving: "+d.HealthService()+" NOT_SERVING (steps fail closed until it is back)", "dependency", d.Name, "addr", d.Addr, "reason", why)
				case seen:
					a.log.Info("orchestrator dependency serving again: "+d.HealthService()+" SERVING", "dependency", d.Name, "addr", d.Addr)
				}
			}
			last[d.Name] = why
		}
		a.setDeps(deps, ok)
		t.Reset(every)
	}
}

// setDeps reports what a probe found.
func (a *App) setDeps(deps []orchestrator.Dependency, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deps = depsState{probed: true, ok: ok}
	for _, m := range a.modules {
		for _, d := range deps {
			st := healthpb.HealthCheckResponse_SERVING
			if d.Err != nil {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
			m.srv.Health.SetServingStatus(d.HealthService(), st)
		}
	}
	a.setDepsAllLocked()
}

// setDepsAllLocked sets orchestrator.DepsHealthService from the process's
// own status and the last probe (a.mu held).
func (a *App) setDepsAllLocked() {
	if !a.deps.probed {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if a.deps.ok && a.serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, m := range a.modules {
		m.srv.Health.SetServingStatus(orchestrator.DepsHealthService, st)
	}
}
