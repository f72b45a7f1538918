// Command lctlgen writes a deterministic chain file of a long multi-agent
// run (lctltest.Workflow): for benchmarks and for trying lctl on a chain
// of realistic size.
//
//	go run ./lctl/lctltest/lctlgen -n 1000000 -o /tmp/run-1m.lctl.json
//
// -shape spec and -layout write the shapes other implementations write:
// the spec's key order without a hash chain, Python's json.dump with and
// without indent.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
)

func main() {
	n := flag.Int("n", 100_000, "number of events")
	out := flag.String("o", "", "output file (.json: one event per line; .yaml: YAML)")
	id := flag.String("chain", "", "chain id (default: from the file name)")
	seal := flag.Bool("seal", true, "link the events with hashes")
	every := flag.Int("checkpoint-every", 500, "events between checkpoints (-1: none)")
	stateHashes := flag.Bool("state-hashes", false, "put the state's hash in every checkpoint")
	hashVersion := flag.Int("state-hash-version", 2, "with -state-hashes: 2 (kept up to date, linear) or 1 (the form before session 5: quadratic, for up to ~300k events)")
	shape := flag.String("shape", "canonical", "events as XCT writes them (canonical: sorted keys, chain_id, hashes) or as the spec and its reference implementation do (spec: seq, type, timestamp, agent, data; no chain_id, no hashes, \"lctl\": \"4.1\", Python's separators)")
	detail := flag.Int("detail", 0, "words added to each step's intent and each fact's text (a run whose intents and findings are sentences; -detail 12 with -shape spec gives the issue's ~255 MB per million events)")
	layout := flag.String("layout", lctltest.LayoutLines, "lines (one event per line), indent (Python's json.dump indent=2) or oneline (the whole file on one line)")
	flag.Parse()
	if *out == "" || *n < 2 || *detail < 0 {
		fmt.Fprintln(os.Stderr, "usage: lctlgen -n EVENTS -o FILE")
		os.Exit(2)
	}
	chainID := *id
	if chainID == "" {
		chainID = lctl.ChainIDForPath(*out)
	}
	if *hashVersion != 1 && *hashVersion != 2 {
		fmt.Fprintln(os.Stderr, "lctlgen: -state-hash-version is 1 or 2")
		os.Exit(2)
	}
	if *shape != "canonical" && *shape != "spec" {
		fmt.Fprintln(os.Stderr, "lctlgen: -shape is canonical or spec")
		os.Exit(2)
	}
	opts := lctltest.WorkflowOptions{Seal: *seal, CheckpointEvery: *every, StateHashes: *stateHashes, StateHashVersion: *hashVersion, Detail: *detail}
	if err := write(*out, chainID, *n, opts, lctltest.Shape{Spec: *shape == "spec", Layout: *layout}); err != nil {
		fmt.Fprintln(os.Stderr, "lctlgen:", err)
		os.Exit(1)
	}
}

func write(path, chainID string, n int, opts lctltest.WorkflowOptions, shape lctltest.Shape) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if lctl.FormatForPath(path) == lctl.FormatYAML {
		err = lctl.NewFile(chainID, lctltest.Workflow(chainID, n, opts)).Encode(f, lctl.FormatYAML)
	} else {
		err = lctltest.WriteWorkflowShaped(f, chainID, n, opts, shape)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
