package cli_test

import "testing"

// TestGoldenVersionsAndEncoding covers what other implementations write:
// 4.1 (the reference) read silently, another 4.x read with a warning,
// another major version refused, and bytes that are not UTF-8 refused at
// their offset.
func TestGoldenVersionsAndEncoding(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"stats-reference-4.1", []string{"stats", "testdata/chains/reference-4.1.lctl.json"}},
		{"replay-reference-4.7", []string{"replay", "testdata/chains/reference-4.7.lctl.json"}},
		{"stats-major-5", []string{"stats", bad + "major-5.lctl.json"}},
		{"replay-latin-1-json", []string{"replay", bad + "latin-1.lctl.json"}},
		{"replay-latin-1-yaml", []string{"replay", bad + "latin-1.lctl.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, tc.args...) })
	}
}

// TestGoldenNestingStreamsOrder: nested steps counted once (an OTel agent
// span with model spans and a sub-agent inside), streams timed with their
// tokens, and replay --to-seq on events out of file order saying which
// were not applied.
func TestGoldenNestingStreamsOrder(t *testing.T) {
	otel := "testdata/chains/otel-nested-agents.lctl.json"
	tests := []struct {
		name string
		args []string
	}{
		{"stats-otel-nested", []string{"stats", otel}},
		{"bottleneck-otel-nested", []string{"bottleneck", otel}},
		{"stats-spec-streaming", []string{"stats", spec + "streaming.lctl.yaml"}},
		{"bottleneck-spec-streaming", []string{"bottleneck", spec + "streaming.lctl.yaml"}},
		{"replay-to-seq-reordered", []string{"replay", "--to-seq", "8", bad + "reordered.lctl.json"}},
		{"replay-to-seq-reordered-json", []string{"replay", "--json", "--to-seq", "8", bad + "reordered.lctl.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, tc.args...) })
	}
}
