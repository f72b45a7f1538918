package executor

import xctv1 "github.com/xct-dev/xct/gen/xct/v1"

// Where a tool comes from and who said what it does (ToolDescriptor's
// source and effect_from), for `xct tools` and policy authors: a server's
// hint is untrusted, the configuration is the operator's word.
const (
	sourceBuiltin = "builtin"

	effectFromBuiltin = "builtin" // the executor's own tool
	effectFromConfig  = "config"  // the tools configuration overrode it
	effectFromServer  = "server"  // the tool server's descriptor, or MCP annotation hints
	effectFromDefault = "default" // nothing said: irreversible, not idempotent
)

// effectFrom says where a served tool's effect class and idempotency come
// from: the configuration's override when it has one, else what the
// server said (fromServer), else the fail-safe default.
func effectFrom(o ToolOverride, fromServer bool) string {
	switch {
	case o.Effect != "" || o.Idempotent != nil:
		return effectFromConfig
	case fromServer:
		return effectFromServer
	}
	return effectFromDefault
}

// withOrigin fills a built-in tool's origin (tools from servers set their
// own).
func withOrigin(d *xctv1.ToolDescriptor) {
	if d.GetSource() == "" {
		d.Source = sourceBuiltin
	}
	if d.GetEffectFrom() == "" {
		d.EffectFrom = effectFromBuiltin
	}
}
