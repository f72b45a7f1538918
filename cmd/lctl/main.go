// Command lctl is the LCTL v4.0 debugger: replay a multi-agent run to any
// point, diff two runs, verify that a log was not edited, and more, on chain
// files and on XCT's live chains. The commands live in lctl/cli; this main
// only wires them to the process. See docs/lctl.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/lctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, TuneGC: true, MapFiles: true, Live: lctllive.Live{}})
	stop()
	os.Exit(code)
}
