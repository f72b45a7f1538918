package orchestrator

import "github.com/xct-dev/xct/lctl/xctevent"

// The tests read raw event payloads with these (the code reads typed
// events, lctl/xctevent).
func str(d map[string]any, k string) string { return xctevent.Str(d, k) }

func num(d map[string]any, k string) int64 { return xctevent.Int(d, k) }
