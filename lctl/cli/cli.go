// Package cli is the lctl command line: time-travel replay, diff, stats,
// bottlenecks, confidence, contract validation, verification, fact queries,
// conversion, export and tail, on chain files and on live chains through
// the tracer. It is a library so it can be tested without processes;
// cmd/lctl only wires it to the process.
//
// Output is plain text in the spec's formats (LCTL v4.0 part 8), or JSON
// with --json. Exit codes: 0 ok, 1 a check failed (verify or validate found
// a problem, diff found differences), 2 bad usage or unreadable input.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/text"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1 // a check found a problem
	ExitUsage  = 2 // bad usage or unreadable input
)

// Defaults for reaching a live system.
const (
	DefaultTracer  = "127.0.0.1:7704"
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// defaultCredentials is where xct dev writes the credentials file (the
	// help text names it; internal/lctllive's test checks it is XCT's).
	defaultCredentials = ".xct/dev/credentials.yaml" //nolint:gosec // a path, not a credential
	// defaultNATSCredentials is where xct dev writes the password of the
	// read-only NATS user, which lctl tail connects as.
	defaultNATSCredentials = ".xct/dev/nats-reader.yaml" //nolint:gosec // a path, not a credential
)

// Env is what a command may use of the process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads environment variables (LCTL_TRACER, LCTL_PRICES,
	// NATS_URL); nil reads none.
	Getenv func(string) string
	// TuneGC lets a command that streams a chain file set the process's
	// garbage collector for it (fewer collections, a bound on memory
	// instead; see streamChain), and keep it so once the stream has
	// read the chain. Only a process that is lctl sets it.
	TuneGC bool
	// MapFiles lets a command that streams a chain file map it
	// (lctl.StreamOptions.Map: the events' strings point into the
	// mapping, which stays until the process exits). Only a process that
	// is lctl sets it.
	MapFiles bool
	// Live reaches the chains of a running system (the tracer, the event
	// stream); nil leaves lctl to files. cmd/lctl sets XCT's.
	Live Live
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// command is one lctl subcommand.
type command struct {
	name    string
	args    string // usage after the name
	summary string
	run     func(ctx context.Context, c *cmdContext) error
}

func commands() []command {
	return []command{
		{"replay", "[--to-seq N] [--events] FILE | --chain ID", "replay a chain, or show the state at seq N", runReplay},
		{"diff", "A B   (files, or --chain ID for either)", "where two runs diverged, aligned by agent, type and tool", runDiff},
		{"stats", "[--prices FILE] FILE | --chain ID", "duration, tokens, cost, agents, errors, confidence", runStats},
		{"bottleneck", "[--top N] FILE | --chain ID", "the slowest steps, their share of the time, a recommendation", runBottleneck},
		{"confidence", "[--decay R] FILE | --chain ID", "each fact's confidence over time: decay, consensus, thresholds", runConfidence},
		{"validate", "--contracts DIR FILE | --chain ID", "check agents against their contracts (exit 1 on a violation)", runValidate},
		{"verify", "[--key FILE] FILE | --chain ID", "check seqs, timestamps, the hash chain and checkpoints; with --key, that it is exactly what the cluster signed (exit 1 on a problem)", runVerify},
		{"query", "'SELECT * WHERE ...' FILE | --chain ID", "query the fact store", runQuery},
		{"convert", "IN OUT | IN --to json|yaml [--from otlp] | --from v3 --to v4 IN [OUT]", "convert a chain between JSON and YAML, an LCTL v3 trace to v4, or OpenTelemetry traces to chains", runConvert},
		{"export", "--chain ID [-o FILE] [--to json|yaml]", "export a live chain from the tracer", runExport},
		{"tail", "--chain ID | --all [--nats URL]", "follow events live from the event stream", runTail},
		{"keygen", "NAME [-o PREFIX]", "make a key to sign checkpoints with (NAME.key) and its verifier key (NAME.pub)", runKeygen},
		{"debug", "FILE [FILE2] [--addr 127.0.0.1:8080] [--open=false]", "serve the visual debugger for chain files (two to diff them)", runDebug},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, "lctl: time-travel debugging for multi-agent LLM runs (LCTL v4.0)\n\nUsage:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  lctl %-11s %s\n", c.name, c.args)
		fmt.Fprintf(w, "  %-16s %s\n", "", c.summary)
	}
	fmt.Fprint(w, `
Every command reads a chain file (.lctl.json or .lctl.yaml; - for stdin) or a
live chain (--chain ID, from the tracer at --tracer, default 127.0.0.1:7704).
--json prints JSON for scripts. Exit codes: 0 ok, 1 a check failed, 2 bad
usage or unreadable input. Run 'lctl COMMAND -h' for a command's flags.
`)
}

// Run runs lctl with args (without the program name) and returns the exit
// code.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if len(args) == 0 {
		usage(env.Stderr)
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		usage(env.Stdout)
		return ExitOK
	case "version", "--version":
		fmt.Fprintln(env.Stdout, "lctl (XCT) for LCTL v4.0")
		return ExitOK
	}
	for _, cmd := range commands() {
		if cmd.name != name {
			continue
		}
		out := &outputWriter{w: env.Stdout}
		env.Stdout = out
		c := &cmdContext{env: env, name: name, cmd: cmd}
		err := c.runGuarded(ctx, args[1:])
		if err == nil && out.err != nil {
			err = fmt.Errorf("write the output: %w", out.err)
		}
		return c.finish(err)
	}
	fmt.Fprintf(env.Stderr, "lctl: unknown command %q\n\n", name)
	usage(env.Stderr)
	return ExitUsage
}

// runGuarded runs the command with args. With Env.MapFiles the chain
// files it streams are mapped (lctl.StreamOptions.Map) and the events'
// strings point into them: a file cut shorter while the command reads
// those strings faults this goroutine, which is then the command's error
// lctl.ErrFileChanged rather than the process's end with a stack dump.
func (c *cmdContext) runGuarded(ctx context.Context, args []string) (err error) {
	if !c.env.MapFiles {
		return c.cmd.run(ctx, c.withArgs(args))
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !lctl.MappedFault(r) {
				panic(r)
			}
			err = lctl.ErrFileChanged
		}
	}()
	return c.cmd.run(ctx, c.withArgs(args))
}

// outputWriter is a command's standard output: it keeps the first error a
// write met, and writes nothing after it, so that a command whose output
// was lost (a full disk, a closed file) fails instead of exiting 0 with
// half a report, however it printed (most lines are printed without
// looking at the error).
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// cmdContext is what a command runs with: its flags, operands and output.
type cmdContext struct {
	env  Env
	name string
	cmd  command
	args []string
	fs   *flag.FlagSet

	jsonOut bool
	tracer  string
	// unread, set by a command before it streams a chain, names per type
	// the member of the data it never reads (lctl.StreamOptions.Unread).
	unread func(typ string) string
	// cred picks the bearer token sent to the tracer and secures the
	// connection (mTLS) when its CA is set.
	cred    Credentials
	timeout time.Duration
	chains  []string // --chain, in order
	// operands are the positional arguments and --chain values in the
	// order given, each either a file or a chain.
	operands []operand
	client   *tracerClient
	// signedSeen counts the signed checkpoints verify saw (signed.go).
	signedSeen int
	// hashVersion is replay's --hash-version.
	hashVersion int
}

// operand is a chain named on the command line.
type operand struct {
	file  string
	chain string
}

func (o operand) String() string {
	if o.chain != "" {
		return "chain " + o.chain
	}
	return o.file
}

func (c *cmdContext) withArgs(args []string) *cmdContext {
	c.args = args
	c.fs = flag.NewFlagSet("lctl "+c.name, flag.ContinueOnError)
	// The flag package prints a bad flag and every flag's description;
	// parse prints the problem and one line of usage instead, and the
	// whole list only for -h.
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	return c
}

// printHelp prints the command's usage and every flag (lctl CMD -h).
func (c *cmdContext) printHelp() {
	fmt.Fprintf(c.env.Stderr, "Usage: lctl %s %s\n  %s\n\nFlags:\n", c.name, c.cmd.args, c.cmd.summary)
	c.fs.SetOutput(c.env.Stderr)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// chainFlag collects --chain values into the operands, in order.
type chainFlag struct{ c *cmdContext }

func (f chainFlag) String() string { return "" }
func (f chainFlag) Set(v string) error {
	if v == "" {
		return errors.New("--chain needs a chain id")
	}
	f.c.chains = append(f.c.chains, v)
	f.c.operands = append(f.c.operands, operand{chain: v})
	return nil
}

// common registers the flags every command that reads chains has.
func (c *cmdContext) common() {
	c.fs.BoolVar(&c.jsonOut, "json", false, "print JSON for scripts")
	c.fs.Var(chainFlag{c}, "chain", "read the live chain with this id from the tracer instead of a file")
	tracer := c.env.getenv("LCTL_TRACER")
	if tracer == "" {
		tracer = DefaultTracer
	}
	c.fs.StringVar(&c.tracer, "tracer", tracer, "tracer gRPC address (env LCTL_TRACER)")
	token := c.env.getenv("LCTL_TOKEN")
	if token == "" {
		token = c.env.getenv("XCT_TOKEN")
	}
	c.fs.StringVar(&c.cred.Token, "token", token, "bearer token for the tracer (env LCTL_TOKEN or XCT_TOKEN)")
	c.fs.StringVar(&c.cred.As, "as", c.env.getenv("XCT_AS"), "call the tracer as this principal, with its token from the credentials file (env XCT_AS; default dev)")
	c.fs.StringVar(&c.cred.File, "credentials", c.env.getenv("XCT_CREDENTIALS"), "credentials file (default "+defaultCredentials+", written by xct dev)")
	c.fs.StringVar(&c.cred.TLSCert, "tls-cert", c.env.getenv("XCT_TLS_CERT"), "client certificate (PEM) for mTLS")
	c.fs.StringVar(&c.cred.TLSKey, "tls-key", c.env.getenv("XCT_TLS_KEY"), "the client certificate's key (PEM)")
	c.fs.StringVar(&c.cred.TLSCA, "tls-ca", c.env.getenv("XCT_TLS_CA"), "CA bundle (PEM) to verify the tracer with; without it the connection is plaintext")
	c.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on each call to the tracer")
}

// usageError is bad usage: exit 2 with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// inputError is input that cannot be read: exit 2.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// errCheckFailed is a check that found a problem: exit 1, the report
// already printed.
var errCheckFailed = errors.New("check failed")

// errReported is bad input whose message was already printed: exit 2.
var errReported = errors.New("reported")

// parse parses flags and operands, flags and operands in any order (the
// spec writes `lctl validate chain.lctl.json --contracts ./contracts/`).
func (c *cmdContext) parse() error {
	args := c.args
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.printHelp()
				return err
			}
			return &usageError{err.Error()}
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			return nil
		}
		if rest[0] == "--" {
			for _, a := range rest[1:] {
				c.operands = append(c.operands, operand{file: a})
			}
			return nil
		}
		c.operands = append(c.operands, operand{file: rest[0]})
		args = rest[1:]
	}
}

// finish turns a command's error into the exit code, printing it.
func (c *cmdContext) finish(err error) int {
	if c.client != nil {
		c.client.close()
	}
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errCheckFailed):
		return ExitFailed
	case errors.Is(err, errReported):
		return ExitUsage
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(c.env.Stderr, "lctl %s: %s\n", c.name, visible(ue.msg))
		}
		fmt.Fprintf(c.env.Stderr, "Usage: lctl %s %s (lctl %s -h for flags)\n", c.name, c.cmd.args, c.name)
		return ExitUsage
	case errors.Is(err, context.Canceled):
		return ExitOK
	}
	fmt.Fprintf(c.env.Stderr, "lctl %s: %s\n", c.name, visible(err.Error()))
	return ExitUsage
}

// one returns the single chain operand a command works on.
func (c *cmdContext) one() (operand, error) {
	switch len(c.operands) {
	case 1:
		return c.operands[0], nil
	case 0:
		return operand{}, usagef("name a chain file, or a live chain with --chain ID")
	}
	names := make([]string, len(c.operands))
	for i, o := range c.operands {
		names[i] = o.String()
	}
	return operand{}, usagef("one chain at a time, got %d: %s", len(c.operands), strings.Join(names, ", "))
}

func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// printJSON writes v as indented JSON.
func (c *cmdContext) printJSON(v any) error {
	enc := json.NewEncoder(c.env.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// out prints a line (or part of one) of a command's text output. The
// format is lctl's; the arguments are what chains hold (a model's goal
// and end message, a fact's text, agents' names): each string among them
// is printed with its hidden characters escaped (text.EscapeHidden), so
// an escape sequence or a newline in a chain cannot rewrite or forge the
// operator's terminal lines, as replay's event lines already do.
func (c *cmdContext) out(format string, args ...any) {
	fmt.Fprintf(c.env.Stdout, format, visibleArgs(args)...)
}

func (c *cmdContext) warn(format string, args ...any) {
	fmt.Fprintf(c.env.Stderr, "warning: "+format+"\n", visibleArgs(args)...)
}

// visibleArgs is args with every string, error and list of strings
// written as it shows (text.EscapeHidden); other values as they are.
func visibleArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var v any
		switch x := a.(type) {
		case string:
			v = visible(x)
		case []string:
			vs := make([]string, len(x))
			for j, s := range x {
				vs[j] = visible(s)
			}
			v = vs
		case error:
			v = visible(x.Error())
		default:
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

// visible is s with its hidden characters escaped.
func visible(s string) string {
	b := text.EscapeHidden([]byte(s), 0)
	if len(b) == len(s) {
		return s
	}
	return string(b)
}

// readFile reads a named file or stdin ("-").
func (c *cmdContext) readFile(path string) ([]byte, error) {
	fullReads.Add(1)
	r := c.env.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &inputError{err}
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, &inputError{fmt.Errorf("read %s: %w", path, err)}
	}
	return raw, nil
}

// sortedCounts renders a count map as "a 2, b 1", largest first.
func sortedCounts(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool {
		if l[i].v != l[j].v {
			return l[i].v > l[j].v
		}
		return l[i].k < l[j].k
	})
	parts := make([]string, len(l))
	for i, x := range l {
		parts[i] = fmt.Sprintf("%s (%d)", x.k, x.v)
	}
	return strings.Join(parts, ", ")
}
