package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
	"github.com/xct-dev/xct/lctl/checkpoint"
)

func runVerify(ctx context.Context, c *cmdContext) error {
	c.common()
	keys := c.signatureFlags() // signed.go
	if err := c.parse(); err != nil {
		return err
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	var r *analysis.VerifyReport
	var sigs *checkpoint.Report
	var v *analysis.StreamVerifier
	var sv *checkpoint.StreamVerifier // with --key (signed.go)
	trusted, err := keys.load()
	if err != nil {
		return err
	}
	// First without the state's steps; a chain with state hashes in its
	// checkpoints is read again with them from its first event, and one
	// with events without a hash before the first with one is read again
	// keeping a problem for each.
	var sd *streamed
	var headErr error // --against-tracer's read of the signed head
	summary, keepNoHash := true, false
	// The verifier reads the data of a few types (its state's, and
	// checkpoints'); the signatures' verifier is not asked.
	var reads func(string) bool
	data := func(typ string) bool { return reads(typ) }
	if trusted != nil {
		data = nil
	}
	for range 3 {
		sd, _ = c.streamChain(o, true, nil, data, func(id string) {
			if summary {
				v = analysis.NewStreamVerifierSummary(id)
			} else {
				v = analysis.NewStreamVerifier(id)
			}
			reads = v.DataTypes()
			if keepNoHash {
				v.KeepNoHash()
			}
			if trusted != nil {
				if keys.againstTracer && keys.against == nil && headErr == nil {
					keys.against, headErr = c.signedHead(ctx, id, trusted, keys.options())
				}
				sv = checkpoint.NewStreamVerifier(id, trusted, keys.options())
			}
			c.signedSeen = 0
		}, func(e *lctl.StreamEvent) error {
			if !v.Add(&e.Event, e.Computed, e.HashErr) || (sv != nil && !sv.Add(&e.Event)) {
				return errNoStream
			}
			if e.Type == checkpoint.EventType {
				c.signedSeen++
			}
			return nil
		})
		if sd != nil || v == nil {
			break
		}
		if v.NeedsState && summary {
			summary = false
		} else if v.NeedsNoHash && !keepNoHash {
			keepNoHash = true
		} else {
			break
		}
	}
	if headErr != nil {
		return headErr
	}
	if sd != nil {
		for _, w := range sd.warnings {
			c.warn("%s: %s", sd.label, w)
		}
		r = v.Report()
		if sv != nil {
			sigs = sv.Report()
		}
	} else {
		d, err := c.load(ctx, o)
		if err != nil {
			return err
		}
		for _, w := range d.warnings {
			c.warn("%s: %s", d.label, w)
		}
		if trusted != nil {
			if keys.againstTracer && keys.against == nil {
				if keys.against, err = c.signedHead(ctx, d.id, trusted, keys.options()); err != nil {
					return err
				}
			}
			sigs = checkpoint.Verify(d.id, d.events, trusted, keys.options())
		}
		c.signedSeen = 0
		for i := range d.events {
			if d.events[i].Type == checkpoint.EventType {
				c.signedSeen++
			}
		}
		r = analysis.Verify(d.id, d.events)
	}
	if c.jsonOut {
		if err := c.printJSON(verifiedReport{r, sigs}); err != nil {
			return err
		}
	} else {
		c.printVerify(r, sigs)
	}
	if !r.OK || (sigs != nil && !sigs.OK) {
		return errCheckFailed
	}
	return nil
}

var checkNames = map[string]string{"sequence": "sequence", "timestamps": "timestamps", "hash_chain": "hash chain", "checkpoints": "checkpoints"}

func (c *cmdContext) printVerify(r *analysis.VerifyReport, sigs *checkpoint.Report) {
	c.out("Verifying %d events of %s...\n", r.Events, r.ChainID)
	for _, ch := range r.Checks {
		mark := "✓"
		if !ch.OK {
			mark = "✗"
		}
		c.out("%s %s: %s\n", mark, checkNames[ch.Name], ch.Summary)
	}
	if sigs != nil {
		c.printSignatures(sigs)
	}
	for _, n := range r.Notes {
		c.out("note: %s\n", n)
	}
	if sigs == nil && c.signedSeen > 0 {
		c.out("note: the chain has %d signed %s; lctl verify --key FILE.pub proves it is what the cluster wrote (a hash chain alone cannot show an edit whose hashes were recomputed)\n",
			c.signedSeen, plural(c.signedSeen, "checkpoint", "checkpoints"))
	}
	c.out("\n")
	switch {
	case r.OK && sigs == nil:
		c.out("Chain verified.\n")
		return
	case r.OK && sigs.OK && len(sigs.Unsigned) > 0:
		c.out("Chain verified; signed through seq %d, %d unsigned %s after it.\n", sigs.SignedThrough, len(sigs.Unsigned), plural(len(sigs.Unsigned), "event", "events"))
		return
	case r.OK && sigs.OK:
		c.out("Chain verified and signed: it is exactly what %s signed.\n", sigs.SignedBy)
		return
	}
	// The headline is the earliest problem of either check.
	first := r.First
	if sigs != nil && !sigs.OK && (first == nil || sigs.First.Position < first.Position) {
		first = sigs.First
	}
	c.out("FAILED: %s\n", first.Message)
	if r.OK {
		return
	}
	if len(r.Problems) > 1 {
		c.out("%d problems, in chain order:\n", len(r.Problems))
		for i, p := range r.Problems {
			if i == 20 {
				c.out("  ... %d more (--json lists all)\n", len(r.Problems)-20)
				break
			}
			c.out("  %s\n", p.Message)
		}
	}
}

func runValidate(ctx context.Context, c *cmdContext) error {
	c.common()
	dir := c.fs.String("contracts", "", "directory of contract files (.yaml, .yml, .json), or one file")
	if err := c.parse(); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--contracts DIR is required")
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	cs, err := loadContracts(*dir)
	if err != nil {
		return err
	}
	d, err := c.load(ctx, o)
	if err != nil {
		return err
	}
	c.reportInput(d)
	r := analysis.ValidateContracts(d.id, d.events, cs)
	if c.jsonOut {
		if err := c.printJSON(r); err != nil {
			return err
		}
	} else {
		c.printValidation(r)
	}
	if !r.OK {
		return errCheckFailed
	}
	return nil
}

// loadContracts reads every contract file of a directory, in name order,
// or a single file.
func loadContracts(path string) (*analysis.ContractSet, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, &inputError{fmt.Errorf("--contracts: %w", err)}
	}
	var files []string
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, &inputError{fmt.Errorf("--contracts: %w", err)}
		}
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		if len(files) == 0 {
			return nil, &inputError{fmt.Errorf("--contracts %s: no .yaml, .yml or .json files", path)}
		}
	} else {
		files = []string{path}
	}
	sort.Strings(files)
	cs := analysis.NewContractSet()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, &inputError{err}
		}
		if err := cs.Add(f, raw); err != nil {
			return nil, &inputError{err}
		}
	}
	if len(cs.Agents) == 0 {
		return nil, &inputError{fmt.Errorf("--contracts %s: no contracts", path)}
	}
	return cs, nil
}

func (c *cmdContext) printValidation(r *analysis.ValidationReport) {
	c.out("Validating %d events against %d %s...\n", r.Events, r.Contracts, plural(r.Contracts, "contract", "contracts"))
	for _, res := range r.Results {
		switch {
		case res.OK && res.Checked == 0:
			c.out("- %s %s: nothing to check (no matching events)\n", res.Agent, res.Direction)
		case res.OK:
			c.out("✓ %s %s valid\n", res.Agent, res.Direction)
		default:
			c.out("✗ %s %s invalid:\n", res.Agent, res.Direction)
			for i, v := range res.Violations {
				if i == 20 {
					c.out("    ... %d more (--json lists all)\n", len(res.Violations)-20)
					break
				}
				c.out("    [%d] %s: %s\n", v.Seq, v.Subject, v.Message)
			}
		}
	}
	if len(r.Recorded) > 0 {
		c.out("\nThe chain records %d failed contract %s:\n", len(r.Recorded), plural(len(r.Recorded), "check", "checks"))
		for _, cv := range r.Recorded {
			c.out("  [%d] %s %s: %s\n", cv.Seq, cv.Contract, cv.Direction, cv.Status)
		}
	}
	c.out("\n")
	if r.OK {
		c.out("All contracts satisfied.\n")
		return
	}
	c.out("%d %s violated (%d %s).\n", r.Violated, plural(r.Violated, "contract", "contracts"), r.Violations, plural(r.Violations, "violation", "violations"))
}

// queryResult is query's JSON output.
type queryResult struct {
	ChainID string                 `json:"chain_id"`
	Query   string                 `json:"query"`
	ToSeq   uint64                 `json:"to_seq"`
	Total   int                    `json:"total"`
	Facts   []*analysis.FactRecord `json:"facts"`
}

func runQuery(ctx context.Context, c *cmdContext) error {
	c.common()
	toSeq := c.fs.Uint64("to-seq", 0, "query the facts as they stood after this seq")
	if err := c.parse(); err != nil {
		return err
	}
	// The query is the first positional operand, wherever --chain is.
	qi := slices.IndexFunc(c.operands, func(o operand) bool { return o.file != "" })
	if qi < 0 {
		return usagef("the query comes first: lctl query 'SELECT * WHERE confidence >= 0.8' FILE")
	}
	text := c.operands[qi].file
	c.operands = slices.Delete(slices.Clone(c.operands), qi, qi+1)
	q, err := analysis.ParseQuery(text)
	if err != nil {
		return c.queryError(err)
	}
	o, err := c.one()
	if err != nil {
		return err
	}
	var facts []*analysis.FactRecord
	var chainID string
	fb := analysis.NewFactStoreBuilder()
	if sd, err := c.streamChain(o, false, nil, analysis.FactStoreData, func(string) {}, func(e *lctl.StreamEvent) error {
		if *toSeq != 0 && e.Seq > *toSeq {
			return lctl.ErrStop
		}
		fb.Add(&e.Event)
		return nil
	}); err == nil {
		c.reportInput(sd.data())
		facts, chainID = fb.Facts(), sd.id
	} else {
		d, err := c.load(ctx, o)
		if err != nil {
			return err
		}
		c.reportInput(d)
		facts, chainID = analysis.FactStore(d.events, *toSeq), d.id
	}
	rows, err := q.Run(facts)
	if err != nil {
		return c.queryError(err)
	}
	if c.jsonOut {
		return c.printJSON(queryResult{ChainID: chainID, Query: text, ToSeq: *toSeq, Total: len(facts), Facts: rows})
	}
	switch {
	case len(facts) == 0:
		c.out("The chain has no facts.\n")
		return nil
	case len(rows) == 0:
		c.out("No facts match (of %d).\n", len(facts))
		return nil
	}
	c.out("%d of %d %s:\n", len(rows), len(facts), plural(len(facts), "fact", "facts"))
	cols := q.Columns()
	if cols == nil {
		cols = []string{"id", "confidence", "source", "tags", "text"}
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(cols, "\t")))
	for _, f := range rows {
		cells := make([]string, len(cols))
		for i, col := range cols {
			// A tab or newline of a fact's own would move the columns.
			cells[i] = visible(cell(f, col))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// queryError prints a query problem with a caret under its position.
func (c *cmdContext) queryError(err error) error {
	var qe *analysis.QueryError
	if errors.As(err, &qe) {
		fmt.Fprintf(c.env.Stderr, "lctl query: %v\n", qe)
		for _, l := range strings.Split(qe.Pointer(), "\n") {
			fmt.Fprintf(c.env.Stderr, "  %s\n", l)
		}
		return errReported
	}
	return err
}

func cell(f *analysis.FactRecord, col string) string {
	switch col {
	case "confidence":
		return confText(f.Confidence)
	case "text":
		return clipText(f.Text, 60)
	case "tags", "tag":
		return strings.Join(f.Tags, ",")
	}
	v := analysis.FactField(f, col)
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return clipText(x, 40)
	case float64:
		return fmt.Sprintf("%g", x)
	}
	return clipText(analysis.FieldValue(v), 40)
}
