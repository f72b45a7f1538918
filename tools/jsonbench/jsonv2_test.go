//go:build jsonv2

package jsonbench

import (
	jsonv2 "encoding/json/v2"
	"testing"
)

func BenchmarkJSONv2(b *testing.B) {
	run(b, func(raw []byte, e *event) error { return jsonv2.Unmarshal(raw, e) })
}
