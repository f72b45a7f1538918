//go:build race

package lctl

// raceDetector: this test binary runs under the race detector.
const raceDetector = true
