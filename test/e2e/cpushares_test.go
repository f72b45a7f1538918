package e2e

import (
	"bytes"
	"runtime/pprof"
	"sort"
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
		who := "other"
		if l := smp.Label[app.ProfileLabel]; len(l) > 0 {
			who = l[0]
		}
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
