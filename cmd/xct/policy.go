package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
	"github.com/xct-dev/xct/services/validator"
)

const policyUsage = `usage:
  xct policy lint POLICY...                        compile, type-check, report unreachable or shadowed rules
  xct policy check POLICY... --chain FILE|RUN_ID   re-evaluate every step of a recorded chain
`

// cmdPolicy is xct policy lint|check: the validator's policy engine, run
// offline against policy files and recorded chains.
func cmdPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, policyUsage)
		return &exitError{code: 2, err: errors.New("policy: lint or check is required")}
	}
	switch args[0] {
	case "lint":
		return cmdPolicyLint(ctx, args[1:], stdout, stderr)
	case "check":
		return cmdPolicyCheck(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, policyUsage)
	return &exitError{code: 2, err: fmt.Errorf("policy: unknown subcommand %q", args[0])}
}

// catalogFrom asks an executor for its tools; "" means no catalog (tools
// and schemas are then not checked).
func catalogFrom(ctx context.Context, id *identity, addr string) (*catalog.Catalog, error) {
	if addr == "" {
		return nil, nil
	}
	conn, err := id.dial(addr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := xctv1.NewExecutorServiceClient(conn).ListTools(cctx, &xctv1.ListToolsRequest{})
	if err != nil {
		return nil, fmt.Errorf("tool catalog from executor %s: %w", addr, err)
	}
	return catalog.Static(resp.GetTools()...), nil
}

func cmdPolicyLint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy lint", stderr)
	var id identity
	executorAddr := fs.String("executor-addr", "", "executor to read the tool catalog from, to check tool names (optional)")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return &exitError{code: 2, err: errors.New("usage: xct policy lint POLICY [POLICY]")}
	}
	cat, err := catalogFrom(ctx, &id, *executorAddr)
	if err != nil {
		return err
	}
	findings, err := validator.LintFiles(cat, fs.Args()...)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	errorsFound := 0
	for _, f := range findings {
		fmt.Fprintln(stdout, f.String())
		if f.Severity == validator.SeverityError {
			errorsFound++
		}
	}
	if errorsFound > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d errors", errorsFound)}
	}
	fmt.Fprintf(stdout, "%s: ok (%d warnings)\n", strings.Join(fs.Args(), ", "), len(findings))
	return nil
}

func cmdPolicyCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy check", stderr)
	var id identity
	chain := fs.String("chain", "", "a chain file (.lctl.json / .lctl.yaml) or a run id to fetch from the tracer")
	tracerAddr := id.addrFlag(fs, "tracer-addr", svcTracer, "tracer to fetch a chain by run id from")
	executorAddr := fs.String("executor-addr", "", "executor to read the tool catalog from, to check tools and schemas too (optional)")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 || *chain == "" {
		return &exitError{code: 2, err: errors.New("usage: xct policy check POLICY... --chain FILE|RUN_ID")}
	}
	policy, err := validator.LoadPolicyFiles(fs.Args()...)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	events, err := loadChain(ctx, &id, *chain, *tracerAddr)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	cat, err := catalogFrom(ctx, &id, *executorAddr)
	if err != nil {
		return err
	}
	steps, err := validator.Recheck(policy, cat, events)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tTOOL\tWAS\tNOW\tCHANGE\tWHY")
	stricter, looser := 0, 0
	for i := range steps {
		st := &steps[i]
		change := ""
		switch {
		case st.Stricter():
			change, stricter = "stricter", stricter+1
		case st.Looser():
			change, looser = "looser", looser+1
		}
		var why []string
		for _, r := range st.Now.GetReasons() {
			why = append(why, r.GetRuleId())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", st.Step, st.Tool, verdictName(st.Was), verdictName(st.Now.GetDecision()), change, strings.Join(why, ", "))
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "\n%d steps: %d would now be refused or need a human, %d would now be allowed more easily (policy %s)\n",
		len(steps), stricter, looser, policy.Version())
	if stricter+looser > 0 {
		return &exitError{code: 1, err: errors.New("the policy decides differently on this chain")}
	}
	return nil
}

// loadChain reads a chain file, or fetches a run's chain from the tracer.
func loadChain(ctx context.Context, id *identity, ref, tracerAddr string) ([]lctl.Event, error) {
	if f, err := os.Open(ref); err == nil {
		defer func() { _ = f.Close() }()
		file, err := lctl.DecodeFile(f, lctl.FormatForPath(ref))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		return file.Events, nil
	}
	if err := lctl.ValidateChainID(ref); err != nil {
		return nil, fmt.Errorf("%q is neither a readable file nor a run id", ref)
	}
	conn, err := id.dial(tracerAddr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := lctlv1.NewTracerServiceClient(conn).GetChain(cctx, &lctlv1.GetChainRequest{ChainId: ref})
	if err != nil {
		return nil, fmt.Errorf("chain %s from the tracer %s: %w", ref, tracerAddr, err)
	}
	events := make([]lctl.Event, 0, len(resp.GetEvents()))
	for _, e := range resp.GetEvents() {
		events = append(events, lctlpb.FromProto(e))
	}
	return events, nil
}
