// Package lctlpb converts LCTL events between their Go form (lctl.Event)
// and their protobuf form (lctl.v1.Event), the one place that does.
package lctlpb

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	"github.com/xct-dev/xct/lctl"
)

// ToProto converts an event for gRPC. Data that is not JSON fails.
func ToProto(e *lctl.Event) (*lctlv1.Event, error) {
	data := &structpb.Struct{}
	if e.Data != nil {
		var err error
		if data, err = structpb.NewStruct(e.Data); err != nil {
			return nil, fmt.Errorf("event %d data: %w", e.Seq, err)
		}
	}
	return &lctlv1.Event{
		ChainId: e.ChainID, Seq: e.Seq, Type: e.Type, Timestamp: e.Timestamp,
		Agent: e.Agent, Data: data, PrevHash: e.PrevHash, Hash: e.Hash,
	}, nil
}

// FromProto converts an event received over gRPC.
func FromProto(e *lctlv1.Event) lctl.Event {
	var data map[string]any
	if e.GetData() != nil {
		data = e.GetData().AsMap()
	}
	return lctl.Event{
		ChainID: e.GetChainId(), Seq: e.GetSeq(), Type: e.GetType(), Timestamp: e.GetTimestamp(),
		Agent: e.GetAgent(), Data: data, PrevHash: e.GetPrevHash(), Hash: e.GetHash(),
	}
}
