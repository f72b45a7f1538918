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
