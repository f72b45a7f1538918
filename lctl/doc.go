// Package lctl implements the LCTL v4.0 event model that XCT records every
// transition in: events, their canonical JSON and hash chain, the chain file
// format (.lctl.json / .lctl.yaml, read from any LCTL implementation with
// Decode), the order checks (CheckSequence), the reducer that replays events
// into state (Replay, State), and Timeline, which keeps snapshots of the
// state so replaying to any seq is cheap.
//
// The package is pure: it does no I/O beyond the readers and writers it is
// given, so the tracer, the lctl CLI and any Go agent use the same code.
// The analyses built on it (verify, diff, stats, ...) are in lctl/analysis,
// the command line in lctl/cli, the Go SDK in lctl/session.
package lctl
