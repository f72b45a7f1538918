package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/services/tracer"
)

// Where a client command finds a cluster. `xct dev` writes two files in
// DATA_DIR/dev: credentials.yaml (the principals' tokens) and
// addresses.yaml (where each service listens). A client command reads them
// from --data-dir (XCT_DATA_DIR, default .xct), so one setting is enough
// for a cluster on other ports; --cluster (XCT_CLUSTER) names an addresses
// file of any cluster (one written by hand for a remote one). A flag naming
// one service's address still wins.

// defaultDataDir is `xct dev`'s default --data-dir.
const defaultDataDir = ".xct"

// Services named in an addresses file.
const (
	svcOrchestrator = "orchestrator"
	svcValidator    = "validator"
	svcExecutor     = "executor"
	svcTracer       = "tracer"
	svcDebugger     = "debugger"
)

// clusterAddrs is an addresses file: the services' gRPC addresses, and the
// debugger's URL.
type clusterAddrs struct {
	Orchestrator string `yaml:"orchestrator,omitempty"`
	Validator    string `yaml:"validator,omitempty"`
	Executor     string `yaml:"executor,omitempty"`
	Tracer       string `yaml:"tracer,omitempty"`
	Debugger     string `yaml:"debugger,omitempty"`
}

func (c clusterAddrs) of(service string) string {
	return map[string]string{
		svcOrchestrator: c.Orchestrator, svcValidator: c.Validator, svcExecutor: c.Executor,
		svcTracer: c.Tracer, svcDebugger: c.Debugger,
	}[service]
}

// defaultAddrs are the addresses of a cluster on its default ports.
var defaultAddrs = clusterAddrs{
	Orchestrator: app.DefaultOrchestratorAddr,
	Validator:    app.DefaultValidatorAddr,
	Executor:     app.DefaultExecutorAddr,
	Tracer:       app.DefaultTracerAddr,
	Debugger:     "http://" + tracer.DefaultHTTPListen + "/",
}

// devFile is a file `xct dev` writes in its data directory.
func devFile(dataDir, name string) string {
	if dataDir == "" {
		dataDir = defaultDataDir
	}
	return filepath.Join(dataDir, "dev", name)
}

// credentialsPath is the credentials file a client command reads: the
// one --credentials names, else the one in the data directory.
func (id *identity) credentialsPath() string {
	if id.credentials != "" {
		return id.credentials
	}
	return devFile(id.dataDir, "credentials.yaml")
}

// addressesPath is the addresses file, and whether the user named it (a
// named file must exist; the data directory's may not).
func (id *identity) addressesPath() (string, bool) {
	if id.cluster != "" {
		return id.cluster, true
	}
	return devFile(id.dataDir, "addresses.yaml"), id.dataDir != ""
}

// addr is the address of a service: flagValue when the command line (or
// its environment variable) set it, else the addresses file's, else the
// default.
func (id *identity) addr(service, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	path, named := id.addressesPath()
	c, err := readAddrs(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !named:
		c = defaultAddrs
	case errors.Is(err, fs.ErrNotExist):
		return "", &exitError{code: 2, err: fmt.Errorf("no addresses file %s (xct dev writes DATA_DIR/dev/addresses.yaml while it runs; --cluster names another file)", path)}
	case err != nil:
		return "", err
	}
	if a := c.of(service); a != "" {
		return a, nil
	}
	if a := defaultAddrs.of(service); a != "" && !named {
		return a, nil
	}
	return "", &exitError{code: 2, err: fmt.Errorf("%s names no %s address (set it there, or pass the command's address flag)", path, service)}
}

func readAddrs(path string) (clusterAddrs, error) {
	var c clusterAddrs
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("addresses file %s: %w", path, err)
	}
	return c, nil
}

// writeAddrs writes the addresses file of a running `xct dev`.
func writeAddrs(path string, c clusterAddrs) error {
	out, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	header := "# Where the services of `xct dev` listen; removed when it stops.\n" +
		"# Client commands read it from --data-dir (XCT_DATA_DIR), or name it with --cluster (XCT_CLUSTER).\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(header), out...), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// addrFlag registers a service address flag whose default comes from the
// addresses file (resolved by parse).
func (id *identity) addrFlag(fs *flag.FlagSet, name, service, help string) *string {
	p := new(string)
	def := defaultAddrs.of(service)
	fs.StringVar(p, name, "", help+" (default: DATA_DIR/dev/addresses.yaml's, else "+def+")")
	id.addrs = append(id.addrs, addrSlot{service: service, p: p})
	return p
}

// parse parses a client command's flags, then fills the addresses the
// command line left empty.
func (id *identity) parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, s := range id.addrs {
		a, err := id.addr(s.service, *s.p)
		if err != nil {
			return err
		}
		*s.p = a
	}
	return nil
}

type addrSlot struct {
	service string
	p       *string
}
