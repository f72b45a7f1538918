package lctl

import (
	"strings"
	"testing"
)

// unreadMembers splits StreamOptions.Unread's answer into one member
// (given twice) or two, and refuses more than two or an empty name.
func TestUnreadMembers(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"":               {"", ""},
		"intent":         {"intent", "intent"},
		"intent,step_id": {"intent", "step_id"},
		"step_id,intent": {"step_id", "intent"},
	} {
		a, b := unreadMembers(in)
		if [2]string{a, b} != want {
			t.Errorf("unreadMembers(%q) = %q, %q; want %q", in, a, b, want)
		}
	}
	for _, in := range []string{"a,b,c", ",b", "a,", ","} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "Unread") {
					t.Errorf("unreadMembers(%q): no panic (%v)", in, r)
				}
			}()
			unreadMembers(in)
		}()
	}
}

// With one member named unread, a member whose key is empty is read as
// any other: the second name, when none is given, is not "".
func TestUnreadOneMemberKeepsEmptyKey(t *testing.T) {
	t.Parallel()
	raw := `{"lctl": "4.1", "chain": {"id": "c"}, "events": [
{"seq": 1, "type": "step_start", "timestamp": "2026-01-01T00:00:00Z", "agent": "a", "data": {"": "empty key", "intent": "an intent long enough to be kept at length", "step": 1}},
{"seq": 2, "type": "step_start", "timestamp": "2026-01-01T00:00:01Z", "agent": "a", "data": {"": "empty key", "intent": "an intent long enough to be kept at length", "step": 2}}
]}`
	for _, unread := range []string{"intent", "intent,step_id"} {
		var got []string
		err := Stream(strings.NewReader(raw), StreamOptions{Fields: true, Data: func(string) bool { return true }, Unread: func(string) string { return unread }}, func(*StreamHeader) error { return nil }, func(e *StreamEvent) error {
			s, ok := e.Str("")
			if !ok {
				t.Errorf("Unread %q: seq %d has no member \"\"", unread, e.Seq)
			}
			got = append(got, s)
			if _, ok := e.Float("step"); !ok {
				t.Errorf("Unread %q: seq %d has no step", unread, e.Seq)
			}
			return nil
		})
		if err != nil || len(got) != 2 || got[0] != "empty key" || got[1] != "empty key" {
			t.Errorf("Unread %q: %q, %v", unread, got, err)
		}
	}
}
