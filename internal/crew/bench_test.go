package crew

import (
	"fmt"
	"testing"

	"github.com/xct-dev/xct/lctl"
	"github.com/xct-dev/xct/lctl/lctltest"
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

// BenchmarkCrewCheckpoint is the orchestrator's cost of a crew checkpoint
// (crewCheckpoint: Session.Checkpoint, the state hash and the facts'
// snapshot) deep into a long run: the session's state has applied n events
// of a generated multi-agent workflow; each op applies the next 100 events
// (--crew-checkpoint-every's default) and records the checkpoint. v2 is
// what the session writes (the state hash kept up to date); v1 is what it
// wrote before session 5 (the whole state hashed each time). Flat ns/op
// across n is linear in the run.
func BenchmarkCrewCheckpoint(b *testing.B) {
	const every = 100
	const extra = every * 300 // -benchtime=300x runs without a rebuild
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, version := range []int{1, 2} {
			b.Run(fmt.Sprintf("v%d/events=%d", version, n), func(b *testing.B) {
				var more []lctl.Event
				var s *lctl.State
				build := func() {
					s, more = lctl.NewState(chainID), more[:0]
					err := lctltest.EachWorkflowEvent(chainID, n+extra, lctltest.WorkflowOptions{CheckpointEvery: -1}, func(e *lctl.Event) error {
						if e.Seq <= uint64(n) {
							s.Apply(e)
						} else {
							more = append(more, *e)
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				build()
				next := 0
				checkpoint := func() {
					if version == 1 {
						if _, err := s.HashV1(); err != nil {
							b.Fatal(err)
						}
						_, _ = checkpointFacts(s)
						return
					}
					if _, err := checkpointOf(chainID, s); err != nil {
						b.Fatal(err)
					}
				}
				checkpoint() // the run's first checkpoint
				for b.Loop() {
					if next+every > len(more) {
						b.StopTimer()
						build()
						checkpoint()
						next = 0
						b.StartTimer()
					}
					for i := next; i < next+every; i++ {
						s.Apply(&more[i])
					}
					next += every
					checkpoint()
				}
			})
		}
	}
}

// checkpointFacts is the facts' part of checkpointOf.
func checkpointFacts(s *lctl.State) (map[string]FactSnapshot, error) {
	out := make(map[string]FactSnapshot, len(s.Facts))
	for id, f := range s.Facts {
		out[id] = FactSnapshot{Text: f.Text, Confidence: f.Confidence}
	}
	return out, nil
}
