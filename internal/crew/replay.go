package crew

import (
	"fmt"

	"github.com/xct-dev/xct/lctl"
)

// Replay rebuilds a crew run's fact store and handoff state from its
// chain's events, for an orchestrator that resumes the run: fact_added and
// fact_modified go through the store's own Add and Update (so a chain the
// crew's rules would not have written is an error, naming the event), a
// crew agent's step_start is BeginStep (a hop when the agent changes), and
// a handoff event is an accepted handoff. Other events are not the crew's.
func (c *Crew) Replay(events []lctl.Event) (*FactStore, *HandoffState, error) {
	store, st := NewFactStore(c), c.NewHandoffState()
	for i := range events {
		e := &events[i]
		d := e.DataMap()
		switch e.Type {
		case lctl.TypeStepStart:
			if c.Agent(e.Agent) != nil {
				store.BeginStep(e.Agent)
			}
		case lctl.TypeFactAdded, lctl.TypeFactModified:
			in, err := factInputOf(d)
			if err != nil {
				return nil, nil, fmt.Errorf("replay crew %s: event %d (%s): %w", c.Name, e.Seq, e.Type, err)
			}
			var sig *Signal
			if e.Type == lctl.TypeFactAdded {
				_, sig = store.Add(e.Agent, in)
			} else {
				_, sig = store.Update(e.Agent, in)
			}
			if sig != nil {
				return nil, nil, fmt.Errorf("replay crew %s: event %d (%s): %s", c.Name, e.Seq, e.Type, sig.Message)
			}
		case lctl.TypeHandoff:
			from, _ := d["from"].(string)
			to, _ := d["to"].(string)
			if from != st.Current || c.Agent(to) == nil {
				return nil, nil, fmt.Errorf("replay crew %s: event %d: handoff %s -> %s does not follow (in control: %s)", c.Name, e.Seq, from, to, st.Current)
			}
			st.Accept(to)
		}
	}
	return store, st, nil
}

// factInputOf reads a fact event's data back into what was proposed.
func factInputOf(d map[string]any) (FactInput, error) {
	in := FactInput{Fields: map[string]any{}}
	for k, v := range d {
		switch k {
		case "id":
			in.ID, _ = v.(string)
		case "text":
			in.Text, _ = v.(string)
		case "source":
			in.Source, _ = v.(string)
		case "reason":
			in.Reason, _ = v.(string)
		case "confidence":
			f, ok := v.(float64)
			if !ok {
				return in, fmt.Errorf("confidence is not a number")
			}
			in.Confidence = &f
		case "tags":
			list, ok := v.([]any)
			if !ok {
				return in, fmt.Errorf("tags is not a list")
			}
			for _, t := range list {
				s, ok := t.(string)
				if !ok {
					return in, fmt.Errorf("a tag is not a string")
				}
				in.Tags = append(in.Tags, s)
			}
		case "consensus":
			// Derived from the assessments: recomputed, not read.
		default:
			in.Fields[k] = v
		}
	}
	return in, nil
}
