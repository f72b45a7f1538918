//go:build !race

package cli_test

// raceDetector: this test binary runs under the race detector.
const raceDetector = false
