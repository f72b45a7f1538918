package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

// chainData is a loaded chain.
type chainData struct {
	label    string // what to call it in messages: the file or "chain ID"
	id       string
	events   []lctl.Event
	file     *lctl.File // nil for a live chain
	warnings []string   // from reading the file
	problems []lctl.Problem
}

// load reads a chain from a file or the tracer, and checks the order of its
// events. Unreadable input is an inputError (exit 2).
func (c *cmdContext) load(ctx context.Context, o operand) (*chainData, error) {
	var d *chainData
	var err error
	if o.chain != "" {
		d, err = c.loadLive(ctx, o.chain)
	} else {
		d, err = c.loadFile(o.file)
	}
	if err != nil {
		return nil, err
	}
	d.problems = lctl.CheckSequence(d.id, d.events)
	return d, nil
}

func (c *cmdContext) loadFile(path string) (*chainData, error) {
	raw, err := c.readFile(path)
	if err != nil {
		return nil, err
	}
	format := lctl.FormatOf(path, raw)
	id := "stdin"
	if path != "-" {
		id = lctl.ChainIDForPath(path)
	}
	f, err := lctl.Decode(bytes.NewReader(raw), format, lctl.DecodeOptions{ChainID: id})
	if err != nil {
		return nil, &inputError{fmt.Errorf("%s: %w", path, err)}
	}
	return &chainData{label: path, id: f.Chain.ID, events: f.Events, file: f, warnings: f.Warnings}, nil
}

// reportInput prints what reading the chain noticed: conversions and
// events out of order. Commands that are not checks go on regardless.
func (c *cmdContext) reportInput(d *chainData) {
	for _, w := range d.warnings {
		c.warn("%s: %s", d.label, w)
	}
	for i, p := range d.problems {
		if i == 10 {
			c.warn("%s: %d more problems with the order of events (lctl verify lists them)", d.label, len(d.problems)-10)
			break
		}
		c.warn("%s: %s", d.label, p.Message)
	}
}

// tracerClient is a connection to the tracer.
type tracerClient struct {
	conn io.Closer
	api  lctlv1.TracerServiceClient
	addr string
}

func (c *cmdContext) tracerAPI() (*tracerClient, error) {
	if c.client != nil {
		return c.client, nil
	}
	if c.env.Live == nil {
		return nil, &inputError{errNoLive}
	}
	conn, closer, err := c.env.Live.DialTracer(c.tracer, c.cred)
	if err != nil {
		return nil, &inputError{fmt.Errorf("tracer %s: %w", c.tracer, err)}
	}
	c.client = &tracerClient{conn: closer, api: lctlv1.NewTracerServiceClient(conn), addr: c.tracer}
	return c.client, nil
}

func (t *tracerClient) close() { _ = t.conn.Close() }

// callCtx bounds one call to the tracer.
func (c *cmdContext) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// rpcError turns a tracer error into a message that says what to do.
func (c *cmdContext) rpcError(chainID string, err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.NotFound:
		return &inputError{fmt.Errorf("chain %s: the tracer at %s has no such chain", chainID, c.tracer)}
	case codes.Unavailable:
		return &inputError{fmt.Errorf("the tracer at %s is unavailable (%s): is it running? (--tracer or LCTL_TRACER)", c.tracer, st.Message())}
	case codes.DeadlineExceeded:
		return &inputError{fmt.Errorf("the tracer at %s did not answer within %s", c.tracer, c.timeout)}
	case codes.InvalidArgument, codes.OutOfRange:
		return &inputError{fmt.Errorf("chain %s: %s", chainID, st.Message())}
	case codes.Unauthenticated:
		return &inputError{fmt.Errorf("the tracer at %s: Unauthenticated: %s (pass --token or LCTL_TOKEN, or --as NAME with a credentials file)", c.tracer, st.Message())}
	case codes.PermissionDenied:
		return &inputError{fmt.Errorf("the tracer at %s: PermissionDenied: %s", c.tracer, st.Message())}
	}
	return &inputError{fmt.Errorf("chain %s: tracer %s: %s: %s", chainID, c.tracer, st.Code(), st.Message())}
}

// livePage is how many events each GetChain call asks for.
const livePage = 5000

// loadLive reads a chain's events from the tracer, a page at a time.
func (c *cmdContext) loadLive(ctx context.Context, id string) (*chainData, error) {
	t, err := c.tracerAPI()
	if err != nil {
		return nil, err
	}
	d := &chainData{label: "chain " + id, id: id}
	from := uint64(0)
	for {
		cctx, cancel := c.callCtx(ctx)
		resp, err := t.api.GetChain(cctx, &lctlv1.GetChainRequest{ChainId: id, FromSeq: from, PageSize: livePage})
		cancel()
		if err != nil {
			return nil, c.rpcError(id, err)
		}
		for _, pe := range resp.GetEvents() {
			d.events = append(d.events, lctlpb.FromProto(pe))
		}
		if resp.GetSummary() != nil && resp.GetSummary().GetVerifyError() != "" && from == 0 {
			d.warnings = append(d.warnings, "the tracer reports: "+resp.GetSummary().GetVerifyError())
		}
		if resp.GetNextSeq() == 0 {
			return d, nil
		}
		from = resp.GetNextSeq()
	}
}
