// Command xct runs XCT: the embedded cluster for a laptop (xct dev), one or
// more services against an external NATS (xct serve), and the client
// commands that start and inspect runs (xct run, runs, show).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

const usage = `xct: governed execution for LLM agents

Usage:
  xct dev   [flags]            embedded NATS + all four services on loopback; --demo plays the bundled demo
  xct dev certs DIR            write a development CA and mTLS certificates for the services and a client
  xct serve --target=T [flags] run services (orchestrator, validator, executor, tracer, or all) against NATS
  xct nats provision [flags]   as the NATS admin, make XCT's streams and buckets (before the services; they only bind)
  xct run   --model M --goal G start a run, print its steps; exit 0 when the model says done
  xct runs                     list runs
  xct show  RUN                show one run and its steps
  xct approvals                steps waiting for a human, with their proposal and preview
  xct approve RUN STEP         approve a waiting step (--reason; --as who you are)
  xct deny RUN STEP --reason   deny a waiting step; the reason goes to the model
  xct policy lint|check        check policy files, or re-evaluate a recorded chain against them
  xct crew check FILE          validate a crew file (agents, handoffs, contracts, routing) and print it
  xct resolve RUN STEP --outcome succeeded|failed|retry   decide a step in doubt
  xct cancel RUN [--reason TEXT]   stop a running run: its open step ends, its pending approval is withdrawn
  xct tools [--json]           the tool catalog the model sees: source, effect class, idempotency, timeout, schema
  xct debug RUN                print a one-time link that opens the debugger on the run (signs the browser in)
  xct rollback RUN [--to-step N]   undo an ended run's steps, newest first, as governed steps

Client commands call as --token / XCT_TOKEN, else as --as NAME (XCT_AS) with its token
from DATA_DIR/dev/credentials.yaml, else as "dev". DATA_DIR is --data-dir / XCT_DATA_DIR
(default .xct), the directory given to xct dev; the services' addresses come from
DATA_DIR/dev/addresses.yaml (written by xct dev; --cluster / XCT_CLUSTER names another
file), else the default ports, unless an address flag says otherwise.

Run 'xct COMMAND -h' for the flags of a command.
`

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if !errors.Is(err, flag.ErrHelp) && err.Error() != "" {
			fmt.Fprintln(os.Stderr, "xct:", err)
		}
		if errors.Is(err, flag.ErrHelp) {
			code = 0
		}
		os.Exit(code)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return &exitError{code: 2, err: errors.New("a command is required")}
		}
		return nil
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return cmdDev(ctx, rest, stdout, stderr)
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "runs":
		return cmdRuns(ctx, rest, stdout, stderr)
	case "show":
		return cmdShow(ctx, rest, stdout, stderr)
	case "approvals":
		return cmdApprovals(ctx, rest, stdout, stderr)
	case "approve":
		return cmdDecide(ctx, true, rest, stdout, stderr)
	case "deny":
		return cmdDecide(ctx, false, rest, stdout, stderr)
	case "policy":
		return cmdPolicy(ctx, rest, stdout, stderr)
	case "crew":
		return cmdCrew(ctx, rest, stdout, stderr)
	case "resolve":
		return cmdResolve(ctx, rest, stdout, stderr)
	case "rollback":
		return cmdRollback(ctx, rest, stdout, stderr)
	case "cancel":
		return cmdCancel(ctx, rest, stdout, stderr)
	case "tools":
		return cmdTools(ctx, rest, stdout, stderr)
	case "debug":
		return cmdDebug(ctx, rest, stdout, stderr)
	case "nats":
		return cmdNATS(ctx, rest, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return &exitError{code: 2, err: fmt.Errorf("unknown command %q", cmd)}
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("xct "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses the command line, then fills every flag it did not set
// from the environment variable XCT_<NAME> (upper case, - as _), so
// containers can be configured without long argument lists. A flag error is
// exit code 2.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsEnv(fs, args, os.LookupEnv)
}

func parseFlagsEnv(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	// Flags may come before, between or after positional arguments
	// (xct approve RUN 2 --as bob): parse, set the first positional aside,
	// parse the rest, until nothing is left.
	// A bad flag is reported with a hint, not with every flag's
	// description (xct serve has over seventy): those are for -h.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				fs.Usage()
				return err
			}
			return &exitError{code: 2, err: fmt.Errorf("%w (%s -h for flags)", explainFlagError(fs, err), fs.Name())}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return &exitError{code: 2, err: err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if _, skip := f.Value.(interface{ NoEnv() }); set[f.Name] || skip {
			return
		}
		name := envName(f.Name)
		if v, ok := lookup(name); ok {
			if err := fs.Set(f.Name, v); err != nil {
				if want := wantedValue(f); want != "" {
					err = fmt.Errorf("%q (-%s) is not %s", v, f.Name, want)
				}
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: errors.Join(errs...)}
	}
	return nil
}

// badFlagValue is how the flag package reports a value its flag could not
// take: "invalid value %q for flag -%s: %v", the last part only "parse
// error" or "value out of range" for its own kinds ("invalid boolean
// value %q for -%s: %v" for a bool).
var badFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (parse error|value out of range)$`)

// explainFlagError says what a flag of the flag package's own kinds wants
// when it could not take its value ("parse error" says nothing of it).
func explainFlagError(fs *flag.FlagSet, err error) error {
	m := badFlagValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	f := fs.Lookup(m[2])
	want := wantedValue(f)
	if want == "" {
		return err
	}
	if m[3] == "value out of range" {
		return fmt.Errorf("-%s %s: out of range (want %s)", m[2], m[1], want)
	}
	return fmt.Errorf("-%s %s is not %s", m[2], m[1], want)
}

// wantedValue says in words what values f takes, for the flag package's
// own kinds ("" for any other).
func wantedValue(f *flag.Flag) string {
	if f == nil {
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration (a number with a unit: 300ms, 5s, 2m, 1h30m)"
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number, 0 or more"
	case float64:
		return "a number"
	case bool:
		return "true or false"
	}
	return ""
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "XCT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("-log-level: %w", err)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
