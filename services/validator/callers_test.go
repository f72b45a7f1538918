package validator_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/verdict"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/services/validator"
)

// TestVerdictCallers: every principal with role service got signed
// verdicts, the tracer too (it parses what submitters export over OTLP):
// one taken over was a way to act with no event on any chain. With
// --verdict-callers only the orchestrators' principals get signatures;
// other services and admins get the same decision unsigned.
func TestVerdictCallers(t *testing.T) {
	signer, _, err := verdict.NewPair(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var cfg validator.Config
	fs := flag.NewFlagSet("validator", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--verdict-callers", " service:orchestrator , service:orchestrator-b"}); err != nil {
		t.Fatal(err)
	}
	cfg.Signer = signer
	s, err := validator.NewWithCatalog(cfg, catalog.Static(testTools()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := validator.NewWithCatalog(validator.Config{Signer: signer}, catalog.Static(testTools()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := benchRequest(t)
	req.StepId = wire.StepID(req.GetRun().GetRunId(), int(req.GetStep()), req.GetProposal().GetTool(), req.GetProposal().GetArguments())
	svc := func(name string) auth.Principal {
		return auth.Principal{Name: name, Roles: []string{auth.RoleService}, Service: true}
	}
	for _, c := range []struct {
		svc    *validator.Service
		caller auth.Principal
		signed bool
	}{
		{s, svc("service:orchestrator"), true},
		{s, svc("service:orchestrator-b"), true},
		{s, svc("Service:Orchestrator-B"), false}, // a name grants only itself (auth.SamePrincipal)
		{s, svc("service:tracer"), false},
		{s, auth.Principal{Name: "admin", Roles: []string{auth.RoleAdmin}}, false},
		{open, svc("service:tracer"), true}, // without the list: any service
		{open, auth.Principal{Name: "admin", Roles: []string{auth.RoleAdmin}}, false},
	} {
		resp, err := c.svc.Validate(auth.NewContext(context.Background(), c.caller), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetVerdict().GetSigned() != nil; got != c.signed || resp.GetVerdict().GetError() != nil {
			t.Errorf("%s: signed %v, want %v (%v)", c.caller.Name, got, c.signed, resp.GetVerdict())
		}
	}
}
