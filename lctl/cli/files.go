package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// parseFormat reads --to.
func parseFormat(s string) (lctl.Format, error) {
	switch strings.ToLower(s) {
	case "json":
		return lctl.FormatJSON, nil
	case "yaml", "yml":
		return lctl.FormatYAML, nil
	}
	return 0, usagef("--to must be json or yaml, got %q", s)
}

func runConvert(ctx context.Context, c *cmdContext) error {
	c.common()
	to := c.fs.String("to", "", "write this format (json or yaml) to stdout instead of to OUT")
	from := c.fs.String("from", "", "read IN as: lctl (v4, default), v3 (an LCTL v3 trace; --to v4) or otlp (OpenTelemetry traces as JSON, as the collector's file exporter writes them)")
	trace := c.fs.String("trace", "", "with --from otlp: convert only the trace with this id (32 hex digits)")
	if err := c.parse(); err != nil {
		return err
	}
	var in operand
	outPath := ""
	otlpIn, v3In := false, false
	switch strings.ToLower(*from) {
	case "", "lctl", "v4":
	case "otlp":
		otlpIn = true
	case "v3":
		v3In = true // convert_v3.go
	default:
		return usagef("--from must be lctl (v4), v3 or otlp, got %q", *from)
	}
	toV4 := strings.EqualFold(*to, "v4")
	if toV4 && !v3In {
		return usagef("--to v4 goes with --from v3; between JSON and YAML use --to json|yaml")
	}
	switch {
	case len(c.operands) == 2 && c.operands[1].file != "" && (*to == "" || otlpIn || v3In):
		in, outPath = c.operands[0], c.operands[1].file
	case len(c.operands) == 1 && *to != "":
		in = c.operands[0]
	default:
		return usagef("convert IN OUT (format by OUT's extension), or convert IN --to json|yaml")
	}
	format := lctl.FormatForPath(outPath)
	if *to != "" && !toV4 {
		f, err := parseFormat(*to)
		if err != nil {
			return err
		}
		format = f
	}
	if otlpIn {
		return convertOTLP(c, in, outPath, *trace, format)
	}
	if v3In {
		return convertV3(c, in, outPath, format)
	}
	if *trace != "" {
		return usagef("--trace selects a trace of an OTLP file: use it with --from otlp")
	}
	d, err := c.load(ctx, in)
	if err != nil {
		return err
	}
	for _, w := range d.warnings {
		c.warn("%s: %s", d.label, w)
	}
	f := d.file
	if f == nil {
		f = lctl.NewFile(d.id, d.events)
	}
	var buf bytes.Buffer
	if err := f.Encode(&buf, format); err != nil {
		return err
	}
	if outPath == "" || outPath == "-" {
		_, err := c.env.Stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFile(outPath, buf.Bytes()); err != nil {
		return err
	}
	if !c.jsonOut {
		c.out("Wrote %s: %d events of %s as %s.\n", outPath, len(f.Events), f.Chain.ID, format)
	} else {
		return c.printJSON(map[string]any{"out": outPath, "events": len(f.Events), "chain_id": f.Chain.ID, "format": format.String()})
	}
	return nil
}

// writeFile writes data to path through a temporary file, so a failed write
// never leaves half a chain.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lctl-*")
	if err != nil {
		return &inputError{err}
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return &inputError{err}
	}
	if err := tmp.Close(); err != nil {
		return &inputError{err}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return &inputError{err}
	}
	return nil
}

func runExport(ctx context.Context, c *cmdContext) error {
	c.common()
	out := c.fs.String("o", "", "write the chain to this file (format by extension) instead of stdout")
	to := c.fs.String("to", "", "json or yaml (default: by -o's extension, else json)")
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.operands) != 1 || c.operands[0].chain == "" {
		return usagef("export reads a live chain: lctl export --chain ID [-o FILE]")
	}
	id := c.operands[0].chain
	format := lctl.FormatForPath(*out)
	if *to != "" {
		f, err := parseFormat(*to)
		if err != nil {
			return err
		}
		format = f
	}
	pf := lctlv1.ExportFormat_EXPORT_FORMAT_JSON
	if format == lctl.FormatYAML {
		pf = lctlv1.ExportFormat_EXPORT_FORMAT_YAML
	}
	t, err := c.tracerAPI()
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := t.api.ExportChain(cctx, &lctlv1.ExportChainRequest{ChainId: id, Format: pf})
	content := resp.GetContent()
	if status.Code(err) == codes.ResourceExhausted {
		// Past what one answer carries: read the events by pages and
		// write the file here, as the tracer would have.
		d, lerr := c.loadLive(ctx, id)
		if lerr != nil {
			return lerr
		}
		var buf bytes.Buffer
		if err := lctl.NewFile(id, d.events).Encode(&buf, format); err != nil {
			return &inputError{fmt.Errorf("chain %s: %w", id, err)}
		}
		content, err = buf.Bytes(), nil
	}
	if err != nil {
		return c.rpcError(id, err)
	}
	if *out == "" || *out == "-" {
		_, err := c.env.Stdout.Write(content)
		return err
	}
	if err := writeFile(*out, content); err != nil {
		return err
	}
	c.out("Wrote %s (%d bytes) from the tracer at %s.\n", *out, len(content), c.tracer)
	return nil
}

func runTail(ctx context.Context, c *cmdContext) error {
	c.jsonOut = false
	c.fs.BoolVar(&c.jsonOut, "json", false, "print each event as its JSON line, as stored")
	all := c.fs.Bool("all", false, "follow every chain")
	natsURL := c.env.getenv("NATS_URL")
	if natsURL == "" {
		natsURL = DefaultNATSURL
	}
	c.fs.StringVar(&natsURL, "nats", natsURL, "NATS server with the LCTL stream (env NATS_URL)")
	natsCreds := c.env.getenv("NATS_CREDENTIALS")
	c.fs.StringVar(&natsCreds, "nats-credentials", natsCreds, "file with the password of the read-only NATS user, reader (env NATS_CREDENTIALS; default "+defaultNATSCredentials+" when it exists)")
	c.fs.Var(chainFlag{c}, "chain", "follow the chain with this id")
	count := c.fs.Int("count", 0, "stop after this many events (0: follow until interrupted)")
	noFollow := c.fs.Bool("no-follow", false, "print the events stored now and stop")
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.operands) > 0 && c.operands[0].file != "" {
		return usagef("tail follows the event stream, not files: --chain ID or --all")
	}
	chainID := ""
	switch {
	case *all && len(c.chains) == 0:
	case !*all && len(c.chains) == 1:
		chainID = c.chains[0]
		if err := lctl.ValidateChainID(chainID); err != nil {
			return usagef("%v", err)
		}
	default:
		return usagef("name one chain (--chain ID) or --all")
	}
	if c.env.Live == nil {
		return &inputError{errNoLive}
	}
	links := map[string]lctl.Event{} // per chain, the last event seen
	seen := 0
	if natsCreds == "" {
		if _, err := os.Stat(defaultNATSCredentials); err == nil {
			natsCreds = defaultNATSCredentials
		}
	}
	err := c.env.Live.Follow(ctx, natsURL, natsCreds, chainID, *noFollow, func(e lctl.Event) error {
		if prev, ok := links[e.ChainID]; ok {
			switch {
			case e.Seq != prev.Seq+1:
				c.warn("chain %s: event %d follows event %d", e.ChainID, e.Seq, prev.Seq)
			case e.PrevHash != prev.Hash:
				c.warn("chain %s: event %d does not link to event %d (prev_hash differs)", e.ChainID, e.Seq, prev.Seq)
			}
		}
		if h, err := e.ComputeHash(); err == nil && e.Hash != "" && h != e.Hash {
			c.warn("chain %s: event %d does not match its hash (edited)", e.ChainID, e.Seq)
		}
		links[e.ChainID] = e
		if c.jsonOut {
			raw, err := e.MarshalJSON()
			if err != nil {
				return err
			}
			c.out("%s\n", raw)
		} else if chainID == "" {
			c.out("%s %s\n", e.ChainID, analysis.Line(&e))
		} else {
			c.out("%s\n", analysis.Line(&e))
		}
		seen++
		if *count > 0 && seen >= *count {
			return ErrStop
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNoStream):
		return &inputError{fmt.Errorf("NATS at %s has no LCTL event stream: no chain was written there (nothing was created; lctl only reads)", natsURL)}
	case errors.Is(err, ErrNoChain):
		return &inputError{fmt.Errorf("chain %s has no events on the stream at %s", chainID, natsURL)}
	case errors.Is(err, context.Canceled):
		return nil
	case err != nil:
		return &inputError{err}
	}
	return nil
}
