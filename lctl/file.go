package lctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// File is an LCTL v4.0 chain file: `lctl: "4.0"`, the chain's id, its events
// and optionally materialized state.
type File struct {
	LCTL   string         `json:"lctl"`
	Chain  ChainRef       `json:"chain"`
	Events []Event        `json:"events"`
	State  map[string]any `json:"state,omitempty"`
}

// ChainRef identifies a chain in a file.
type ChainRef struct {
	ID string `json:"id"`
}

// Format is a chain file encoding.
type Format int

// Supported chain file encodings.
const (
	FormatJSON Format = iota
	FormatYAML
)

// FormatForPath picks the encoding from a file name: .yaml and .yml are YAML,
// everything else JSON.
func FormatForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatYAML
	}
	return FormatJSON
}

// NewFile wraps a chain's events in the file format.
func NewFile(chainID string, events []Event) *File {
	return &File{LCTL: Version, Chain: ChainRef{ID: chainID}, Events: events}
}

// Encode writes f in the given format. JSON is indented for people; hashes
// do not depend on layout.
func (f *File) Encode(w io.Writer, format Format) error {
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode chain: %w", err)
	}
	if format == FormatJSON {
		raw = append(raw, '\n')
		_, err = w.Write(raw)
		return err
	}
	// YAML goes through the JSON form so both encodings carry the same
	// fields and values.
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return fmt.Errorf("encode chain: %w", err)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(generic); err != nil {
		return fmt.Errorf("encode chain as yaml: %w", err)
	}
	return enc.Close()
}

// MaxFileBytes bounds the size of a chain file read by DecodeFile.
const MaxFileBytes = 1 << 30

// DecodeFile reads a chain file. Unknown event types are kept. The file must
// say `lctl: "4.0"` (or 4.0 as a number) and have a chain id and events;
// anything else is an error naming what is wrong.
func DecodeFile(r io.Reader, format Format) (*File, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read chain: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return nil, fmt.Errorf("read chain: file is larger than %d bytes", MaxFileBytes)
	}
	if format == FormatYAML {
		raw, err = yamlToJSON(raw)
		if err != nil {
			return nil, err
		}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("parse chain: %w", describeJSONError(raw, err))
	}
	var f File
	if v, ok := top["lctl"]; ok {
		var s any
		_ = json.Unmarshal(v, &s)
		switch x := s.(type) {
		case string:
			f.LCTL = x
		case float64:
			f.LCTL = fmt.Sprintf("%.1f", x)
		}
	}
	if f.LCTL != Version {
		return nil, fmt.Errorf("parse chain: lctl version is %q, want %q", f.LCTL, Version)
	}
	if err := json.Unmarshal(top["chain"], &f.Chain); err != nil || f.Chain.ID == "" {
		return nil, errors.New("parse chain: missing chain.id")
	}
	if _, ok := top["events"]; !ok {
		return nil, errors.New("parse chain: missing events")
	}
	var events []json.RawMessage
	if err := json.Unmarshal(top["events"], &events); err != nil {
		return nil, fmt.Errorf("parse chain: events must be a list: %w", err)
	}
	f.Events = make([]Event, 0, len(events))
	for i, rawEvent := range events {
		e, err := decodeEvent(rawEvent)
		if err != nil {
			return nil, fmt.Errorf("parse chain: event at position %d: %w", i+1, err)
		}
		f.Events = append(f.Events, e)
	}
	if s, ok := top["state"]; ok {
		if err := json.Unmarshal(s, &f.State); err != nil {
			return nil, fmt.Errorf("parse chain: state must be an object: %w", err)
		}
	}
	return &f, nil
}

// DecodeEvent parses one event as stored on the stream.
func DecodeEvent(raw []byte) (Event, error) { return decodeEvent(raw) }

func decodeEvent(raw []byte) (Event, error) {
	var w struct {
		ChainID   string          `json:"chain_id"`
		Seq       *float64        `json:"seq"`
		Type      string          `json:"type"`
		Timestamp json.RawMessage `json:"timestamp"`
		Agent     string          `json:"agent"`
		Data      json.RawMessage `json:"data"`
		PrevHash  string          `json:"prev_hash"`
		Hash      string          `json:"hash"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Event{}, err
	}
	if w.Seq == nil {
		return Event{}, errors.New("missing seq")
	}
	if *w.Seq < 1 || *w.Seq != float64(uint64(*w.Seq)) {
		return Event{}, fmt.Errorf("seq %v is not a positive integer", *w.Seq)
	}
	if w.Type == "" {
		return Event{}, fmt.Errorf("event %v: missing type", *w.Seq)
	}
	e := Event{ChainID: w.ChainID, Seq: uint64(*w.Seq), Type: w.Type, Agent: w.Agent, PrevHash: w.PrevHash, Hash: w.Hash}
	if len(w.Timestamp) > 0 && string(w.Timestamp) != "null" {
		if err := json.Unmarshal(w.Timestamp, &e.Timestamp); err != nil {
			return Event{}, fmt.Errorf("event %d: timestamp must be a string", e.Seq)
		}
	}
	if len(w.Data) > 0 && string(w.Data) != "null" {
		if err := json.Unmarshal(w.Data, &e.Data); err != nil {
			return Event{}, fmt.Errorf("event %d: data must be an object", e.Seq)
		}
	}
	return e, nil
}

func yamlToJSON(raw []byte) ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse chain: %w", err)
	}
	doc, err := jsonCompatible(doc)
	if err != nil {
		return nil, fmt.Errorf("parse chain: %w", err)
	}
	return json.Marshal(doc)
}

// jsonCompatible converts what the YAML decoder produces (maps with any key,
// timestamps) into values encoding/json accepts.
func jsonCompatible(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case time.Time:
		return FormatTime(x), nil
	default:
		return v, nil
	}
}

// describeJSONError adds the line and column to a JSON syntax error.
func describeJSONError(raw []byte, err error) error {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	line, col := lineCol(raw, se.Offset)
	if se.Offset >= int64(len(raw)) {
		return fmt.Errorf("line %d, column %d: the file is truncated: %w", line, col, err)
	}
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}

func lineCol(raw []byte, offset int64) (int, int) {
	if offset > int64(len(raw)) {
		offset = int64(len(raw))
	}
	before := raw[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}
