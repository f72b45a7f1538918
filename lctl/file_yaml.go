package lctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlNodeBudget bounds the nodes a YAML file may expand to through
// aliases, so a small file cannot make the reader build an enormous
// document: a few times the nodes the text itself can hold.
func yamlNodeBudget(size int) int { return 4*size + 10_000 }

// splitYAML reads a YAML chain file into the same pieces as splitJSON. It
// works on the node tree rather than decoding into Go values so that a
// timestamp keeps the exact text it was written with (it is hashed as
// text), and so errors can name the line of an event.
func splitYAML(raw []byte) (*rawDoc, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	if root.Kind == 0 {
		return nil, errors.New("the file is empty")
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) > 0 {
		top = top.Content[0]
	}
	top = resolveAlias(top)
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: a chain file is a mapping (lctl, chain, events), found %s", top.Line, yamlKind(top))
	}
	d := &rawDoc{top: map[string]json.RawMessage{}}
	budget := yamlNodeBudget(len(raw))
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: top-level keys must be strings", k.Line)
		}
		key := k.Value
		if _, dup := d.top[key]; dup || (key == "events" && d.hasEvents) {
			return nil, fmt.Errorf("line %d: key %q appears twice", k.Line, key)
		}
		d.keys = append(d.keys, key)
		if key != "events" {
			g, err := yamlValue(v, &budget, 0)
			if err != nil {
				return nil, err
			}
			raw, err := json.Marshal(g)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", v.Line, err)
			}
			d.top[key] = raw
			continue
		}
		d.hasEvents = true
		v = resolveAlias(v)
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			return nil, fmt.Errorf("line %d: events must be a list, found null", v.Line)
		}
		if v.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("line %d: events must be a list, found %s", v.Line, yamlKind(v))
		}
		for j, item := range v.Content {
			g, err := yamlValue(item, &budget, 0)
			if err != nil {
				return nil, fmt.Errorf("line %d: event at position %d: %w", item.Line, j+1, err)
			}
			raw, err := json.Marshal(g)
			if err != nil {
				return nil, fmt.Errorf("line %d: event at position %d: %w", item.Line, j+1, err)
			}
			d.events = append(d.events, raw)
			d.eventLines = append(d.eventLines, item.Line)
		}
	}
	return d, nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar (" + strings.TrimPrefix(n.ShortTag(), "!!") + ")"
	}
	return "nothing"
}

// yamlValue converts a YAML node into JSON values: maps, lists, strings,
// float64, bool and nil. Timestamps stay the text they were written as.
func yamlValue(n *yaml.Node, budget *int, depth int) (any, error) {
	*budget--
	if *budget < 0 {
		return nil, errors.New("the document expands to too many nodes (aliases)")
	}
	if depth > 10_000 {
		return nil, fmt.Errorf("line %d: nested too deeply", n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unknown alias", n.Line)
		}
		return yamlValue(n.Alias, budget, depth+1)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlValue(n.Content[0], budget, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c, budget, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolveAlias(n.Content[i]), n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: mapping keys must be scalars", k.Line)
			}
			if k.Value == "<<" && k.ShortTag() == "!!merge" {
				if err := mergeYAML(out, v, budget, depth); err != nil {
					return nil, err
				}
				continue
			}
			val, err := yamlValue(v, budget, depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	case yaml.ScalarNode:
		return yamlScalar(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// mergeYAML applies a merge key (<<: *base): keys already set win.
func mergeYAML(out map[string]any, v *yaml.Node, budget *int, depth int) error {
	v = resolveAlias(v)
	var sources []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		sources = []*yaml.Node{v}
	case yaml.SequenceNode:
		sources = v.Content
	default:
		return fmt.Errorf("line %d: a merge key needs a mapping", v.Line)
	}
	for _, src := range sources {
		m, err := yamlValue(src, budget, depth+1)
		if err != nil {
			return err
		}
		mm, ok := m.(map[string]any)
		if !ok {
			return fmt.Errorf("line %d: a merge key needs a mapping", src.Line)
		}
		for k, x := range mm {
			if _, set := out[k]; !set {
				out[k] = x
			}
		}
	}
	return nil
}

func yamlScalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return float64(i), nil
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			return float64(u), nil
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: integer %s: %w", n.Line, n.Value, err)
		}
		return f, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		return f, nil
	}
	// Strings, timestamps (kept as written), binary and custom tags.
	return n.Value, nil
}

// encodeYAML writes the file as YAML with the spec's key order. Small
// mappings and lists of scalars are written inline, as the spec's examples
// are.
func (f *File) encodeYAML(w io.Writer) error {
	version := f.LCTL
	if version == "" {
		version = Version
	}
	doc := mapping()
	addPair(doc, "lctl", strNode(version))
	chain := mapping()
	addPair(chain, "id", strNode(f.Chain.ID))
	addPair(doc, "chain", chain)
	events := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i := range f.Events {
		n, err := eventYAML(&f.Events[i])
		if err != nil {
			return err
		}
		events.Content = append(events.Content, n)
	}
	addPair(doc, "events", events)
	if f.State != nil {
		n, err := yamlNode(f.State, false)
		if err != nil {
			return fmt.Errorf("state: %w", err)
		}
		addPair(doc, "state", n)
	}
	for _, k := range sortedKeys(f.Extra) {
		n, err := yamlNode(f.Extra[k], false)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		addPair(doc, k, n)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

func eventYAML(e *Event) (*yaml.Node, error) {
	n := mapping()
	addPair(n, "seq", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(e.Seq, 10)})
	addPair(n, "type", strNode(e.Type))
	addPair(n, "timestamp", strNode(e.Timestamp))
	addPair(n, "agent", strNode(e.Agent))
	data, err := yamlNode(dataOrEmpty(e.Data), false)
	if err != nil {
		return nil, fmt.Errorf("event %d data: %w", e.Seq, err)
	}
	addPair(n, "data", data)
	for _, kv := range [][2]string{{"chain_id", e.ChainID}, {"prev_hash", e.PrevHash}, {"hash", e.Hash}} {
		if kv[1] != "" {
			addPair(n, kv[0], strNode(kv[1]))
		}
	}
	for _, k := range sortedKeys(e.Extra) {
		x, err := yamlNode(e.Extra[k], false)
		if err != nil {
			return nil, fmt.Errorf("event %d %s: %w", e.Seq, k, err)
		}
		addPair(n, k, x)
	}
	return n, nil
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func addPair(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}

// strNode is a string scalar; the encoder quotes it when its plain form
// would read back as something else (a number, a bool, a date, null).
func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// inlineWidth bounds the text of a mapping or list written inline.
const inlineWidth = 72

// yamlNode converts a JSON value into a YAML node.
func yamlNode(v any, inFlow bool) (*yaml.Node, error) {
	switch x := v.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}, nil
	case string:
		n := strNode(x)
		if strings.Contains(x, "\n") && !inFlow {
			n.Style = yaml.LiteralStyle
		}
		return n, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
		if x == math.Trunc(x) && math.Abs(x) < maxExactInt {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(x), 10)}, nil
		}
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}, nil
	case map[string]any:
		n := mapping()
		flow := inFlow || isSmallScalarMap(x)
		if flow {
			n.Style = yaml.FlowStyle
		}
		for _, k := range sortedKeys(x) {
			c, err := yamlNode(x[k], flow)
			if err != nil {
				return nil, err
			}
			addPair(n, k, c)
		}
		return n, nil
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		flow := inFlow || isSmallScalarList(x)
		if flow {
			n.Style = yaml.FlowStyle
		}
		for _, e := range x {
			c, err := yamlNode(e, flow)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	}
	// Any other Go value: through its JSON form.
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var g any
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, err
	}
	return yamlNode(g, inFlow)
}

func isScalar(v any) bool {
	switch x := v.(type) {
	case nil, bool, float64:
		return true
	case string:
		return !strings.Contains(x, "\n")
	}
	return false
}

func isSmallScalarMap(m map[string]any) bool {
	if len(m) == 0 {
		return true
	}
	width := 0
	for k, v := range m {
		if !isScalar(v) {
			return false
		}
		width += len(k) + 4 + scalarWidth(v)
	}
	return len(m) <= 4 && width <= inlineWidth
}

func isSmallScalarList(l []any) bool {
	width := 0
	for _, v := range l {
		if !isScalar(v) {
			return false
		}
		width += 2 + scalarWidth(v)
	}
	return width <= inlineWidth
}

func scalarWidth(v any) int {
	if s, ok := v.(string); ok {
		return len(s) + 2
	}
	return 8
}
