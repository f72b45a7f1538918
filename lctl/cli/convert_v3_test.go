package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/analysis"
)

const v3dir = "testdata/v3/"

// TestGoldenConvertV3 converts v3 files written from the spec's migration
// table (docs/lctl.md has the mapping) and bad v3 input, and compares with
// the golden files.
func TestGoldenConvertV3(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"convert-v3-security-review", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "security-review.lctl.json"}},
		{"convert-v3-yaml-handoffs", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "handoffs-in-yaml.lctl.yaml"}},
		{"convert-v3-to-yaml", []string{"convert", "--from", "v3", "--to", "yaml", v3dir + "security-review.lctl.json"}},
		{"convert-v3-trace-not-a-list", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/trace-not-a-list.lctl.json"}},
		{"convert-v3-tool-calls-not-a-list", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/tool-calls-not-a-list.lctl.json"}},
		{"convert-v3-fact-without-id", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/fact-without-id.lctl.json"}},
		{"convert-v3-already-v4", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/already-v4.lctl.json"}},
		{"convert-v3-version-2", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/version-2.lctl.json"}},
		{"convert-v3-nothing", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/nothing.lctl.json"}},
		{"convert-v3-latin-1", []string{"convert", "--from", "v3", "--to", "v4", v3dir + "bad/latin-1.lctl.json"}},
		{"convert-to-v4-without-v3", []string{"convert", "--to", "v4", v1}},
		{"stats-v3-unconverted", []string{"stats", v3dir + "security-review.lctl.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, tc.args...) })
	}
}

// TestConvertedV3IsAChain checks that a converted file reads back as v4,
// verifies, and replays to the state the v3 file described.
func TestConvertedV3IsAChain(t *testing.T) {
	out := filepath.Join(t.TempDir(), "converted.lctl.json")
	if code, stdout, stderr := run(t, nil, "convert", "--from", "v3", v3dir+"security-review.lctl.json", out); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := lctl.DecodeFile(bytes.NewReader(raw), lctl.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := lctl.Verify(f.Events); err != nil {
		t.Fatal(err)
	}
	s := lctl.Replay(f.Chain.ID, f.Events, 0)
	if f.Chain.ID != "security-review-001" || len(s.Facts) != 3 || s.Tokens.Input != 1300 || s.Tokens.Output != 500 ||
		len(s.ToolCalls) != 1 || len(s.Errors) != 1 || len(s.Agents) != 3 || s.EventTypes[lctl.TypeHandoff] != 1 {
		t.Fatalf("state: %+v", s)
	}
	// F1 comes with step 1, before the handoff after it; F10 after F2.
	var order []string
	for _, e := range f.Events {
		switch e.Type {
		case lctl.TypeFactAdded:
			order = append(order, e.Data["id"].(string))
		case lctl.TypeHandoff:
			order = append(order, "handoff")
		}
	}
	if got := fmtList(order); got != "F1 handoff F2 F10" {
		t.Fatalf("order %s", got)
	}
	st := analysis.ComputeStats(f.Chain.ID, f.Events, nil)
	if st.DurationMS != 30000+22500+30500 {
		t.Fatalf("duration %v", st.DurationMS)
	}
	if f.Extra["confidence"] == nil {
		t.Fatalf("the v3 confidence section was dropped: %+v", f.Extra)
	}
}

func fmtList(l []string) string {
	var b bytes.Buffer
	for i, s := range l {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}
