package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"XCT_NATS":           "nats://nats:4222",
		"XCT_CALL_TIMEOUT":   "5s",
		"XCT_MAX_STEPS":      "9",
		"XCT_VALIDATOR_ADDR": "ignored:1", // the command line wins
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nats := fs.String("nats", "default", "")
	timeout := fs.Duration("call-timeout", time.Minute, "")
	steps := fs.Int("max-steps", 50, "")
	addr := fs.String("validator-addr", "default", "")
	other := fs.String("other", "default", "")
	if err := parseFlagsEnv(fs, []string{"--validator-addr", "cli:2"}, lookup); err != nil {
		t.Fatal(err)
	}
	if *nats != "nats://nats:4222" || *timeout != 5*time.Second || *steps != 9 || *addr != "cli:2" || *other != "default" {
		t.Fatalf("nats %q timeout %v steps %d addr %q other %q", *nats, *timeout, *steps, *addr, *other)
	}

	env = map[string]string{"XCT_MAX_STEPS": "many"}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	fs2.Int("max-steps", 50, "")
	err := parseFlagsEnv(fs2, nil, lookup)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "XCT_MAX_STEPS") {
		t.Fatalf("err = %v", err)
	}
}

func TestFlagsAfterPositionalArguments(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	as := fs.String("as", "me", "")
	reason := fs.String("reason", "", "")
	none := func(string) (string, bool) { return "", false }
	if err := parseFlagsEnv(fs, []string{"run-1", "--as", "bob", "2", "--reason", "looks right"}, none); err != nil {
		t.Fatal(err)
	}
	if *as != "bob" || *reason != "looks right" || fs.NArg() != 2 || fs.Arg(0) != "run-1" || fs.Arg(1) != "2" {
		t.Fatalf("as %q reason %q args %v", *as, *reason, fs.Args())
	}
}

// A bad flag is one line that names it and says where the flags are
// listed; -h lists them.
func TestBadFlagIsOneLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dev", "--bogus"}, {"serve", "--max-steps", "many"}, {"approve", "--as"}} {
		var stdout, stderr strings.Builder
		err := run(context.Background(), args, &stdout, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("xct %v: err %v, want exit 2", args, err)
			continue
		}
		want := "xct " + args[0] + " -h for flags"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), strings.TrimLeft(args[1], "-")) {
			t.Errorf("xct %v: %q does not name the flag and %q", args, err, want)
		}
		if stderr.Len() != 0 || stdout.Len() != 0 {
			t.Errorf("xct %v printed more than the error: stdout %q, stderr %d bytes", args, stdout.String(), stderr.Len())
		}
	}
	var stderr strings.Builder
	if err := run(context.Background(), []string{"dev", "-h"}, io.Discard, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("xct dev -h: %v", err)
	}
	if !strings.Contains(stderr.String(), "-max-steps") {
		t.Errorf("xct dev -h does not list the flags: %q", stderr.String())
	}
}

// Session 18 (ops18), issue 17: a value a flag of the flag package's own
// kinds could not take was reported as "invalid value "5" for flag
// -deps-probe: parse error", and from the environment as only
// "XCT_DEPS_PROBE: parse error": neither said what was wanted, the second
// not even which value. Each now names the flag, the value and the kind.
func TestBadFlagValuesSayWhatIsWanted(t *testing.T) {
	t.Parallel()
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("xct serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("deps-probe", time.Second, "")
		fs.Int("max-steps", 50, "")
		fs.Bool("openai-stream", false, "")
		fs.Float64("ratio", 1, "")
		fs.String("nats", "", "")
		return fs
	}
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--deps-probe", "5"}, nil, `-deps-probe 5 is not a duration (a number with a unit: 300ms, 5s, 2m, 1h30m) (xct serve -h for flags)`},
		{[]string{"--max-steps=ten"}, nil, `-max-steps ten is not a whole number`},
		{[]string{"--max-steps=99999999999999999999"}, nil, `-max-steps 99999999999999999999: out of range (want a whole number)`},
		{[]string{"--openai-stream=yes"}, nil, `-openai-stream yes is not true or false`},
		{[]string{"--ratio=half"}, nil, `-ratio half is not a number`},
		{[]string{"--bogus"}, nil, `flag provided but not defined: -bogus (xct serve -h for flags)`},
		{nil, map[string]string{"XCT_DEPS_PROBE": "abc"}, `XCT_DEPS_PROBE: "abc" (-deps-probe) is not a duration`},
		{nil, map[string]string{"XCT_MAX_STEPS": "ten"}, `XCT_MAX_STEPS: "ten" (-max-steps) is not a whole number`},
	} {
		lookup := none
		if tc.env != nil {
			lookup = func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		}
		err := parseFlagsEnv(newFS(), tc.args, lookup)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v; want exit 2 saying %q", tc.args, tc.env, err, tc.want)
		}
	}
}
