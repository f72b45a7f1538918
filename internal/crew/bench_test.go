package crew

import (
	"testing"
)

// BenchmarkSessionStep is the session's cost of one step of the loop on
// the spec's scenario chain: a session rebuilt from the chain (a resume),
// then per step Plan, CrewContext and the Observe of every event.
func BenchmarkSessionStep(b *testing.B) {
	l := playSecurityReview(b)
	c := l.sess.crew
	b.Run("resume", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewSession(c, chainID, l.events, SessionOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(l.events)), "events")
	})
	b.Run("observe", func(b *testing.B) {
		for b.Loop() {
			s, _ := NewSession(c, chainID, nil, SessionOptions{})
			for i := range l.events {
				if err := s.Observe(&l.events[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(l.events)), "events")
	})
	b.Run("plan+context", func(b *testing.B) {
		s, _ := NewSession(c, chainID, l.events, SessionOptions{})
		args := map[string]any{"path": "UserController.py", "content": "x"}
		for b.Loop() {
			_ = s.Plan()
			_ = s.CrewContext("fs.write", args, "fix F1")
		}
	})
	b.Run("checkpoint", func(b *testing.B) {
		s, _ := NewSession(c, chainID, l.events, SessionOptions{CheckpointEvery: 1})
		for b.Loop() {
			if _, err := s.Checkpoint(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
