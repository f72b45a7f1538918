package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Rule says who may call one RPC.
type Rule struct {
	// Roles may call it (admin may call everything).
	Roles []string
	// AnyRole lets every authenticated principal with at least one role
	// call it (reads).
	AnyRole bool
	// Callers, when set, are the only principals that may call it: each
	// a service principal ("service:<name>") holding role service. Roles
	// and admin then grant nothing. It keeps a server that acts on what
	// it is asked, with no verdict to check (a tool server), to the one
	// XCT service that calls it.
	Callers []string
}

// Table maps full gRPC method names ("/pkg.Service/Method") to rules.
// A method it does not name is refused.
type Table map[string]Rule

// OpenServices are served without authentication: probes must reach them.
var OpenServices = []string{"grpc.health.v1.Health"}

// Errors of Authorize.
var (
	ErrNotInTable = errors.New("no authorization rule for the method")
	ErrNoRole     = errors.New("the caller does not hold a role that may call the method")
)

// reader is the rule for reads: every role.
var reader = Rule{AnyRole: true}

func roles(rs ...string) Rule { return Rule{Roles: rs} }

// Service principals of a deployment's certificates (`xct dev certs`,
// deploy/k8s) that the table names as a method's only callers.
const (
	// ExecutorPrincipal is the executor's identity, the one it presents
	// to tool servers (a tools file's tls).
	ExecutorPrincipal = ServicePrincipalPrefix + "executor"
	// OrchestratorPrincipal is the orchestrator's identity, the one it
	// presents to external models (ProposerService).
	OrchestratorPrincipal = ServicePrincipalPrefix + "orchestrator"
)

func only(names ...string) Rule { return Rule{Callers: names} }

// DefaultTable is XCT's authorization: every RPC of every service, with
// the roles that may call it. Reads (runs, chains, approvals) are open to
// every role; changes need the role that owns them. Request fields that name
// another principal are trusted only from role service (the handlers check
// that), and the handlers apply the finer rules: a submitter cancels only
// its own runs, an approver never decides its own run's steps.
func DefaultTable() Table {
	return Table{
		// Orchestrator.
		xctv1.OrchestratorService_StartRun_FullMethodName:    roles(RoleSubmitter),
		xctv1.OrchestratorService_WatchRun_FullMethodName:    reader,
		xctv1.OrchestratorService_GetRun_FullMethodName:      reader,
		xctv1.OrchestratorService_ListRuns_FullMethodName:    reader,
		xctv1.OrchestratorService_CancelRun_FullMethodName:   roles(RoleSubmitter, RoleOperator),
		xctv1.OrchestratorService_RollbackRun_FullMethodName: roles(RoleOperator),

		// Validator: verdicts and approval requests come from the
		// orchestrator only; people list and decide approvals.
		xctv1.ValidatorService_Validate_FullMethodName:        roles(RoleService),
		xctv1.ValidatorService_RequestApproval_FullMethodName: roles(RoleService),
		xctv1.ValidatorService_ListApprovals_FullMethodName:   reader,
		xctv1.ValidatorService_DecideApproval_FullMethodName:  roles(RoleApprover),
		// A cancelled run's orchestrator withdraws its pending approval.
		xctv1.ValidatorService_WithdrawApproval_FullMethodName: roles(RoleService),

		// Executor: only the orchestrator runs tools; operators resolve
		// steps in doubt; the catalog is read by policy authors too.
		xctv1.ExecutorService_ListTools_FullMethodName:   reader,
		xctv1.ExecutorService_Execute_FullMethodName:     roles(RoleService),
		xctv1.ExecutorService_PreviewStep_FullMethodName: roles(RoleService),
		xctv1.ExecutorService_GetStep_FullMethodName:     roles(RoleService, RoleOperator, RoleAuditor),
		xctv1.ExecutorService_ResolveStep_FullMethodName: roles(RoleOperator),

		// Tracer: reads of chains and their analyses.
		lctlv1.TracerService_ListChains_FullMethodName:        reader,
		lctlv1.TracerService_GetChain_FullMethodName:          reader,
		lctlv1.TracerService_ReplayChain_FullMethodName:       reader,
		lctlv1.TracerService_ExportChain_FullMethodName:       reader,
		lctlv1.TracerService_VerifyChain_FullMethodName:       reader,
		lctlv1.TracerService_DiffChains_FullMethodName:        reader,
		lctlv1.TracerService_ChainStats_FullMethodName:        reader,
		lctlv1.TracerService_FindBottlenecks_FullMethodName:   reader,
		lctlv1.TracerService_FactConfidence_FullMethodName:    reader,
		lctlv1.TracerService_QueryFacts_FullMethodName:        reader,
		lctlv1.TracerService_ValidateContracts_FullMethodName: reader,

		// Models and tools served with grpcx are each called by one of
		// XCT's services: a tool server acts on every Invoke it accepts
		// and sees no verdict, so only the executor (which acts only on
		// the validator's signed allow) may reach it; a model is asked by
		// the orchestrator only. Another service, a person's token, admin
		// included, is refused (a deployment naming its services
		// otherwise replaces the rules: grpcx.WithTable).
		xctv1.ProposerService_Propose_FullMethodName: only(OrchestratorPrincipal),
		xctv1.ToolService_Describe_FullMethodName:    only(ExecutorPrincipal),
		xctv1.ToolService_Invoke_FullMethodName:      only(ExecutorPrincipal),

		// OTLP trace ingestion into the tracer: agents that submit runs,
		// and services.
		"/opentelemetry.proto.collector.trace.v1.TraceService/Export": roles(RoleSubmitter, RoleService),

		// Reflection describes the API to any authenticated caller.
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      reader,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": reader,
	}
}

// IsOpen reports whether a method is served without authentication.
func IsOpen(fullMethod string) bool {
	for _, s := range OpenServices {
		if strings.HasPrefix(fullMethod, "/"+s+"/") {
			return true
		}
	}
	return false
}

// Authorize reports whether p may call fullMethod: nil, or an error
// wrapping ErrNotInTable or ErrNoRole.
func (t Table) Authorize(p Principal, fullMethod string) error {
	rule, ok := t[fullMethod]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotInTable, fullMethod)
	}
	if len(p.Roles) == 0 {
		return fmt.Errorf("%w: %s has no roles", ErrNoRole, p.Name)
	}
	if len(rule.Callers) > 0 {
		if slices.Contains(p.Roles, RoleService) && slices.ContainsFunc(rule.Callers, p.Is) {
			return nil
		}
		return fmt.Errorf("%w: %s may be called by %s only, not %s", ErrNoRole, fullMethod, strings.Join(rule.Callers, " or "), p.Name)
	}
	if rule.AnyRole || p.Has(RoleAdmin) {
		return nil
	}
	for _, r := range rule.Roles {
		if p.Has(r) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s needs %s", ErrNoRole, fullMethod, strings.Join(rule.Roles, " or "))
}

// Missing returns the methods of fullMethods the table has no rule for
// (open methods excepted).
func (t Table) Missing(fullMethods []string) []string {
	var out []string
	for _, m := range fullMethods {
		if _, ok := t[m]; !ok && !IsOpen(m) {
			out = append(out, m)
		}
	}
	return out
}
