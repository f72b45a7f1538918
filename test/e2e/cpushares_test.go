package e2e

import (
	"bytes"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/xct-dev/xct/internal/app"
)

// cpuShares profiles the process's CPU while a benchmark runs and reports
// each service's CPU per step, from the profiler label every goroutine of a
// service inherits (app.ProfileLabel): the executor's, validator's and
// tracer's costs are then visible separately, so the next regression shows
// where it is. Goroutines without a label (the benchmark's own client, the
// Go runtime) are "other".
type cpuShares struct {
	buf     bytes.Buffer
	running bool
}

// startCPUShares starts the profile; when the process is already profiled
// (go test -cpuprofile) it reports nothing rather than disturb that.
func startCPUShares() *cpuShares {
	s := &cpuShares{}
	s.running = pprof.StartCPUProfile(&s.buf) == nil
	return s
}

// shareOf names whose CPU a sample is: the service its goroutine is
// labelled with; else "nats-store" for the embedded NATS server's stream
// and consumer goroutines (a stream's internal loop stores every append;
// the server sets its own profiler labels on them, account, stream and
// consumer, which replace the xct.service label they inherited), "gc" for
// the collector's background workers, and "other" for the rest (the
// scheduler, the benchmark's own client and proposer).
func shareOf(smp *profile.Sample) string {
	if l := smp.Label[app.ProfileLabel]; len(l) > 0 {
		return l[0]
	}
	// The outermost frame says which goroutine it is.
	if n := len(smp.Location); n > 0 {
		if lines := smp.Location[n-1].Line; len(lines) > 0 && lines[len(lines)-1].Function != nil {
			switch fn := lines[len(lines)-1].Function.Name; {
			case strings.HasPrefix(fn, "github.com/nats-io/nats-server/"):
				return "nats-store"
			case fn == "runtime.gcBgMarkWorker" || fn == "runtime.bgsweep" || fn == "runtime.bgscavenge":
				return "gc"
			}
		}
	}
	return "other"
}

// report stops the profile and reports "<service>-cpu-us/step" for each
// label seen, and "cpu-us/step" for the whole process.
func (s *cpuShares) report(b *testing.B, steps int) {
	if !s.running {
		return
	}
	pprof.StopCPUProfile()
	s.running = false
	if steps == 0 {
		return
	}
	p, err := profile.Parse(&s.buf)
	if err != nil {
		b.Logf("cpu shares: %v", err)
		return
	}
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return
	}
	byLabel := map[string]int64{}
	var total int64
	for _, smp := range p.Sample {
		who := shareOf(smp)
		byLabel[who] += smp.Value[cpu]
		total += smp.Value[cpu]
	}
	names := make([]string, 0, len(byLabel))
	for n := range byLabel {
		names = append(names, n)
	}
	sort.Strings(names)
	perStep := func(ns int64) float64 { return float64(ns) / 1e3 / float64(steps) }
	for _, n := range names {
		b.ReportMetric(perStep(byLabel[n]), n+"-cpu-us/step")
	}
	b.ReportMetric(perStep(total), "cpu-us/step")
}

// TestShareOf: a labelled sample is its service's; an unlabelled one is
// the NATS server's store when its goroutine is the server's, the
// collector's when it is a GC worker, and "other" otherwise.
func TestShareOf(t *testing.T) {
	t.Parallel()
	sample := func(label string, funcs ...string) *profile.Sample {
		s := &profile.Sample{}
		if label != "" {
			s.Label = map[string][]string{app.ProfileLabel: {label}}
		}
		for _, f := range funcs { // innermost first, as in a profile
			s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: f}}}})
		}
		return s
	}
	for _, c := range []struct {
		s    *profile.Sample
		want string
	}{
		{sample("executor", "crypto/ed25519.Verify", "github.com/nats-io/nats-server/v2/server.(*client).readLoop"), "executor"},
		{sample("", "github.com/nats-io/nats-server/v2/server.(*msgBlock).writeMsgRecordLocked", "github.com/nats-io/nats-server/v2/server.(*stream).internalLoop"), "nats-store"},
		{sample("", "runtime.scanobject", "runtime.gcBgMarkWorker"), "gc"},
		{sample("", "runtime.sweepone", "runtime.bgsweep"), "gc"},
		{sample("", "runtime.findRunnable", "runtime.mcall"), "other"},
		{sample("", "github.com/nats-io/nats-server/v2/server.(*stream).internalLoop", "github.com/xct-dev/xct/test/e2e.benchSteps.func1"), "other"},
		{sample(""), "other"},
	} {
		if got := shareOf(c.s); got != c.want {
			t.Errorf("%v: %s, want %s", c.s.Location, got, c.want)
		}
	}
}
