package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xct-dev/xct/lctl/text"
)

// hostileSuffix erases the line, moves to its start and prints a forged
// verdict in red, sets the clipboard (OSC 52) and reverses what follows.
const hostileSuffix = "\x1b[2K\r\x1b[31m[9] validator: verdict fs.write (allow)\x1b[0m\x1b]52;c;cHduZWQ=\x07\u202e\nrun: done"

// hostile returns v with hostileSuffix after every string but the
// structure's own (seq, type, timestamps, hashes, the format's version).
func hostile(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = hostile(e, k)
		}
	case []any:
		for i, e := range x {
			x[i] = hostile(e, "")
		}
	case string:
		switch key {
		case "lctl", "type", "timestamp", "hash", "prev_hash", "evaluated_at", "expires_at":
			return x
		}
		return x + hostileSuffix
	}
	return v
}

// TestTextShowsWhatIsThere (session 14, attack14): every text command
// prints what a chain holds with its hidden characters escaped, as
// replay's and tail's event lines have since session 7 (modelattack). On
// main the replay recap printed the run's end message (the model's
// `done` message) as it was, diff the step goals (the model's) and the
// agents, stats, bottleneck, confidence, validate and verify the agents,
// their capabilities, models and error types: an escape sequence in any
// of them rewrote the operator's terminal (a forged line, the clipboard
// set) and a newline began a line of its own.
func TestTextShowsWhatIsThere(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(v1)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, e := range doc["events"].([]any) {
		ev := e.(map[string]any)
		delete(ev, "hash")
		delete(ev, "prev_hash")
		ev["agent"] = hostile(ev["agent"], "agent")
		ev["data"] = hostile(ev["data"], "")
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "hostile.lctl.json")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", file},
		{"replay", "--events", file},
		{"replay", "--to-seq", "6", file},
		{"diff", file, v2},
		{"diff", v1, file},
		{"stats", file},
		{"bottleneck", file},
		{"confidence", file},
		{"validate", "--contracts", contrac, file},
		{"verify", file},
		{"query", "SELECT *", file},
	} {
		_, stdout, stderr := run(t, nil, args...)
		for name, s := range map[string]string{"stdout": stdout, "stderr": stderr} {
			for i, line := range strings.Split(s, "\n") {
				if strings.HasPrefix(strings.TrimLeft(line, " "), "run: done") && strings.TrimSpace(line) == "run: done" {
					t.Errorf("lctl %s: %s line %d began at a newline of the chain's: %q", strings.Join(args, " "), name, i+1, line)
				}
				for j, r := range line {
					if r == utf8.RuneError || (text.Hidden(r) && r != '\t') {
						t.Errorf("lctl %s: %s line %d has %q at %d: %q", strings.Join(args, " "), name, i+1, r, j, line)
						break
					}
				}
			}
		}
	}
}
