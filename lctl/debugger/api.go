package debugger

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

// infoResponse is /api/info.
type infoResponse struct {
	Mode      string `json:"mode"`
	Title     string `json:"title"`
	Chains    int    `json:"chains"`
	Approvals bool   `json:"approvals"`
	Auth      bool   `json:"auth"`
	Live      bool   `json:"live"`
	// CanCancel: the caller may cancel runs here (the Cancel button).
	CanCancel bool       `json:"can_cancel"`
	LoadError *LoadError `json:"load_error"`
}

func (h *Handler) info(_ http.ResponseWriter, r *http.Request) (any, error) {
	list, err := h.opts.Source.Chains(r.Context())
	if err != nil {
		return nil, err
	}
	resp := infoResponse{
		Mode: h.opts.Source.Mode(), Title: h.opts.Title, Chains: len(list),
		Approvals: h.opts.Approvals != nil, Auth: h.opts.Authorize != nil,
		Live: h.opts.Source.Mode() == "cluster", CanCancel: h.canCancel(r),
	}
	if len(h.opts.LoadErrors) > 0 {
		le := h.opts.LoadErrors[0]
		resp.LoadError = &le
	}
	return resp, nil
}

// ChainSummary is one entry of the chain list.
type ChainSummary struct {
	ID               string      `json:"id"`
	Events           int         `json:"events"`
	FirstTimestamp   string      `json:"first_timestamp"`
	LastTimestamp    string      `json:"last_timestamp"`
	DurationMS       float64     `json:"duration_ms"`
	Agents           []string    `json:"agents"`
	Status           string      `json:"status"`
	Errors           int         `json:"errors"`
	Tokens           lctl.Tokens `json:"tokens"`
	Cost             *float64    `json:"cost"`
	PendingApprovals int         `json:"pending_approvals"`
	VerifyError      string      `json:"verify_error"`

	lastTime time.Time
}

type chainsResponse struct {
	Chains     []ChainSummary `json:"chains"`
	NextCursor string         `json:"next_cursor"`
}

var chainStatuses = []string{"running", "completed", "failed", "cancelled", "denied", "unknown"}

func (h *Handler) chains(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	limit, err := intParam(r, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		return nil, err
	}
	since, err := timeParam(r, "since")
	if err != nil {
		return nil, err
	}
	until, err := timeParam(r, "until")
	if err != nil {
		return nil, err
	}
	status := q.Get("status")
	if status != "" && !contains(chainStatuses, status) {
		return nil, badArg("status must be one of %s, got %q", strings.Join(chainStatuses, ", "), status)
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			return nil, badArg("cursor %q is not one this server gave", c)
		}
		offset = n
	}
	text, agent := q.Get("q"), q.Get("agent")
	infos, err := h.opts.Source.Chains(r.Context())
	if err != nil {
		return nil, err
	}
	pending := h.pendingByRun(r)
	var out []ChainSummary
	for _, info := range infos {
		if text != "" && !strings.Contains(strings.ToLower(info.ID), strings.ToLower(text)) {
			continue
		}
		if agent != "" && !contains(info.Agents, agent) {
			continue
		}
		sum, err := h.summary(r, info.ID)
		if err != nil {
			continue // the chain went away between the two calls
		}
		if status != "" && sum.Status != status {
			continue
		}
		if !since.IsZero() || !until.IsZero() {
			first, _ := lctl.ParseTime(sum.FirstTimestamp)
			last, _ := lctl.ParseTime(sum.LastTimestamp)
			if !since.IsZero() && last.Before(since) || !until.IsZero() && first.After(until) {
				continue
			}
		}
		sum.PendingApprovals = pending[sum.ID]
		out = append(out, sum)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].lastTime.Equal(out[j].lastTime) {
			return out[i].lastTime.After(out[j].lastTime)
		}
		return out[i].ID < out[j].ID
	})
	resp := chainsResponse{Chains: []ChainSummary{}}
	if offset < len(out) {
		end := min(offset+limit, len(out))
		resp.Chains = out[offset:end]
		if end < len(out) {
			resp.NextCursor = strconv.Itoa(end)
		}
	}
	return resp, nil
}

// summary is the chain list's entry for a chain, cached for its number of
// events.
func (h *Handler) summary(r *http.Request, id string) (ChainSummary, error) {
	c, err := h.opts.Source.Chain(r.Context(), id)
	if err != nil {
		return ChainSummary{}, err
	}
	cc := h.cacheOf(id)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.summary != nil && cc.sumN == len(c.Events) {
		return *cc.summary, nil
	}
	st, _ := c.Timeline.SummaryAt(0)
	sum := ChainSummary{
		ID: c.ID, Events: len(c.Events), FirstTimestamp: c.FirstTimestamp, LastTimestamp: c.LastTimestamp,
		DurationMS: wallClockMS(c.FirstTimestamp, c.LastTimestamp), Agents: nonNil(st.Agents),
		Status: runStatus(st.Run), Errors: len(st.Errors), Tokens: st.Tokens, VerifyError: c.VerifyError,
	}
	if len(sum.Agents) == 0 {
		sum.Agents = nonNil(c.Agents)
	}
	sum.lastTime, _ = lctl.ParseTime(c.LastTimestamp)
	if h.opts.Prices != nil {
		sum.Cost = analysis.ComputeStats(c.ID, c.Events, h.opts.Prices).Cost
	}
	cc.summary, cc.sumN = &sum, len(c.Events)
	return sum, nil
}

// runStatus is the chain list's status of a run.
func runStatus(run *lctl.Run) string {
	if run == nil {
		return "unknown"
	}
	switch run.Status {
	case "running", "":
		return "running"
	case "done", "completed", "success":
		return "completed"
	case "failed", "cancelled", "denied":
		return run.Status
	}
	return "unknown"
}

func wallClockMS(first, last string) float64 {
	a, ok1 := lctl.ParseTime(first)
	b, ok2 := lctl.ParseTime(last)
	if !ok1 || !ok2 || b.Before(a) {
		return 0
	}
	return float64(b.Sub(a)) / float64(time.Millisecond)
}

// verifyResult is a chain's verification in brief.
type verifyResult struct {
	OK          bool   `json:"ok"`
	FirstBadSeq uint64 `json:"first_bad_seq"`
	Message     string `json:"message"`
}

// chainDetail is /api/chains/{id}.
type chainDetail struct {
	ID             string                     `json:"id"`
	Events         int                        `json:"events"`
	FirstSeq       uint64                     `json:"first_seq"`
	LastSeq        uint64                     `json:"last_seq"`
	FirstTimestamp string                     `json:"first_timestamp"`
	LastTimestamp  string                     `json:"last_timestamp"`
	DurationMS     float64                    `json:"duration_ms"`
	Agents         []string                   `json:"agents"`
	Status         string                     `json:"status"`
	Live           bool                       `json:"live"`
	Run            *lctl.Run                  `json:"run"`
	Verify         verifyResult               `json:"verify"`
	Stats          *analysis.Stats            `json:"stats"`
	Bottlenecks    *analysis.BottleneckReport `json:"bottlenecks"`
	Warnings       []string                   `json:"warnings"`
}

func (h *Handler) chain(_ http.ResponseWriter, r *http.Request) (any, error) {
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	cc := h.cacheOf(c.ID)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.detail != nil && cc.detN == len(c.Events) {
		return cc.detail, nil
	}
	st, _ := c.Timeline.SummaryAt(0)
	d := &chainDetail{
		ID: c.ID, Events: len(c.Events), FirstTimestamp: c.FirstTimestamp, LastTimestamp: c.LastTimestamp,
		DurationMS: wallClockMS(c.FirstTimestamp, c.LastTimestamp), Agents: nonNil(st.Agents),
		Status: runStatus(st.Run), Live: c.Live, Run: st.Run,
		Stats:       analysis.ComputeStats(c.ID, c.Events, h.opts.Prices),
		Bottlenecks: analysis.Bottlenecks(c.ID, c.Events, 5),
		Warnings:    nonNil(c.Warnings),
	}
	if n := len(c.Events); n > 0 {
		d.FirstSeq, d.LastSeq = c.Events[0].Seq, c.Events[n-1].Seq
	}
	if c.VerifyKnown {
		d.Verify = verifyResult{OK: c.VerifyError == "", Message: c.VerifyError}
		if c.VerifyError != "" {
			_, _ = fmt.Sscanf(c.VerifyError, "event %d", &d.Verify.FirstBadSeq)
		}
	} else {
		rep := analysis.Verify(c.ID, c.Events)
		d.Verify.OK = rep.OK
		if rep.First != nil {
			d.Verify.FirstBadSeq, d.Verify.Message = rep.First.Seq, rep.First.Message
		}
	}
	cc.detail, cc.detN = d, len(c.Events)
	return d, nil
}

type eventsResponse struct {
	Events   []lctl.Event `json:"events"`
	Total    int          `json:"total"`
	FirstSeq uint64       `json:"first_seq"`
	LastSeq  uint64       `json:"last_seq"`
	NextFrom uint64       `json:"next_from"`
	// Position is the position in chain order (from 0) of the first event
	// returned: a list can place rows by position whatever the seqs (gaps).
	Position int `json:"position"`
}

func (h *Handler) events(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	if q.Has("from") && q.Has("pos") {
		return nil, badArg("give from or pos, not both")
	}
	from, err := seqParam(r, "from", 1)
	if err != nil {
		return nil, err
	}
	pos, err := intParam(r, "pos", -1, 0, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	limit, err := intParam(r, "limit", defaultPage, 1, maxPage)
	if err != nil {
		return nil, err
	}
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	resp := eventsResponse{Events: []lctl.Event{}, Total: len(c.Events)}
	if n := len(c.Events); n > 0 {
		resp.FirstSeq, resp.LastSeq = c.Events[0].Seq, c.Events[n-1].Seq
	}
	start := min(pos, len(c.Events))
	if pos < 0 {
		start = firstAtOrAfter(c, from)
	}
	resp.Position = start
	end := min(start+limit, len(c.Events))
	if start < end {
		resp.Events = c.Events[start:end]
	}
	if end < len(c.Events) {
		resp.NextFrom = c.Events[end].Seq
	}
	return resp, nil
}

// firstAtOrAfter is the position of the first event (in chain order) whose
// seq is at least seq.
func firstAtOrAfter(c *Chain, seq uint64) int {
	if c.Sorted {
		return sort.Search(len(c.Events), func(i int) bool { return c.Events[i].Seq >= seq })
	}
	for i := range c.Events {
		if c.Events[i].Seq >= seq {
			return i
		}
	}
	return len(c.Events)
}

// positionOf is the position of the event with this seq, or -1.
func positionOf(c *Chain, seq uint64) int {
	if c.Sorted {
		i := sort.Search(len(c.Events), func(i int) bool { return c.Events[i].Seq >= seq })
		if i < len(c.Events) && c.Events[i].Seq == seq {
			return i
		}
		return -1
	}
	for i := range c.Events {
		if c.Events[i].Seq == seq {
			return i
		}
	}
	return -1
}

func (h *Handler) flow(_ http.ResponseWriter, r *http.Request) (any, error) {
	from, err := seqParam(r, "from", 1)
	if err != nil {
		return nil, err
	}
	limit, err := intParam(r, "limit", defaultPage, 1, maxPage)
	if err != nil {
		return nil, err
	}
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	return h.flowPage(c, from, limit), nil
}

func (h *Handler) flowPage(c *Chain, from uint64, limit int) FlowPage {
	cc := h.cacheOf(c.ID)
	cc.mu.Lock()
	if cc.flow == nil {
		cc.flow = newFlow()
	}
	f := cc.flow
	cc.mu.Unlock()
	// f.consumed is f's, read and written under f.mu only: a request
	// building the flow writes it while others look up the cache.
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.consumed > len(c.Events) {
		// The cached flow was built from more of the chain than this view
		// has (a file read again after it was cut): this view gets a flow
		// of its own, which replaces the cached one unless another request
		// replaced it first.
		nf := newFlow()
		nf.mu.Lock()
		defer nf.mu.Unlock()
		cc.mu.Lock()
		if cc.flow == f {
			cc.flow = nf
		}
		cc.mu.Unlock()
		f = nf
	}
	f.update(c.Events)
	return f.page(from, limit)
}

func (h *Handler) confidence(_ http.ResponseWriter, r *http.Request) (any, error) {
	c, err := h.getChain(r)
	if err != nil {
		return nil, err
	}
	return h.confidenceOf(c), nil
}

// confidenceOf is the chain's confidence report, cached until the chain
// grows.
func (h *Handler) confidenceOf(c *Chain) *analysis.ConfidenceReport {
	cc := h.cacheOf(c.ID)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.conf == nil || cc.confN != len(c.Events) {
		cc.conf, cc.confN = analysis.Confidence(c.ID, c.Events, analysis.ConfidenceOptions{}), len(c.Events)
	}
	return cc.conf
}

func (h *Handler) diff(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	ids := [2]string{q.Get("a"), q.Get("b")}
	var chains [2]*Chain
	for i, id := range ids {
		if id == "" {
			return nil, badArg("diff needs two chains: ?a=ID&b=ID")
		}
		if err := lctl.ValidateChainID(id); err != nil {
			return nil, badArg("%v", err)
		}
		c, err := h.opts.Source.Chain(r.Context(), id)
		if err != nil {
			return nil, err
		}
		chains[i] = c
	}
	// A page that went away stops the alignment (seconds for two
	// similar chains of a million events).
	return analysis.DiffContext(r.Context(),
		analysis.Chain{Label: "v1", ID: chains[0].ID, Events: chains[0].Events},
		analysis.Chain{Label: "v2", ID: chains[1].ID, Events: chains[1].Events},
		analysis.DiffOptions{},
	)
}

func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
