package orchestrator

import "google.golang.org/protobuf/types/known/structpb"

func structFromMap(m map[string]any) (*structpb.Struct, error) {
	if m == nil {
		return &structpb.Struct{}, nil
	}
	return structpb.NewStruct(m)
}
