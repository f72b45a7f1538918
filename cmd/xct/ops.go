package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// cmdCancel cancels a running run and waits until its end is on the chain:
// the step it was at is closed (a pending approval withdrawn), and the run
// reads cancelled everywhere.
func cmdCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cancel", stderr)
	var id identity
	addr := id.addrFlag(fs, "addr", svcOrchestrator, "orchestrator gRPC address")
	reason := fs.String("reason", "", "why (recorded on the chain and given to the approval it withdraws)")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the run's end to be recorded (0: do not wait)")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 2, err: errors.New("usage: xct cancel RUN [--reason TEXT]")}
	}
	runID := fs.Arg(0)
	client, closeConn, err := dialOrchestrator(&id, *addr)
	if err != nil {
		return err
	}
	defer closeConn()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = client.CancelRun(cctx, &xctv1.CancelRunRequest{RunId: runID, Reason: *reason})
	cancel()
	if err != nil {
		return rpcError("cancel "+runID, *addr, err)
	}
	if *wait <= 0 {
		fmt.Fprintf(stdout, "run %s: cancel requested\n", runID)
		return nil
	}
	deadline := time.Now().Add(*wait)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client.GetRun(cctx, &xctv1.GetRunRequest{RunId: runID})
		cancel()
		if err != nil {
			return rpcError("get run "+runID, *addr, err)
		}
		r := resp.GetRun()
		if s := r.GetStatus(); s != xctv1.RunStatus_RUN_STATUS_RUNNING && s != xctv1.RunStatus_RUN_STATUS_WAITING_APPROVAL && s != xctv1.RunStatus_RUN_STATUS_IN_DOUBT {
			fmt.Fprintf(stdout, "run %s %s: %s\n", runID, runStatus(s), r.GetMessage())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: cancel requested, but its end is not recorded after %s (it ends at its next step boundary; see xct show %s)", runID, *wait, runID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// toolRow is one tool of the catalog as xct tools --json prints it.
type toolRow struct {
	Name           string          `json:"name"`
	Source         string          `json:"source"`
	Effect         string          `json:"effect"`
	EffectFrom     string          `json:"effect_from"`
	Idempotent     bool            `json:"idempotent"`
	Timeout        string          `json:"timeout,omitempty"`
	MaxOutputBytes int64           `json:"max_output_bytes,omitempty"`
	Description    string          `json:"description"`
	InputSchema    json.RawMessage `json:"input_schema,omitempty"`
}

func toolRowOf(d *xctv1.ToolDescriptor) toolRow {
	row := toolRow{
		Name: d.GetName(), Source: d.GetSource(), EffectFrom: d.GetEffectFrom(),
		Effect:     strings.ToLower(strings.TrimPrefix(d.GetEffect().String(), "EFFECT_")),
		Idempotent: d.GetIdempotent(), MaxOutputBytes: d.GetMaxOutputBytes(), Description: d.GetDescription(),
	}
	if d.GetEffect() == xctv1.Effect_EFFECT_UNSPECIFIED {
		row.Effect = "irreversible" // unspecified is treated as irreversible
	}
	if d.GetTimeout() != nil {
		row.Timeout = d.GetTimeout().AsDuration().String()
	}
	if s := strings.TrimSpace(d.GetInputSchema()); s != "" && json.Valid([]byte(s)) {
		row.InputSchema = json.RawMessage(s)
	}
	return row
}

// cmdTools prints the executor's catalog: the tools the model is offered.
func cmdTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools", stderr)
	var id identity
	addr := id.addrFlag(fs, "executor-addr", svcExecutor, "executor gRPC address")
	asJSON := fs.Bool("json", false, "print the catalog as JSON, with each tool's input schema")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &exitError{code: 2, err: errors.New("usage: xct tools [--json]")}
	}
	conn, err := id.dial(*addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := xctv1.NewExecutorServiceClient(conn).ListTools(cctx, &xctv1.ListToolsRequest{})
	if err != nil {
		st := status.Convert(err)
		return fmt.Errorf("list tools (executor %s): %s: %s%s", *addr, st.Code(), st.Message(), rpcHint(err))
	}
	rows := make([]toolRow, 0, len(resp.GetTools()))
	for _, d := range resp.GetTools() {
		rows = append(rows, toolRowOf(d))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSOURCE\tEFFECT\tEFFECT FROM\tIDEMPOTENT\tTIMEOUT\tDESCRIPTION")
	for _, r := range rows {
		idem := "no"
		if r.Idempotent {
			idem = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, orDash(r.Source), r.Effect, orDash(r.EffectFrom), idem, orDash(r.Timeout), truncate(r.Description, 60))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
