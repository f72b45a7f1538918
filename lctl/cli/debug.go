package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/debugger"
)

// DefaultDebugAddr is where `lctl debug` serves unless told otherwise:
// loopback only, since the page shows the chain to whoever connects.
const DefaultDebugAddr = "127.0.0.1:8080"

// debugShutdown bounds the graceful shutdown of `lctl debug`.
const debugShutdown = 5 * time.Second

// runDebug serves the visual debugger over chain files until interrupted.
func runDebug(ctx context.Context, c *cmdContext) error {
	addr := c.fs.String("addr", DefaultDebugAddr, "address to serve the debugger on (host:port; port 0 picks a free one)")
	open := c.fs.Bool("open", true, "open the page in a browser")
	prices := c.fs.String("prices", c.env.getenv("LCTL_PRICES"), "price table for costs (YAML: models: {NAME: {input_per_1k, output_per_1k}}); env LCTL_PRICES")
	c.fs.Var(chainFlag{c}, "chain", "not supported: the tracer serves live chains on its own HTTP address")
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.chains) > 0 {
		return usagef("live chains are served by the tracer itself: open http://127.0.0.1:7705/ (its --tracer-http-listen)")
	}
	if len(c.operands) == 0 {
		return usagef("name a chain file (two to compare them)")
	}
	table, err := c.loadPrices(*prices)
	if err != nil {
		return err
	}
	paths := make([]string, len(c.operands))
	for i, o := range c.operands {
		if o.file == "-" {
			return usagef("debug reads files, not stdin")
		}
		paths[i] = o.file
	}
	src := debugger.NewFileSource(paths...)
	loadErrs := src.LoadErrors()
	h, err := debugger.New(debugger.Options{
		Source:     src,
		Title:      "lctl debug " + strings.Join(paths, " "),
		LoadErrors: loadErrs,
		Prices:     table,
	})
	if err != nil {
		return err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return &inputError{fmt.Errorf("listen on %s: %w", *addr, err)}
	}
	var handler http.Handler = h
	if loopbackListener(lis.Addr()) {
		handler = loopbackNamesOnly(h)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	srv.RegisterOnShutdown(h.Close)
	url := "http://" + lis.Addr().String() + "/"

	c.out("Starting LCTL Debugger at %s\n", url)
	for _, ch := range src.Loaded() {
		st := analysis.ComputeStats(ch.ID, ch.Events, nil)
		c.out("- Chain: %s\n", ch.ID)
		c.out("- Events: %d\n", len(ch.Events))
		c.out("- Duration: %s\n", durationText(st.DurationMS))
		c.out("- Agents: %d\n", len(st.Agents))
		for _, w := range ch.Warnings {
			c.warn("%s: %s", ch.ID, w)
		}
	}
	for _, le := range loadErrs {
		fmt.Fprintf(c.env.Stderr, "lctl debug: %s: %s (the page shows this error)\n", le.File, le.Message)
	}
	if !loopbackListener(lis.Addr()) {
		c.warn("serving on %s: anyone who can reach it sees the chains", lis.Addr())
	}
	c.out("Press Ctrl-C to stop.\n")
	if *open {
		if err := openBrowser(ctx, url); err != nil {
			c.warn("could not open a browser (%v): open %s yourself", err, url)
		}
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return &inputError{fmt.Errorf("serve: %w", err)}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), debugShutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	h.Close()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return &inputError{fmt.Errorf("serve: %w", err)}
	}
	if len(loadErrs) > 0 {
		return errReported // unreadable input: exit 2, already printed
	}
	return nil
}

// loopbackListener reports whether addr is a loopback address.
func loopbackListener(addr net.Addr) bool {
	host, _, err := net.SplitHostPort(addr.String())
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// loopbackNamesOnly serves only requests addressed to a loopback name (a
// loopback IP literal or localhost, any port). The debugger on loopback
// has no authentication: a web page of any site the user visits, whose
// name its owner then points at 127.0.0.1 (DNS rebinding), is same-origin
// with it under that name and would read every chain served; its requests
// carry that name as their Host, and are refused (421).
func loopbackNamesOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost") {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "lctl debug on a loopback address answers requests to 127.0.0.1, [::1] or localhost only, not to "+r.Host,
			http.StatusMisdirectedRequest)
	})
}

// openBrowser asks the desktop to open url, when there is one. The URL is
// passed as one argument, never through a shell.
func openBrowser(ctx context.Context, url string) error {
	var name string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "linux", "freebsd", "openbsd", "netbsd":
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no display")
		}
		name = "xdg-open"
	default:
		return fmt.Errorf("not supported on %s", runtime.GOOS)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, url) //nolint:gosec // a fixed opener from PATH with our own URL as one argument, no shell
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
