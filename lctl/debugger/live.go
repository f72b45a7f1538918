package debugger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// live streams a chain's new events as server-sent events: every event
// after ?from= (or Last-Event-ID), then each new one as the source stores
// it, a ping every PingEvery, and "gone" when the chain disappears. It ends
// when the client goes away, the source shuts down or Close is called.
func (h *Handler) live(w http.ResponseWriter, r *http.Request) (any, error) {
	from, err := seqParam(r, "from", 0)
	if err != nil {
		return nil, err
	}
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, badArg("Last-Event-ID must be a seq, got %q", s)
		}
		from = n
	}
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	if !c.Live {
		w.WriteHeader(http.StatusNoContent) // tells EventSource not to reconnect
		return nil, nil
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return nil, errors.New("live: the response cannot be flushed")
	}
	if !h.beginStream() {
		return nil, &apiError{http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down"}
	}
	defer h.endStream()

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return nil, nil
	}
	flusher.Flush()

	ping := time.NewTicker(h.opts.PingEvery)
	defer ping.Stop()
	id := c.ID
	sent := from
	for {
		// Take the change channel before reading, so a change between the
		// read and the wait is not missed.
		_, changed, closed := h.opts.Source.Watch(id)
		c, err := h.opts.Source.Chain(r.Context(), id)
		if errors.Is(err, ErrChainNotFound) {
			_, _ = fmt.Fprintf(w, "event: gone\ndata: {\"chain_id\":%q}\n\n", id)
			flusher.Flush()
			return nil, nil
		}
		if err != nil {
			return nil, nil // the source is going away: the client reconnects
		}
		for i := firstAtOrAfter(c, sent+1); i < len(c.Events); i++ {
			e := &c.Events[i]
			raw, err := e.MarshalJSON()
			if err != nil {
				h.log.Error("live: encode event", "chain_id", id, "seq", e.Seq, "err", err)
				continue
			}
			var data bytes.Buffer
			json.HTMLEscape(&data, raw)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: lctl\ndata: %s\n\n", e.Seq, data.Bytes()); err != nil {
				return nil, nil
			}
			sent = e.Seq
		}
		flusher.Flush()
		if closed {
			return nil, nil
		}
		select {
		case <-changed:
		case <-ping.C:
			if _, err := fmt.Fprint(w, "event: ping\ndata: {}\n\n"); err != nil {
				return nil, nil
			}
			flusher.Flush()
		case <-r.Context().Done():
			return nil, nil
		case <-h.done:
			return nil, nil
		}
	}
}
