package executor

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The YAML library reports a value of the wrong kind as "cannot unmarshal
// !!str `64MiB` into int64": a line, a Go type and at most seven characters
// of the value, but not the setting. typeErrorText says which setting
// (found in the document's node tree by its line and value) and what it
// wants, in the configuration's words.
var yamlTypeError = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")

// typeErrorText rewrites one type error's message (its "line N: " already
// taken off); a message of another shape is returned as it is.
func typeErrorText(doc *yaml.Node, line int, msg string) string {
	g := yamlTypeError.FindStringSubmatch(msg)
	if g == nil {
		return msg
	}
	tag, shown, goType := g[1], g[2], g[3]
	n, path := nodeAt(doc, line, tag, shown)
	text := "want " + wantedKind(goType) + ", not " + kindOfTag(tag)
	if n != nil && n.Kind == yaml.ScalarNode {
		text += " `" + cutValue(n.Value) + "`"
	} else if n == nil && shown != "" {
		text += " `" + shown + "`"
	}
	if n == nil {
		return text
	}
	return pathString(path) + text
}

// wantedKind says a Go type of the configuration as its setting is written.
func wantedKind(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch goType {
	case "int", "int64", "int32", "uint", "uint64", "uint32":
		return "a whole number"
	case "float64", "float32":
		return "a number"
	case "time.Duration":
		return "a duration with a unit (300ms, 5s, 2m)"
	case "bool":
		return "true or false"
	case "string", "executor.Effect":
		return "a string"
	case "[]string":
		return "a list of strings"
	}
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "executor."):
		return "a mapping"
	}
	return goType
}

// kindOfTag names what was written, from its YAML tag.
func kindOfTag(tag string) string {
	switch tag {
	case "str":
		return "the string"
	case "int", "float":
		return "the number"
	case "bool":
		return "the boolean"
	case "null":
		return "null"
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "timestamp":
		return "the date"
	}
	return "!!" + tag
}

// cutValue shows a value whole up to 32 characters.
func cutValue(s string) string {
	if utf8.RuneCountInString(s) <= 32 {
		return s
	}
	r := []rune(s)
	return string(r[:29]) + "..."
}

// nodeAt finds the one value node on line whose tag is tag and whose value
// the message shows (whole, or its first seven bytes and "..."), and its
// path from the root (map keys and list indexes). Nothing when no node or
// more than one fits: the message then keeps only its line.
func nodeAt(doc *yaml.Node, line int, tag, shown string) (*yaml.Node, []any) {
	if doc == nil || len(doc.Content) == 0 {
		return nil, nil
	}
	fits := func(n *yaml.Node) bool {
		if n.Line != line || n.ShortTag() != "!!"+tag {
			return false
		}
		switch n.Kind {
		case yaml.SequenceNode, yaml.MappingNode:
			return true
		case yaml.ScalarNode:
			if head, ok := strings.CutSuffix(shown, "..."); ok && len(n.Value) > 10 {
				return strings.HasPrefix(n.Value, head)
			}
			return n.Value == shown
		}
		return false
	}
	var found *yaml.Node
	var foundPath []any
	count := 0
	var walk func(n *yaml.Node, path []any)
	walk = func(n *yaml.Node, path []any) {
		if fits(n) {
			count++
			found, foundPath = n, append([]any(nil), path...)
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], append(path, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, append(path, i))
			}
		}
	}
	walk(doc.Content[0], nil)
	if count != 1 {
		return nil, nil
	}
	return found, foundPath
}

// describeTypeError is typeErrorText for a "line N: message" line of the
// library's; other lines are returned as they are.
func describeTypeError(doc *yaml.Node, m string) string {
	var line int
	var rest string
	if _, err := fmt.Sscanf(m, "line %d:", &line); err != nil {
		return m
	}
	_, rest, _ = strings.Cut(m, ": ")
	return fmt.Sprintf("line %d: %s", line, typeErrorText(doc, line, rest))
}
