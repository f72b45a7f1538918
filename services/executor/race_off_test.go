//go:build !race

package executor

// raceDetector: this test binary runs under the race detector.
const raceDetector = false
