// Command benchstep measures a governed step against the floor: the bare
// gRPC + JetStream work a step must do (../shared/bench/floor/stepbench),
// run in the same invocation, interleaved, on the same machine, so the
// ratios mean something on a noisy machine where absolute figures drift.
//
//	go run ./test/benchstep                  # 1, 64 and 256 runs, 3 repetitions
//	go run ./test/benchstep -sync            # also with an fsync per write
//
// For each repetition it runs the floor at every concurrency level, then
// XCT's BenchmarkGovernedStep, -Parallel64 and -Parallel256 (tracer on),
// and prints the medians and the ratios ours / floor. `make bench-step`
// runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// levels are the concurrency levels both sides run, and the name of our
// benchmark at each.
type level struct {
	runs  int
	bench string
}

var levels = []level{
	{1, "BenchmarkGovernedStep"},
	{64, "BenchmarkGovernedStepParallel64"},
	{256, "BenchmarkGovernedStepParallel256"},
}

// sample is one measurement of one side at one level.
type sample struct {
	stepsPerSec float64
	p50ms       float64
	p99ms       float64
	cpu         map[string]float64 // µs of CPU per step by service (ours only)
}

func main() {
	floorDir := flag.String("floor", "../shared/bench/floor", "the floor's module (relative to the repository root)")
	reps := flag.Int("reps", 3, "interleaved repetitions")
	floorDur := flag.Duration("d", 4*time.Second, "the floor's duration per concurrency level")
	benchtime := flag.String("benchtime", "4s", "go test -benchtime for ours")
	syncAlways := flag.Bool("sync", false, "also measure both sides with an fsync per write (sync: always)")
	flag.Parse()
	if err := run(*floorDir, *reps, *floorDur, *benchtime, *syncAlways); err != nil {
		fmt.Fprintln(os.Stderr, "benchstep:", err)
		os.Exit(1)
	}
}

func run(floorDir string, reps int, floorDur time.Duration, benchtime string, syncAlways bool) error {
	if reps < 1 {
		return errors.New("-reps must be at least 1")
	}
	floorDir, err := filepath.Abs(floorDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(floorDir, "stepbench")); err != nil {
		return fmt.Errorf("the floor is not at %s (-floor DIR): %w", floorDir, err)
	}
	tmp, err := os.MkdirTemp("", "benchstep-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintln(os.Stderr, "benchstep: remove", tmp+":", err)
		}
	}()
	floorBin, oursBin := filepath.Join(tmp, "stepbench"), filepath.Join(tmp, "e2e.test")
	fmt.Fprintln(os.Stderr, "building the floor and our benchmarks...")
	if err := command(floorDir, "go", "build", "-o", floorBin, "./stepbench").Run(); err != nil {
		return fmt.Errorf("build the floor: %w", err)
	}
	if err := command("", "go", "test", "-c", "-o", oursBin, "./test/e2e").Run(); err != nil {
		return fmt.Errorf("build our benchmarks: %w", err)
	}
	modes := []bool{false}
	if syncAlways {
		modes = append(modes, true)
	}
	machine := machineLine()
	fmt.Println(machine)
	for _, sync := range modes {
		floor := map[int][]sample{}
		ours := map[int][]sample{}
		for rep := 1; rep <= reps; rep++ {
			fmt.Fprintf(os.Stderr, "repetition %d/%d (sync always: %v): floor...\n", rep, reps, sync)
			f, err := runFloor(floorBin, floorDur, sync)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "repetition %d/%d (sync always: %v): ours...\n", rep, reps, sync)
			o, err := runOurs(oursBin, benchtime, sync)
			if err != nil {
				return err
			}
			for _, l := range levels {
				floor[l.runs] = append(floor[l.runs], f[l.runs])
				ours[l.runs] = append(ours[l.runs], o[l.runs])
			}
		}
		printTable(sync, reps, floor, ours)
	}
	return nil
}

func command(dir string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(context.Background(), name, args...) //nolint:gosec // go and the binaries this program just built, with its own arguments
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	return cmd
}

// floorLine matches stepbench's report: "... runs=64 n=... p50=123.4us
// p99=...us p999=...us ops/s=12345".
var floorLine = regexp.MustCompile(`runs=(\d+)\s+n=\d+\s+p50=([\d.]+)us\s+p99=([\d.]+)us\s+p999=[\d.]+us\s+ops/s=([\d.]+)`)

func runFloor(bin string, d time.Duration, sync bool) (map[int]sample, error) {
	conc := make([]string, len(levels))
	for i, l := range levels {
		conc[i] = strconv.Itoa(l.runs)
	}
	args := []string{"-k", "4", "-c", strings.Join(conc, ","), "-d", d.String()}
	if sync {
		args = append(args, "-syncalways")
	}
	out, err := command("", bin, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("the floor: %w", err)
	}
	got := map[int]sample{}
	for _, m := range floorLine.FindAllStringSubmatch(string(out), -1) {
		runs, _ := strconv.Atoi(m[1])
		p50, _ := strconv.ParseFloat(m[2], 64)
		p99, _ := strconv.ParseFloat(m[3], 64)
		ops, _ := strconv.ParseFloat(m[4], 64)
		got[runs] = sample{stepsPerSec: ops, p50ms: p50 / 1e3, p99ms: p99 / 1e3}
	}
	for _, l := range levels {
		if _, ok := got[l.runs]; !ok {
			return nil, fmt.Errorf("the floor printed no result for %d runs:\n%s", l.runs, out)
		}
	}
	return got, nil
}

func runOurs(bin, benchtime string, sync bool) (map[int]sample, error) {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = strings.TrimPrefix(l.bench, "Benchmark")
		if sync {
			names[i] += "SyncAlways"
		}
	}
	pattern := "^Benchmark(" + strings.Join(names, "|") + ")$"
	out, err := command("", bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime).Output()
	if err != nil {
		return nil, fmt.Errorf("our benchmarks: %w\n%s", err, out)
	}
	got := map[int]sample{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		name := strings.TrimSuffix(strings.SplitN(fields[0], "-", 2)[0], "SyncAlways")
		i := slices.IndexFunc(levels, func(l level) bool { return l.bench == name })
		if i < 0 {
			continue
		}
		s := sample{cpu: map[string]float64{}}
		// After the name and the iteration count come "value unit" pairs.
		for j := 2; j+1 < len(fields); j += 2 {
			v, err := strconv.ParseFloat(fields[j], 64)
			if err != nil {
				continue
			}
			switch unit := fields[j+1]; {
			case unit == "steps/s":
				s.stepsPerSec = v
			case unit == "p50-ms":
				s.p50ms = v
			case unit == "p99-ms":
				s.p99ms = v
			case strings.HasSuffix(unit, "-cpu-us/step"):
				s.cpu[strings.TrimSuffix(unit, "-cpu-us/step")] = v
			case unit == "cpu-us/step":
				s.cpu["total"] = v
			}
		}
		got[levels[i].runs] = s
	}
	for _, l := range levels {
		if _, ok := got[l.runs]; !ok {
			return nil, fmt.Errorf("our benchmarks printed no result for %d runs:\n%s", l.runs, out)
		}
	}
	return got, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func field(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func printTable(sync bool, reps int, floor, ours map[int][]sample) {
	mode := "store syncs on an interval (the default)"
	if sync {
		mode = "store fsyncs every write (sync: always; floor -syncalways)"
	}
	fmt.Printf("\nGoverned step vs floor, %s; medians of %d interleaved repetitions\n", mode, reps)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "runs\tfloor steps/s\tXCT steps/s\tXCT/floor\tfloor p50 ms\tXCT p50 ms\tXCT/floor p50\tXCT p99 ms\t")
	for _, l := range levels {
		fs, fp := median(field(floor[l.runs], func(s sample) float64 { return s.stepsPerSec })), median(field(floor[l.runs], func(s sample) float64 { return s.p50ms }))
		xs, xp := median(field(ours[l.runs], func(s sample) float64 { return s.stepsPerSec })), median(field(ours[l.runs], func(s sample) float64 { return s.p50ms }))
		x99 := median(field(ours[l.runs], func(s sample) float64 { return s.p99ms }))
		fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%.2f\t%.3f\t%.3f\t%.2f\t%.3f\t\n", l.runs, fs, xs, xs/fs, fp, xp, xp/fp, x99)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "benchstep:", err)
	}
	// CPU per step by service, ours only (the floor has no services).
	var services []string
	for _, l := range levels {
		for _, s := range ours[l.runs] {
			for k := range s.cpu {
				if !slices.Contains(services, k) {
					services = append(services, k)
				}
			}
		}
	}
	if len(services) == 0 {
		return
	}
	slices.Sort(services)
	fmt.Println("\nXCT CPU per step by service, µs (medians; \"nats-store\" is the embedded server's stream loops, which store each append,")
	fmt.Println("\"gc\" the collector's background workers, \"other\" the scheduler and the benchmark's client)")
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "runs\t"+strings.Join(services, "\t")+"\t")
	for _, l := range levels {
		row := []string{strconv.Itoa(l.runs)}
		for _, svc := range services {
			row = append(row, fmt.Sprintf("%.0f", median(field(ours[l.runs], func(s sample) float64 { return s.cpu[svc] }))))
		}
		fmt.Fprintln(w, strings.Join(row, "\t")+"\t")
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "benchstep:", err)
	}
}

// machineLine says what the figures were measured on.
func machineLine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("machine: %s, %d cores, %s %s/%s", model, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
