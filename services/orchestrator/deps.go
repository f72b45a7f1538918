package orchestrator

import (
	"context"
	"fmt"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The health services through which a process running the orchestrator
// says whether the services its steps call are there (internal/app sets
// them from CheckDependencies, every Config.DepsProbe).
//
// The orchestrator's own health ("") does not follow them: with the
// validator down every replica would leave a Service's endpoints, and
// runs could no longer be read, watched or cancelled, while the steps
// already fail closed (VALIDATOR_UNAVAILABLE). A readiness probe that
// should take replicas out while a dependency is away asks
// DepsHealthService instead (deploy/k8s components/orchestrator-deps-ready).
const (
	// DepsHealthService is SERVING while the process is ("") and every
	// dependency answers SERVING.
	DepsHealthService = "xct.orchestrator.deps"
	// DepValidator and DepExecutor name the dependencies; the health
	// service of one is DepsHealthService + "." + its name.
	DepValidator = "validator"
	DepExecutor  = "executor"
)

// DefaultDepsProbe is Config.DepsProbe's default.
const DefaultDepsProbe = 5 * time.Second

// depsProbeTimeout bounds one dependency's health check.
const depsProbeTimeout = 2 * time.Second

// Dependency is what CheckDependencies found of one service the steps call.
type Dependency struct {
	// Name is DepValidator or DepExecutor; Addr the address dialled.
	Name, Addr string
	// Err is nil when the service answered SERVING, else why not: not
	// reachable, or NOT_SERVING (its own NATS, say).
	Err error
}

// HealthService is the name of d's health service.
func (d Dependency) HealthService() string { return DepsHealthService + "." + d.Name }

// CheckDependencies asks the validator and the executor whether they
// serve (gRPC health, service ""), through the connections the steps use:
// what it finds is what a step would find now. It does not wait for a
// connection being made again (a dependency in its reconnect backoff is
// not reachable, as for a step).
func (s *Service) CheckDependencies(ctx context.Context) []Dependency {
	deps := []Dependency{{Name: DepValidator, Addr: s.cfg.ValidatorAddr}, {Name: DepExecutor, Addr: s.cfg.ExecutorAddr}}
	for i := range deps {
		cctx, cancel := context.WithTimeout(ctx, depsProbeTimeout)
		resp, err := healthpb.NewHealthClient(s.conns[i]).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		switch {
		case err != nil:
			deps[i].Err = fmt.Errorf("the %s at %s could not be asked: %s", deps[i].Name, deps[i].Addr, status.Convert(err).Message())
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			deps[i].Err = fmt.Errorf("the %s at %s answers %s (not ready: see its own log)", deps[i].Name, deps[i].Addr, resp.GetStatus())
		}
	}
	return deps
}

// DepsProbe is how often CheckDependencies should be asked (negative:
// never).
func (s *Service) DepsProbe() time.Duration { return s.cfg.DepsProbe }
