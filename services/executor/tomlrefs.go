package executor

import (
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
)

// parseTOML reads the TOML document b into the maps ([]any for arrays
// and arrays of tables, map[string]any for tables) a YAML document
// decodes to, so lefthook's TOML configuration is read as its YAML one
// is (lefthookRefs), with go-toml, a maintained parser of the whole TOML
// specification (a subset of our own would let a document lefthook reads
// name nothing here). A document it cannot read is not taken (ok false),
// and then names nothing.
func parseTOML(b []byte) (doc map[string]any, ok bool) {
	if !utf8.Valid(b) {
		return nil, false
	}
	if err := toml.Unmarshal(b, &doc); err != nil || doc == nil {
		return nil, false
	}
	return doc, true
}
