package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/natsauth"
	"github.com/xct-dev/xct/internal/provision"
)

// cmdNATS runs the NATS administration commands: provision.
func cmdNATS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "provision" {
		return &exitError{code: 2, err: errors.New("usage: xct nats provision [flags] (xct nats provision -h for the flags)")}
	}
	return cmdNATSProvision(ctx, args[1:], stdout, stderr)
}

// cmdNATSProvision makes every JetStream stream and bucket XCT uses, as
// the NATS admin, before the services start (they only bind), and checks
// the ones that exist. Run again, it changes nothing.
func cmdNATSProvision(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("nats provision", stderr)
	url := fs.String("nats", app.DefaultNATSURL, "NATS server URL (no credentials in it)")
	credsFile := fs.String("nats-credentials", "", "file of NATS passwords (YAML, user: password, mode 0600) with the admin's entry; env "+app.EnvNATSPassword+" (and "+app.EnvNATSUser+", default admin) instead")
	d := provision.Defaults()
	replicas := fs.Int("replicas", d.Replicas, "JetStream replicas of every stream and bucket (3 in production): the services' --replicas")
	duplicates := fs.Duration("duplicates", d.Duplicates, "the chains' deduplication window")
	retention := fs.Duration("step-retention", d.StepRetention, "how long step records and their blobs are kept (the executor's --step-retention); 0 keeps them forever")
	wait := fs.Duration("wait", time.Minute, "how long to wait for NATS JetStream to answer (a deployment's NATS may start with this command)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &exitError{code: 2, err: fmt.Errorf("xct nats provision takes no arguments, got %q", fs.Args())}
	}
	if err := app.CheckNATSURL("--nats", *url); err != nil {
		return &exitError{code: 2, err: err}
	}
	cr, err := adminCredentials(*credsFile, os.Getenv)
	if err != nil {
		return err
	}
	if *replicas < 1 || *duplicates <= 0 || *retention < 0 {
		return &exitError{code: 2, err: fmt.Errorf("xct nats provision: want --replicas ≥ 1, --duplicates > 0, --step-retention ≥ 0 (got %d, %v, %v)", *replicas, *duplicates, *retention)}
	}
	s := provision.Settings{Replicas: *replicas, Duplicates: *duplicates, StepRetention: *retention}
	results, err := provisionWithin(ctx, *url, cr, s, *wait, stderr)
	for _, r := range results {
		what := "exists"
		if r.Created {
			what = "created"
		}
		fmt.Fprintf(stdout, "%-8s %s %s (stream %s)", what, r.Spec.Kind, r.Spec.Name, r.Spec.Stream)
		if len(r.Updated) > 0 {
			fmt.Fprintf(stdout, "; %s", strings.Join(r.Updated, ", "))
		}
		if len(r.Differs) > 0 {
			// The operator's: kept, said.
			fmt.Fprintf(stdout, "; kept as it is: %s", strings.Join(r.Differs, ", "))
		}
		fmt.Fprintln(stdout)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "provisioned: %d streams and buckets with %d replicas; the services bind them\n", len(results), s.Replicas)
	return nil
}

// adminCredentials are the admin's (or the user XCT_NATS_USER names) from
// the credentials file or the environment.
func adminCredentials(file string, getenv func(string) string) (natsauth.Credentials, error) {
	user := getenv(app.EnvNATSUser)
	if user == "" {
		user = natsauth.Admin
	}
	if file != "" {
		f, err := natsauth.Load(file)
		if err != nil {
			return natsauth.Credentials{}, err
		}
		return f.For(user)
	}
	if pw := getenv(app.EnvNATSPassword); pw != "" {
		return natsauth.Credentials{User: user, Password: pw}, nil
	}
	return natsauth.Credentials{}, &exitError{code: 2, err: fmt.Errorf("xct nats provision needs the NATS admin's password: --nats-credentials FILE or %s", app.EnvNATSPassword)}
}

// provisionWithin connects and provisions, trying again with backoff for
// up to wait while NATS or JetStream does not answer. Settings XCT never
// makes and refusals are not retried.
func provisionWithin(ctx context.Context, url string, cr natsauth.Credentials, s provision.Settings, wait time.Duration, stderr io.Writer) ([]provision.Result, error) {
	deadline := time.Now().Add(wait)
	backoff := 250 * time.Millisecond
	for {
		results, err := provisionOnce(ctx, url, cr, s)
		if err == nil || errors.Is(err, provision.ErrSettings) || errors.Is(err, nats.ErrAuthorization) ||
			errors.Is(err, nats.ErrPermissionViolation) || time.Now().Add(backoff).After(deadline) {
			return results, err
		}
		fmt.Fprintf(stderr, "xct nats provision: %v; trying again in %v\n", err, backoff)
		select {
		case <-ctx.Done():
			return results, err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func provisionOnce(ctx context.Context, url string, cr natsauth.Credentials, s provision.Settings) ([]provision.Result, error) {
	nc, err := nats.Connect(url, nats.Name("xct-nats-provision"), nats.Timeout(5*time.Second), cr.Option())
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return provision.Run(pctx, js, s)
}

// devProvision makes the embedded cluster's streams as its admin, with the
// settings the services are given.
func devProvision(ctx context.Context, url string, users natsauth.File, cfg *app.Config) error {
	cr, err := users.For(natsauth.Admin)
	if err != nil {
		return err
	}
	s := provision.Settings{Replicas: cfg.Replicas, Duplicates: provision.Defaults().Duplicates, StepRetention: cfg.Executor.StepRetention}
	if _, err := provisionOnce(ctx, url, cr, s); err != nil {
		return fmt.Errorf("provision the embedded NATS: %w", err)
	}
	return nil
}
