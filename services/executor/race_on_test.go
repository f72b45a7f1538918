//go:build race

package executor

// raceDetector: this test binary runs under the race detector, ten or
// more times slower; the swap races make fewer calls.
const raceDetector = true
