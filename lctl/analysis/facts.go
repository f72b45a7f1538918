package analysis

import (
	"github.com/xct-dev/xct/lctl"
)

// FactRecord is a fact as the chain's fact store holds it at some seq: its
// core fields, every other field its events gave it (severity, tags,
// anything), and who changed it when.
type FactRecord struct {
	ID         string   `json:"id"`
	Text       string   `json:"text"`
	Confidence *float64 `json:"confidence"`
	Source     string   `json:"source"`
	Tags       []string `json:"tags"`
	// Fields holds every data field of the fact's events (latest value
	// wins), the core ones included.
	Fields     map[string]any `json:"fields"`
	AddedBy    string         `json:"added_by"`
	AddedSeq   uint64         `json:"added_seq"`
	UpdatedBy  string         `json:"updated_by"`
	UpdatedSeq uint64         `json:"updated_seq"`
	// Changes counts the fact_added and fact_modified events of the fact.
	Changes int `json:"changes"`
	// Agents are every agent that added or changed the fact, in order.
	Agents []string `json:"agents"`
}

// FactStore builds the spec's query-based fact store from a chain: every
// fact as it stands after the events up to toSeq (0: all of them), in the
// order the facts first appeared. A fact_added for an existing id replaces
// its content; a fact_modified changes the fields it names.
func FactStore(events []lctl.Event, toSeq uint64) []*FactRecord {
	b := NewFactStoreBuilder()
	for i := range events {
		e := &events[i]
		if toSeq != 0 && e.Seq > toSeq {
			break
		}
		b.Add(e)
	}
	return b.Facts()
}

// FactStoreBuilder builds FactStore's result one event at a time, for a
// chain that is read as a stream.
type FactStoreBuilder struct {
	byID  map[string]*FactRecord
	order []*FactRecord
}

// NewFactStoreBuilder returns an empty fact store.
func NewFactStoreBuilder() *FactStoreBuilder {
	return &FactStoreBuilder{byID: map[string]*FactRecord{}}
}

// FactStoreData says whether Add reads the data of an event of type typ:
// a stream need not decode any other's (lctl.StreamOptions.Data).
func FactStoreData(typ string) bool {
	return typ == lctl.TypeFactAdded || typ == lctl.TypeFactModified
}

// Add applies the next event of the chain. It reads the data of the types
// FactStoreData names and of no other.
func (b *FactStoreBuilder) Add(e *lctl.Event) {
	if e.Type != lctl.TypeFactAdded && e.Type != lctl.TypeFactModified {
		return
	}
	id, _ := e.Str("id")
	if id == "" {
		return
	}
	f := b.byID[id]
	if f == nil {
		f = &FactRecord{ID: id, Fields: map[string]any{}, Tags: []string{}, AddedBy: e.Agent, AddedSeq: e.Seq}
		b.byID[id] = f
		b.order = append(b.order, f)
	} else if e.Type == lctl.TypeFactAdded {
		f.Fields = map[string]any{}
		f.Text, f.Confidence, f.Source, f.Tags = "", nil, "", []string{}
		f.AddedBy, f.AddedSeq = e.Agent, e.Seq
	}
	e.RangeData(func(k string, v any) { f.Fields[k] = v })
	if v, ok := e.Str("text"); ok {
		f.Text = v
	}
	if c, ok := numberAt(e, "confidence"); ok && c >= 0 && c <= 1 {
		f.Confidence = &c
	}
	if v, ok := e.Str("source"); ok {
		f.Source = v
	}
	if tags, ok := e.Get("tags").([]any); ok {
		f.Tags = []string{}
		for _, t := range tags {
			if s, ok := t.(string); ok {
				f.Tags = append(f.Tags, s)
			}
		}
	} else if tag, ok := e.Str("tag"); ok {
		f.Tags = []string{tag}
	}
	f.UpdatedBy, f.UpdatedSeq = e.Agent, e.Seq
	f.Changes++
	if !contains(f.Agents, e.Agent) {
		f.Agents = append(f.Agents, e.Agent)
	}
}

// Facts returns the facts in the order they first appeared.
func (b *FactStoreBuilder) Facts() []*FactRecord {
	if b.order == nil {
		return []*FactRecord{}
	}
	return b.order
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Clone returns a copy of the fact store that the builder's later events
// do not change (values in Fields are shared: events never change them).
func (b *FactStoreBuilder) Clone() *FactStoreBuilder {
	c := &FactStoreBuilder{byID: make(map[string]*FactRecord, len(b.byID)), order: make([]*FactRecord, 0, len(b.order))}
	for _, f := range b.order {
		nf := *f
		nf.Fields = make(map[string]any, len(f.Fields))
		for k, v := range f.Fields {
			nf.Fields[k] = v
		}
		nf.Tags = append([]string(nil), f.Tags...)
		if f.Tags != nil && nf.Tags == nil {
			nf.Tags = []string{}
		}
		nf.Agents = append([]string(nil), f.Agents...)
		if f.Confidence != nil {
			c := *f.Confidence
			nf.Confidence = &c
		}
		c.byID[nf.ID] = &nf
		c.order = append(c.order, &nf)
	}
	return c
}
