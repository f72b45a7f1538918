package orchestrator

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
)

// The tool catalog a run starts (or is taken over) with. The executor's
// ListTools is asked first, within the short takeover deadline; when the
// executor cannot answer, the catalog it published to the XCT_TOOLS bucket
// (watched since Start) is used, so a brief executor outage blocks neither
// StartRun nor takeovers. Steps still need the executor to run.

// watchCatalog starts the cached view of XCT_TOOLS in the background
// until ctx ends; until it is loaded (or when the bucket cannot be read)
// only the executor is asked.
func (s *Service) watchCatalog(ctx context.Context) {
	go func() {
		c, err := catalog.Watch(ctx, s.events.JetStream())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("no cached tool catalog: starts and takeovers need the executor's ListTools", "err", err)
			}
			return
		}
		s.catalog.Store(c)
	}()
}

// toolCatalog returns the tools a run may use.
func (s *Service) toolCatalog(ctx context.Context) ([]*xctv1.ToolDescriptor, error) {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.TakeoverTimeout)
	resp, err := s.executor.ListTools(tctx, &xctv1.ListToolsRequest{})
	cancel()
	if err == nil {
		return resp.GetTools(), nil
	}
	if c := s.catalog.Load(); c != nil {
		if tools := c.List(); len(tools) > 0 {
			s.log.Warn("executor did not list its tools: using the catalog it published", "err", status.Convert(err).Message(), "tools", len(tools))
			return tools, nil
		}
	}
	return nil, fmt.Errorf("%w: list tools: %s (and no catalog published in %s)", ErrNoExecutor, status.Convert(err).Message(), catalog.Bucket)
}
