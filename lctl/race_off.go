//go:build !race

package lctl

// raceDetector: this binary is built with the race detector.
const raceDetector = false
