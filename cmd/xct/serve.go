package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/xct-dev/xct/examples"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/devcerts"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/natsembed"
	"github.com/xct-dev/xct/internal/verdict"
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
	defer app.TuneGC(cfg.GCPercent)()
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
	if len(args) > 0 && args[0] == "certs" {
		return cmdDevCerts(args[1:], stdout, stderr)
	}
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
	unlock, err := lockDataDir(abs)
	if err != nil {
		return err
	}
	defer unlock()
	setDefault(fs, "workspace", &cfg.Executor.Workspace, filepath.Join(abs, "workspace"))
	setDefault(fs, "scripts-dir", &cfg.Orchestrator.ScriptsDir, filepath.Join(abs, "scripts"))
	setDefault(fs, "tracer-data", &cfg.Tracer.DataDir, filepath.Join(abs, "tracer"))
	for _, d := range []string{cfg.Executor.Workspace, cfg.Orchestrator.ScriptsDir, cfg.Tracer.DataDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	scripts := map[string][]byte{"demo.yaml": examples.DemoScript}
	maps.Copy(scripts, examples.CrewDemoScripts)
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(cfg.Orchestrator.ScriptsDir, name), script, 0o600); err != nil {
			return fmt.Errorf("write demo script: %w", err)
		}
	}

	// Authentication is on: the principals' tokens are in the data dir
	// (made once), the services read them as their tokens file and call
	// each other with the service token. Plaintext on loopback unless TLS
	// files are given.
	credsPath := filepath.Join(abs, "dev", "credentials.yaml")
	creds, err := auth.DevCredentials(credsPath)
	if err != nil {
		return err
	}
	setDefault(fs, "auth-tokens", &cfg.Auth.TokensFile, credsPath)
	cpKey, cpPub, err := devCheckpointKey(filepath.Join(abs, "dev")) // devcheckpoint.go
	if err != nil {
		return err
	}
	setDefault(fs, "checkpoint-key-file", &cfg.Orchestrator.Checkpoint.KeyFile, cpKey)
	// The validator signs allow verdicts with a key made once in the data
	// dir; the executor trusts its public key (docs/security.md).
	keys, err := verdict.WriteKeyPair(filepath.Join(abs, "dev"))
	if err != nil {
		return fmt.Errorf("verdict keys: %w", err)
	}
	setDefault(fs, "verdict-key", &cfg.Validator.VerdictKeyFile, keys.Private)
	setDefault(fs, "verdict-trust", &cfg.Executor.VerdictTrust, keys.Public)
	if !cfg.Security.TLS.Enabled() {
		cfg.Security.Plaintext = true
	}
	if cfg.Security.ServiceToken == "" {
		cfg.Security.ServiceToken, _ = auth.TokenOf(creds, auth.DevServicePrincipal)
	}

	// NATS has no anonymous access: one user per service with only its
	// rights, a read-only one for lctl tail and an admin, their passwords
	// made once in the data dir (0600), beside the other dev secrets.
	natsCredsPath := filepath.Join(abs, "dev", "nats.yaml")
	natsUsers, err := natsauth.DevFile(natsCredsPath)
	if err != nil {
		return err
	}
	// lctl tail's file: the read-only user's password alone.
	natsReaderPath := filepath.Join(abs, "dev", "nats-reader.yaml")
	if err := natsauth.WriteSubset(natsReaderPath, natsUsers, natsauth.Reader); err != nil {
		return err
	}
	serverUsers, err := natsauth.ServerUsers(natsUsers)
	if err != nil {
		return fmt.Errorf("%s: %w", natsCredsPath, err)
	}
	cfg.NATSUsers = natsUsers
	// Every user's password, the admin's included: out of reach of a
	// program run without a sandbox (executor.Config.SecretFiles).
	cfg.Executor.SecretFiles = append(cfg.Executor.SecretFiles, natsCredsPath)
	natsErrs := newDevNATSErrors(log, filepath.Join(abs, "nats"))
	ns, err := natsembed.Start(natsembed.Config{Port: *natsPort, StoreDir: filepath.Join(abs, "nats"), Users: serverUsers, OnError: natsErrs.report})
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	cfg.NATSURL = ns.ClientURL()
	// XCT's streams and buckets are made by the admin before the services
	// start; the services only bind (internal/provision).
	if err := devProvision(ctx, cfg.NATSURL, natsUsers, &cfg); err != nil {
		return err
	}

	defer app.TuneGC(cfg.GCPercent)()
	a, err := app.Start(ctx, cfg, app.StartOrder, log, app.Options{})
	if err != nil {
		return err
	}
	natsErrs.store.Store(a.StoreHealth())
	addrsPath := filepath.Join(abs, "dev", "addresses.yaml")
	addrs := clusterAddrs{
		Orchestrator: a.Addr(app.TargetOrchestrator), Validator: a.Addr(app.TargetValidator),
		Executor: a.Addr(app.TargetExecutor), Tracer: a.Addr(app.TargetTracer),
	}
	if a.Tracer != nil && a.Tracer.HTTPAddr() != "" {
		addrs.Debugger = "http://" + a.Tracer.HTTPAddr() + "/"
	}
	if err := writeAddrs(addrsPath, addrs); err != nil {
		return fmt.Errorf("addresses file: %w", err)
	}
	defer func() { _ = os.Remove(addrsPath) }()
	fmt.Fprintf(stdout, "XCT embedded cluster\n")
	fmt.Fprintf(stdout, "  nats          %s (JetStream store %s)\n", cfg.NATSURL, filepath.Join(abs, "nats"))
	fmt.Fprintf(stdout, "  nats users    %s (a user per service, reader, admin); %s (lctl tail's)\n", natsCredsPath, natsReaderPath)
	for _, t := range app.StartOrder {
		fmt.Fprintf(stdout, "  %-13s %s\n", t, a.Addr(t))
	}
	fmt.Fprintf(stdout, "  workspace     %s\n", cfg.Executor.Workspace)
	fmt.Fprintf(stdout, "  verdict keys  %s (validator), %s (executor)\n", cfg.Validator.VerdictKeyFile, cfg.Executor.VerdictTrust)
	fmt.Fprintf(stdout, "  credentials   %s (xct COMMAND --as alice|bob|carol|dave|admin; default dev)\n", credsPath)
	fmt.Fprintf(stdout, "  addresses     %s\n", addrsPath)
	if rel := filepath.Clean(*dataDir); rel != defaultDataDir {
		fmt.Fprintf(stdout, "  clients       export XCT_DATA_DIR=%s (client commands then find the credentials and addresses)\n", abs)
	}
	if a.Tracer != nil && a.Tracer.HTTPAddr() != "" {
		fmt.Fprintf(stdout, "  debugger      http://%s/ (sign in with a token from the credentials file: bob's to approve)\n", a.Tracer.HTTPAddr())
	}
	if cfg.Orchestrator.Checkpoint.KeyFile == cpKey {
		fmt.Fprintf(stdout, "  checkpoints   signed with %s (verify an export: lctl verify --key %s FILE)\n", cpKey, cpPub)
	}
	if *demo {
		devTok, _ := auth.TokenOf(creds, auth.DevUser)
		demoID := &identity{token: devTok, tls: cfg.Security.TLS}
		bobTok, _ := auth.TokenOf(creds, "bob")
		approver := &identity{token: bobTok, tls: cfg.Security.TLS}
		if err := playDemo(ctx, demoID, approver, a.Addr(app.TargetOrchestrator), a.Addr(app.TargetValidator), stdout); err != nil {
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

// cmdDevCerts writes a development CA and certificates: one per service
// (with its SPIFFE ID) and one for clients.
func cmdDevCerts(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev certs", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 2, err: errors.New("usage: xct dev certs DIR")}
	}
	files, err := devcerts.Write(fs.Arg(0))
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	fmt.Fprintf(stdout, "serve a service with --tls-cert %[1]s/NAME.crt --tls-key %[1]s/NAME.key --tls-ca %[1]s/ca.crt;\n"+
		"clients add --tls-cert %[1]s/client.crt --tls-key %[1]s/client.key --tls-ca %[1]s/ca.crt\n", fs.Arg(0))
	return nil
}
