// Package lctl implements the LCTL v4.0 event model that XCT records every
// transition in: events, their canonical JSON and hash chain, the chain file
// format (.lctl.json / .lctl.yaml) and the reducer that replays events into
// state.
//
// The package is pure: it does no I/O beyond the readers and writers it is
// given, so the tracer, the lctl CLI and any Go agent use the same code.
package lctl
