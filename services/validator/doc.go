// Package validator is XCT's validator service: it decides whether a
// proposed tool call may run, and never runs anything. Its default is deny.
//
// # The pipeline
//
// Validate judges one proposal in three steps; the first that refuses
// decides, and its reason is the verdict's only reason:
//
//  1. Catalog. The tool must be in the tool catalog (the XCT_TOOLS bucket the
//     executor publishes). Otherwise: DENY, code UNKNOWN_TOOL, reason
//     "builtin.catalog"; the message may suggest close tool names. Before the
//     catalog is loaded every proposal is denied with VALIDATOR_UNAVAILABLE.
//  2. Schema. The arguments must satisfy the tool's input_schema (JSON
//     Schema, draft 2020-12 unless it says otherwise, formats asserted, no
//     references outside the schema). Otherwise: DENY, code SCHEMA_INVALID,
//     reason "builtin.schema", details listing up to 8 violations as
//     {location (JSON pointer), message}. A tool whose schema is missing or
//     does not compile is refused outright (DENY, POLICY_DENIED,
//     "builtin.schema"): what cannot be checked does not run. Schemas are
//     compiled once per tool and schema text and recompiled when the catalog
//     changes them.
//  3. Policy. The Policy in force decides. An error from the policy, or a
//     decision other than allow, deny or needs approval, is a DENY with reason
//     "builtin.policy".
//
// A verdict always has a decision (never UNSPECIFIED), its reasons, the
// policy's version and the time it was made. When the decision is not
// allow, its error is the signal for the model: POLICY_DENIED with the
// messages of the deny rules (or the default-deny message), or
// APPROVAL_REQUIRED with the messages of the approval rules; details name
// the tool and the rule ids. Malformed requests (no proposal, no tool name)
// are the only gRPC errors: InvalidArgument.
//
// # Rules policies
//
// RulesPolicy is the policy shipped here. A rules file is YAML:
//
//	rules:
//	  - id: deny-shell              # required, unique: letters, digits, . _ : -
//	    effect: deny                # required: allow | deny | require_approval
//	    message: no shell access    # optional; shown in reasons and errors
//	    tools: ["shell.*"]          # optional: glob patterns on the tool name
//	    effects: [irreversible]     # optional: read | reversible | irreversible
//
// A rule matches a proposal when every selector it gives matches: tools
// when the tool's name matches at least one pattern, effects when the
// tool's effect class is one of those listed. A rule without selectors
// matches every proposal. In a pattern '*' matches any run of characters,
// dots included ("fs.*" matches "fs.read" and "fs.dir.list"), '?' matches
// one character, and everything else matches itself. A tool that declares
// no effect class (UNSPECIFIED) is matched as irreversible.
//
// Every rule is evaluated; order does not change the decision, only the
// order of the reasons (file order). Conflicts resolve by strength: if any
// matching rule denies, the proposal is denied; otherwise if any requires
// approval, it needs approval; otherwise if any allows, it is allowed. If
// no rule matches it is denied, with reason "default-deny". The verdict
// lists every matching rule, whichever won.
//
// Decoding is strict: unknown fields, duplicate keys, unknown effect
// values, empty selector lists, missing or duplicate ids, the reserved ids
// ("default-deny", "builtin.*") and more than one YAML document are
// errors, each reported as "file:line: problem". A policy's version is
// "sha256:" followed by the hex SHA-256 of its file content.
//
// Without a policy file the built-in DefaultPolicyYAML applies: read and
// reversible tools are allowed, irreversible (and unspecified) ones require
// approval. Its version is the hash of that text.
//
// # Other policies
//
// Policy is the extension point. Another engine (CEL conditions, budgets,
// approvals) implements Policy and is installed with Service.SetPolicy,
// which swaps it atomically; the pipeline's catalog and schema checks stay
// in front of it.
package validator
