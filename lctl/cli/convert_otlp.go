package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/otlp"
)

// convertOTLP is `lctl convert --from otlp`: an OTLP JSON file (one
// ExportTraceServiceRequest per line, as the collector's file exporter
// writes, or a single object) to LCTL chains, one per trace. One trace (or
// --trace ID) goes to OUT or stdout; several need OUT to be a directory,
// where each is written as <chain id>.lctl.json (or .yaml with --to yaml).
// What spans lacked is printed as warnings naming them.
func convertOTLP(c *cmdContext, in operand, outPath, traceID string, format lctl.Format) error {
	if in.file == "" {
		return usagef("convert --from otlp reads a file (or - for stdin), not a live chain")
	}
	raw, err := c.readFile(in.file)
	if err != nil {
		return err
	}
	reqs, err := otlp.ReadJSONFile(bytes.NewReader(raw))
	if err != nil {
		return &inputError{fmt.Errorf("%s: %w", in.file, err)}
	}
	var rss []*tracepb.ResourceSpans
	for _, r := range reqs {
		rss = append(rss, r.GetResourceSpans()...)
	}
	chains, rejected, warnings, err := otlp.Convert(rss)
	if err != nil {
		return &inputError{fmt.Errorf("%s: %w", in.file, err)}
	}
	for _, w := range warnings {
		c.warn("%s: %s", in.file, w)
	}
	if traceID != "" {
		want := otlp.ChainPrefix + strings.ToLower(strings.TrimPrefix(traceID, otlp.ChainPrefix))
		var keep []otlp.Chain
		for _, ch := range chains {
			if ch.ID == want {
				keep = append(keep, ch)
			}
		}
		if len(keep) == 0 {
			return &inputError{fmt.Errorf("%s: no trace %s (traces: %s)", in.file, traceID, traceList(chains))}
		}
		chains = keep
	}
	if len(chains) == 0 {
		return &inputError{fmt.Errorf("%s: no spans to convert (%d rejected)", in.file, rejected)}
	}
	for _, ch := range chains {
		for _, w := range ch.Warnings {
			c.warn("%s: %s", ch.ID, w)
		}
	}
	dir := ""
	if outPath != "" && outPath != "-" {
		if st, err := os.Stat(outPath); err == nil && st.IsDir() {
			dir = outPath
		}
	}
	if len(chains) > 1 && dir == "" {
		return usagef("%s holds %d traces (%s): name one with --trace ID, or give a directory as OUT to write one chain file each", in.file, len(chains), traceList(chains))
	}
	type written struct {
		Out     string `json:"out"`
		ChainID string `json:"chain_id"`
		Events  int    `json:"events"`
	}
	var done []written
	for _, ch := range chains {
		var buf bytes.Buffer
		if err := lctl.NewFile(ch.ID, ch.Events).Encode(&buf, format); err != nil {
			return err
		}
		path := outPath
		if dir != "" {
			path = filepath.Join(dir, ch.ID+".lctl."+format.String())
		}
		if path == "" || path == "-" {
			_, err := c.env.Stdout.Write(buf.Bytes())
			return err
		}
		if err := writeFile(path, buf.Bytes()); err != nil {
			return err
		}
		done = append(done, written{Out: path, ChainID: ch.ID, Events: len(ch.Events)})
	}
	if c.jsonOut {
		return c.printJSON(map[string]any{"chains": done, "rejected_spans": rejected, "format": format.String()})
	}
	for _, d := range done {
		c.out("Wrote %s: %d events of %s as %s.\n", d.Out, d.Events, d.ChainID, format)
	}
	return nil
}

func traceList(chains []otlp.Chain) string {
	ids := make([]string, 0, len(chains))
	for _, ch := range chains {
		ids = append(ids, strings.TrimPrefix(ch.ID, otlp.ChainPrefix))
	}
	return strings.Join(ids, ", ")
}
