package cli

import (
	"bytes"
	"fmt"

	"github.com/xct-dev/xct/lctl"
)

// convertV3 is `lctl convert --from v3 --to v4 IN [OUT]`: an LCTL v3 file
// (trace, facts, handoff) to a v4 chain, as lctl.ConvertV3 maps it, to OUT
// or stdout. What had to be assumed is printed as warnings.
func convertV3(c *cmdContext, in operand, outPath string, format lctl.Format) error {
	if in.file == "" {
		return usagef("convert --from v3 reads a file (or - for stdin), not a live chain")
	}
	raw, err := c.readFile(in.file)
	if err != nil {
		return err
	}
	id := "stdin"
	if in.file != "-" {
		id = lctl.ChainIDForPath(in.file)
	}
	f, warnings, err := lctl.ConvertV3(bytes.NewReader(raw), lctl.FormatOf(in.file, raw), id)
	if err != nil {
		return &inputError{fmt.Errorf("%s: %w", in.file, err)}
	}
	for _, w := range warnings {
		c.warn("%s: %s", in.file, w)
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
	if c.jsonOut {
		return c.printJSON(map[string]any{"out": outPath, "events": len(f.Events), "chain_id": f.Chain.ID, "format": format.String(), "from": "v3"})
	}
	c.out("Wrote %s: %d events of %s (from LCTL v3) as %s.\n", outPath, len(f.Events), f.Chain.ID, format)
	return nil
}
