package lctlpb_test

import (
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctlpb"
)

func TestRoundTripKeepsTheHash(t *testing.T) {
	e := lctl.Event{ChainID: "c", Seq: 1, Type: "tool_call", Timestamp: "2026-01-01T00:00:00Z", Agent: "executor",
		Data: map[string]any{"tool": "fs.read", "n": 2.0, "list": []any{"a", true, nil}}}
	if err := e.Seal(""); err != nil {
		t.Fatal(err)
	}
	p, err := lctlpb.ToProto(&e)
	if err != nil {
		t.Fatal(err)
	}
	back := lctlpb.FromProto(p)
	if h, _ := back.ComputeHash(); h != e.Hash || back.Hash != e.Hash {
		t.Fatal("the hash does not survive the round trip")
	}
	if _, err := lctlpb.ToProto(&lctl.Event{Data: map[string]any{"bad": make(chan int)}}); err == nil {
		t.Fatal("non-JSON data accepted")
	}
}
