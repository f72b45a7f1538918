package validator

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/xct-dev/xct/internal/wire"
)

// maxViolations bounds the schema violations reported for one proposal.
const maxViolations = 8

// schemaBase is the base URL of tool schemas. The .invalid domain cannot
// resolve, and the loader refuses every URL anyway.
const schemaBase = "https://tools.xct.invalid/"

// compiledSchema is one tool's compiled input schema, or why it would not
// compile. text is the schema it was compiled from.
type compiledSchema struct {
	text   string
	schema *jsonschema.Schema
	err    error
}

// schemaCache compiles each tool's input schema once. An entry is keyed by
// tool name and reused only while the catalog serves byte-identical schema
// text; a changed schema is compiled again and replaces the entry. Equal
// text is compared directly: the catalog hands out the same string until
// the descriptor changes, so the comparison is usually a pointer check, and
// it costs nothing per call, unlike hashing the text.
type schemaCache struct {
	mu      sync.RWMutex
	entries map[string]*compiledSchema
	printer *message.Printer
}

func newSchemaCache() *schemaCache {
	return &schemaCache{
		entries: map[string]*compiledSchema{},
		printer: message.NewPrinter(language.English),
	}
}

// get returns the compiled schema of tool for text, compiling it on first
// use. fresh reports whether this call compiled it, so a failure is logged
// once, not on every proposal.
func (c *schemaCache) get(tool, text string) (e *compiledSchema, fresh bool) {
	c.mu.RLock()
	e = c.entries[tool]
	c.mu.RUnlock()
	if e != nil && e.text == text {
		return e, false
	}
	// Compile outside the lock: two racing callers may both compile, which
	// is harmless, and nobody waits behind a slow schema.
	e = &compiledSchema{text: text}
	e.schema, e.err = compileSchema(tool, text)
	c.mu.Lock()
	c.entries[tool] = e
	c.mu.Unlock()
	return e, true
}

// refuseLoader loads nothing: a tool schema may only refer to itself and to
// the standard meta-schemas, never to files or the network.
type refuseLoader struct{}

func (refuseLoader) Load(string) (any, error) { return nil, errRemoteRef }

// compileSchema compiles a tool's input schema: draft 2020-12 unless the
// schema says otherwise, formats asserted, no external references.
func compileSchema(tool, text string) (*jsonschema.Schema, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errNoSchema
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("the input schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	loc := schemaBase + url.PathEscape(tool) + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("the input schema cannot be added: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("the input schema does not compile: %w", err)
	}
	return s, nil
}

// violation is one way the arguments miss their schema.
type violation struct {
	location string // JSON pointer into the arguments, "" for the whole object
	message  string
}

// violations lists the leaf errors of a validation failure, at most max,
// and how many more there were.
func (c *schemaCache) violations(err error, max int) (out []violation, more int) {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []violation{{message: err.Error()}}, 0
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, cause := range e.Causes {
				walk(cause)
			}
			return
		}
		if _, ok := e.ErrorKind.(*kind.Schema); ok {
			return
		}
		if len(out) >= max {
			more++
			return
		}
		out = append(out, violation{location: pointer(e.InstanceLocation), message: e.ErrorKind.LocalizedString(c.printer)})
	}
	walk(ve)
	if len(out) == 0 && more == 0 {
		out = append(out, violation{message: ve.Error()})
	}
	return out, more
}

// pointer renders an instance location as a JSON pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// schemaNameClash finds, in args, a member name the schema does not name
// but names in another spelling a tool's server may take for it ("PATH"
// where the schema names "path"): KeyClash's case for one member alone.
// A deny rule reads args.path, guarded by has(args.path) as the policy
// documentation advises, and the schema lets an undeclared "PATH" through
// (no additionalProperties: false, as many servers' schemas have it);
// a Go server decoding into a struct reads it as path. The walk follows
// the schema into nested objects and arrays through properties,
// patternProperties, additionalProperties and unevaluatedProperties
// schemas, items, references and the combinators (allOf, anyOf, oneOf,
// if/then/else, dependentSchemas). It returns the name given and the one the schema
// names.
func schemaNameClash(s *jsonschema.Schema, v any) (given, named string, found bool) {
	return nameClashIn([]*jsonschema.Schema{s}, v)
}

func nameClashIn(schemas []*jsonschema.Schema, v any) (given, named string, found bool) {
	if len(schemas) == 0 {
		return "", "", false
	}
	switch v := v.(type) {
	case map[string]any:
		all := reachable(schemas)
		for k, e := range v {
			declared := false
			for _, s := range all {
				if _, ok := s.Properties[k]; ok {
					declared = true
					break
				}
			}
			if !declared {
				if n, ok := namedAs(all, k); ok {
					return k, n, true
				}
			}
			if !container(e) {
				continue
			}
			if given, named, found = nameClashIn(memberSchemas(all, k), e); found {
				return given, named, true
			}
		}
	case []any:
		all := reachable(schemas)
		for i, e := range v {
			if !container(e) {
				continue
			}
			var sub []*jsonschema.Schema
			for _, s := range all {
				if i < len(s.PrefixItems) {
					sub = append(sub, s.PrefixItems[i])
				} else if s.Items2020 != nil {
					sub = append(sub, s.Items2020)
				}
				switch it := s.Items.(type) {
				case *jsonschema.Schema:
					sub = append(sub, it)
				case []*jsonschema.Schema:
					if i < len(it) {
						sub = append(sub, it[i])
					}
				}
			}
			if given, named, found = nameClashIn(sub, e); found {
				return given, named, true
			}
		}
	}
	return "", "", false
}

// memberSchemas are the schemas of all that apply to member k's value:
// its properties, the patternProperties whose pattern matches k, and, for
// a member neither names, additionalProperties and unevaluatedProperties
// when they are schemas. (A map of named entries, {"additionalProperties":
// {"properties": {"path": …}}}, names "path" in each entry: "PATH" there is
// the same clash as at the top.)
func memberSchemas(all []*jsonschema.Schema, k string) []*jsonschema.Schema {
	var sub []*jsonschema.Schema
	for _, s := range all {
		matched := false
		if p, ok := s.Properties[k]; ok {
			sub = append(sub, p)
			matched = true
		}
		for re, p := range s.PatternProperties {
			if re.MatchString(k) {
				sub = append(sub, p)
				matched = true
			}
		}
		if !matched {
			if p, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
				sub = append(sub, p)
			}
			if s.UnevaluatedProperties != nil {
				sub = append(sub, s.UnevaluatedProperties)
			}
		}
	}
	return sub
}

// maxReachable bounds the schemas one value is compared against (a schema
// of many combinators, or references that loop).
const maxReachable = 256

// container reports whether v is an object or an array: only those
// hold names.
func container(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

// reachable is schemas and every schema that applies to the same value
// through a reference or a combinator, each once.
func reachable(schemas []*jsonschema.Schema) []*jsonschema.Schema {
	if len(schemas) == 1 && !combined(schemas[0]) {
		return schemas // the usual case: nothing to follow, nothing to allocate
	}
	out := make([]*jsonschema.Schema, 0, len(schemas))
	var add func(s *jsonschema.Schema)
	add = func(s *jsonschema.Schema) {
		if s == nil || len(out) >= maxReachable || slices.Contains(out, s) {
			return
		}
		out = append(out, s)
		add(s.Ref)
		add(s.RecursiveRef)
		if s.DynamicRef != nil {
			add(s.DynamicRef.Ref)
		}
		for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
			for _, c := range list {
				add(c)
			}
		}
		add(s.If)
		add(s.Then)
		add(s.Else)
		for _, d := range s.DependentSchemas {
			add(d)
		}
	}
	for _, s := range schemas {
		add(s)
	}
	return out
}

// combined reports whether another schema applies to s's value through a
// reference or a combinator.
func combined(s *jsonschema.Schema) bool {
	return s.Ref != nil || s.RecursiveRef != nil || s.DynamicRef != nil ||
		len(s.AllOf)+len(s.AnyOf)+len(s.OneOf)+len(s.DependentSchemas) > 0 ||
		s.If != nil || s.Then != nil || s.Else != nil
}

// namedAs finds the name the schemas give member k in another spelling.
// Two ASCII names are one when they are equal but for case (NFKC and
// case folding make nothing else of ASCII, which has no format
// characters), compared without folding; otherwise k is folded once,
// however many names the schemas have.
func namedAs(schemas []*jsonschema.Schema, k string) (string, bool) {
	ascii := isASCII(k)
	key := ""
	for _, s := range schemas {
		for n := range s.Properties {
			if n == k {
				continue
			}
			if ascii && isASCII(n) {
				if strings.EqualFold(n, k) {
					return n, true
				}
				continue
			}
			if key == "" {
				key = wire.MemberKey(k)
			}
			if wire.MemberKey(n) == key {
				return n, true
			}
		}
	}
	return "", false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
