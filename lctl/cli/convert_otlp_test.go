package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const otlpData = "../otlp/testdata/"

// TestConvertOTLPGolden pins `lctl convert --from otlp` on fixtures shaped
// like OpenInference, OpenLLMetry and GenAI-convention exports, and its
// errors.
func TestConvertOTLPGolden(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{\"resourceSpans\":[]}\n{\"resourceSpans\": [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"convert-otlp-openinference", []string{"convert", "--from", "otlp", otlpData + "openinference.json", "--to", "json"}},
		{"convert-otlp-openllmetry-yaml", []string{"convert", "--from", "otlp", otlpData + "openllmetry.jsonl", "--to", "yaml"}},
		{"convert-otlp-several-traces", []string{"convert", "--from", "otlp", otlpData + "genai.json", "--to", "json"}},
		{"convert-otlp-trace", []string{"convert", "--from", "otlp", "--trace", "4bf92f3577b34da6a3ce929d0e0e4737", otlpData + "genai.json", "--to", "json"}},
		{"convert-otlp-missing-attributes", []string{"convert", "--from", "otlp", "--trace", "otel-4bf92f3577b34da6a3ce929d0e0e4736", otlpData + "genai.json", "--to", "yaml"}},
		{"convert-otlp-no-such-trace", []string{"convert", "--from", "otlp", "--trace", "ffff", otlpData + "genai.json", "--to", "json"}},
		{"convert-otlp-bad-from", []string{"convert", "--from", "v9", otlpData + "genai.json", "--to", "json"}},
		{"convert-otlp-trace-without-from", []string{"convert", "--trace", "ffff", v1, "--to", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { golden(t, tt.name, tt.args...) })
	}
	// The temporary path varies: checked without a golden file.
	code, _, errOut := run(t, nil, "convert", "--from", "otlp", bad, "--to", "json")
	if code != 2 || !strings.Contains(errOut, "line 2: OTLP JSON: unexpected EOF") {
		t.Errorf("bad file: exit %d, %s", code, errOut)
	}
}

// TestConvertOTLPDirectory writes one chain file per trace into a
// directory, and the chains replay, verify and have stats.
func TestConvertOTLPDirectory(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, nil, "convert", "--from", "otlp", otlpData+"genai.json", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, id := range []string{"otel-4bf92f3577b34da6a3ce929d0e0e4736", "otel-4bf92f3577b34da6a3ce929d0e0e4737"} {
		path := filepath.Join(dir, id+".lctl.json")
		if !strings.Contains(out, "Wrote "+path) {
			t.Errorf("output does not name %s:\n%s", path, out)
		}
		for _, cmd := range []string{"verify", "replay", "stats"} {
			if code, out, errOut := run(t, nil, cmd, path); code != 0 {
				t.Errorf("lctl %s %s: exit %d\n%s%s", cmd, path, code, out, errOut)
			}
		}
	}
	_, out, _ = run(t, nil, "stats", filepath.Join(dir, "otel-4bf92f3577b34da6a3ce929d0e0e4736.lctl.json"))
	if !strings.Contains(out, "Tokens: 700 (in: 500 / out: 200)") || !strings.Contains(out, "Agents: 2") {
		t.Errorf("stats:\n%s", out)
	}
	// One trace to a file named as OUT; several to a file is refused.
	if code, _, errOut := run(t, nil, "convert", "--from", "otlp", otlpData+"genai.json", filepath.Join(dir, "one.lctl.json")); code != 2 || !strings.Contains(errOut, "holds 2 traces") {
		t.Errorf("several traces to one file: exit %d %s", code, errOut)
	}
	if code, _, errOut := run(t, nil, "convert", "--from", "otlp", otlpData+"openinference.json", filepath.Join(dir, "oi.lctl.yaml")); code != 0 {
		t.Errorf("one trace to a file: exit %d %s", code, errOut)
	}
	if code, out, _ := run(t, nil, "replay", filepath.Join(dir, "oi.lctl.yaml")); code != 0 || !strings.Contains(out, "researcher: tool_call web_search") {
		t.Errorf("replay of the YAML chain: %d\n%s", code, out)
	}
}
