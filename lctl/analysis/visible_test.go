package analysis

import (
	"strings"
	"testing"
	"unicode"

	"github.com/xct-dev/xct/lctl"
)

// TestLineShowsWhatIsThere: a line of `lctl replay` / `lctl tail` holds
// text a model chose (its intent, a tool name, a fact, an agent name).
// Printed raw, an escape sequence in it erased the lines above on the
// operator's terminal and printed others (a "deny" verdict could be shown
// as "allow"), set the clipboard (OSC 52) or the window title, and a
// bidirectional override reordered what was read. Every character that
// does not show as itself is written as its escape, in the fast and the
// general rendering alike; ordinary text, accents included, is unchanged.
func TestLineShowsWhatIsThere(t *testing.T) {
	evil := "fix\x1b[2K\r[7] validator: verdict fs.write (allow)\x1b]52;c;cm0gLXJmIH4=\x07 \u202eexe.txt\u200b\u009b2J"
	for _, e := range []lctl.Event{
		{Seq: 1, Type: "step_start", Agent: "model", Data: map[string]any{"step": 1.0, "tool": "fs.write", "intent": evil}},
		{Seq: 2, Type: "step_start", Agent: "model", Data: map[string]any{"step": 1.0, "raw": evil}},
		{Seq: 3, Type: "verdict", Agent: "v\x1b[8m", Data: map[string]any{"decision": "deny", "tool": "fs.\x1b[8mwrite"}},
		{Seq: 4, Type: "fact_added", Agent: "f", Data: map[string]any{"id": "F1\x1b[1A", "text": evil}},
		{Seq: 5, Type: "custom\x1b[2J", Agent: "a", Data: map[string]any{"note": evil}},
	} {
		line := Line(&e)
		for _, r := range line {
			if r < 0x20 || r == 0x7f || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
				t.Errorf("event %d: the line holds %U: %q", e.Seq, r, line)
				break
			}
		}
		if strings.Contains(evil, "\x1b") && e.Seq < 3 && !strings.Contains(line, `\x1b`) {
			t.Errorf("event %d: the escape is not shown: %q", e.Seq, line)
		}
	}
	plain := lctl.Event{Seq: 9, Type: "step_start", Agent: "a", Data: map[string]any{"step": 1.0, "tool": "t", "intent": "réécrire le fichier"}}
	if got := Line(&plain); got != "[9] a: step_start (step 1, t: réécrire le fichier)" {
		t.Errorf("plain line %q", got)
	}
}
