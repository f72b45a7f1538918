package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/xct-dev/xct/examples"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/natsembed"
)

const shutdownTimeout = 20 * time.Second

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	target := fs.String("target", "", "services to run: orchestrator, validator, executor, tracer (comma-separated) or all")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *target == "" {
		return &exitError{code: 2, err: fmt.Errorf("-target is required (orchestrator, validator, executor, tracer or all)")}
	}
	targets, err := app.ParseTargets(*target)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	a, err := app.Start(ctx, cfg, targets, log, app.Options{})
	if err != nil {
		return err
	}
	for _, t := range targets {
		fmt.Fprintf(stdout, "%s listening on %s\n", t, a.Addr(t))
	}
	return serveUntilDone(ctx, a, stdout)
}

func serveUntilDone(ctx context.Context, a *app.App, stdout io.Writer) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-a.Err():
	}
	fmt.Fprintln(stdout, "shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	a.Stop(sctx)
	return err
}

func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", stderr)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	dataDir := fs.String("data-dir", ".xct", "where the embedded cluster keeps its JetStream store, tracer data, scripts and workspace")
	natsPort := fs.Int("nats-port", 7422, "embedded NATS port (-1 picks a free one)")
	demo := fs.Bool("demo", false, "play the bundled demo through the cluster, then keep serving")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	setDefault(fs, "workspace", &cfg.Executor.Workspace, filepath.Join(abs, "workspace"))
	setDefault(fs, "scripts-dir", &cfg.Orchestrator.ScriptsDir, filepath.Join(abs, "scripts"))
	setDefault(fs, "tracer-data", &cfg.Tracer.DataDir, filepath.Join(abs, "tracer"))
	for _, d := range []string{cfg.Executor.Workspace, cfg.Orchestrator.ScriptsDir, cfg.Tracer.DataDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfg.Orchestrator.ScriptsDir, "demo.yaml"), examples.DemoScript, 0o600); err != nil {
		return fmt.Errorf("write demo script: %w", err)
	}

	ns, err := natsembed.Start(natsembed.Config{Port: *natsPort, StoreDir: filepath.Join(abs, "nats")})
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	cfg.NATSURL = ns.ClientURL()

	a, err := app.Start(ctx, cfg, app.StartOrder, log, app.Options{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "XCT embedded cluster\n")
	fmt.Fprintf(stdout, "  nats          %s (JetStream store %s)\n", cfg.NATSURL, filepath.Join(abs, "nats"))
	for _, t := range app.StartOrder {
		fmt.Fprintf(stdout, "  %-13s %s\n", t, a.Addr(t))
	}
	fmt.Fprintf(stdout, "  workspace     %s\n", cfg.Executor.Workspace)
	if a.Tracer != nil && a.Tracer.HTTPAddr() != "" {
		fmt.Fprintf(stdout, "  debugger      http://%s/\n", a.Tracer.HTTPAddr())
	}
	if *demo {
		if err := playDemo(ctx, a.Addr(app.TargetOrchestrator), stdout); err != nil {
			fmt.Fprintln(stdout, "demo:", err)
		}
	}
	fmt.Fprintln(stdout, "serving; press Ctrl-C to stop")
	return serveUntilDone(ctx, a, stdout)
}

// setDefault gives a flag a default that depends on other flags, unless the
// user set it.
func setDefault(fs *flag.FlagSet, name string, dst *string, def string) {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	if !set {
		*dst = def
	}
}
