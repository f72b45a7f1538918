// Package validator is XCT's validator service: it decides whether a
// proposed tool call may run, and never runs anything. Its default is deny.
// It is the one place where a team writes down what an agent may do:
// enforceable (every proposal passes through it), explainable (every
// verdict names the rules behind it) and auditable (every verdict carries
// the content hash of the policy that made it, and lands on the run's
// chain). docs/policy.md is the user's guide; this comment is the
// reference.
//
// # The pipeline
//
// Validate judges one proposal; the first step that refuses decides:
//
//  1. Catalog. The tool must be in the tool catalog (the XCT_TOOLS bucket the
//     executor publishes). Otherwise: DENY, code UNKNOWN_TOOL, reason
//     "builtin.catalog"; the message may suggest close tool names. Before the
//     catalog is loaded every proposal is denied with VALIDATOR_UNAVAILABLE.
//     A system tool ("xct." names) is denied the same way unless the request
//     is a system step (ValidateRequest.system_step, a rollback's undo).
//  2. Schema. Arguments nested deeper than wire.MaxDepth are denied with
//     SCHEMA_INVALID. The arguments must satisfy the tool's input_schema (JSON
//     Schema, draft 2020-12 unless it says otherwise, formats asserted, no
//     references outside the schema). Otherwise: DENY, code SCHEMA_INVALID,
//     reason "builtin.schema", details listing up to 8 violations as
//     {location (JSON pointer), message}. A tool whose schema is missing or
//     does not compile is refused outright (DENY, POLICY_DENIED,
//     "builtin.schema"): what cannot be checked does not run.
//  3. Budgets. A run budget of the policy that is used up denies with
//     BUDGET_EXCEEDED, reason "builtin.budget" (see Budgets).
//  4. Rules. Every rule is matched; the strongest effect wins (see Rules).
//  5. Confidence. A proposal that carries a confidence is gated by the LCTL
//     thresholds, reason "builtin.confidence" (see Confidence).
//  6. Rate limits. A step that would be allowed (or would need approval)
//     but exceeds a rate limit is denied with RATE_LIMITED, reason
//     "builtin.rate_limit". Allowed steps are counted.
//  7. Approval. A step that needs approval and whose exact step id holds a
//     human's decision in the approvals bucket gets that decision (see
//     Approvals).
//
// Then every shadow-mode policy file judges the proposal the same way
// (steps 3 to 6) and its would-have-been verdict is added to
// Verdict.shadow; it is never enforced.
//
// An allow answered to one of XCT's services is signed (binding.go): a
// VerdictGrant naming the run, step, step id, tool, the digest of the tool's
// descriptor it was judged by (verdict.ToolDigest) and canonical arguments
// digest, Ed25519-signed with the validator's key, which the executor
// verifies before it acts. Other callers get the decision unsigned.
//
// A verdict always has a decision (never UNSPECIFIED), every matching rule
// as a reason (id and message, in evaluation order), the policy's version
// and the time it was made. When the decision is not allow, its error is
// the signal for the model (POLICY_DENIED, APPROVAL_REQUIRED,
// BUDGET_EXCEEDED, RATE_LIMITED, APPROVAL_DENIED or APPROVAL_EXPIRED, with
// details naming the tool and the rule ids). Ends_run is set when a budget
// that cannot recover refused the step; approval_ttl when the step needs
// approval. An error from a policy, a decision it does not know, or a
// condition that fails to evaluate is a deny: the validator never fails
// open. Malformed requests (no proposal, no tool name) are the only gRPC
// errors of Validate: InvalidArgument.
//
// # Policy files
//
// A policy is one or more YAML files (Config.PolicyFile, the -policy flag,
// repeatable). Every key but rules is optional:
//
//	mode: enforce            # or shadow: verdicts recorded, never enforced
//	approval_ttl: 1h         # how long an approval stays valid (1s..720h)
//	confidence: {proceed: 0.80, warn: 0.60, verify: 0.40}
//	budgets:                 # per run; absent or 0 means no limit
//	  max_steps: 50
//	  max_wall_time: 30m
//	  max_tokens: 200000
//	  max_cost_usd: 5
//	  max_consecutive_errors: 5
//	prices:                  # US dollars per 1000 tokens, for max_cost_usd
//	  gpt-4o-mini: {input_per_1k: 0.00015, output_per_1k: 0.0006}
//	rate_limits:
//	  - {tool: "http.*", per_run: 10/1m, global: 100/1m}
//	rules:
//	  - id: no-deletes               # required, unique: letters, digits, . _ : -
//	    effect: deny                 # required: allow | deny | require_approval
//	    tools: ["fs.delete"]         # optional: glob patterns on the tool name
//	    message: deletes are not allowed
//	  - id: config-writes-need-approval
//	    effect: require_approval
//	    tools: ["fs.write"]
//	    effects: [reversible]        # optional: read | reversible | irreversible
//	    when: 'args.path.startsWith("config/")'   # optional CEL condition
//	    message: writes under config/ need a human
//
// Decoding is strict: unknown fields, duplicate keys, values of the wrong
// kind, durations without a unit, empty selector lists, missing or
// duplicate ids, the reserved ids ("default-deny", "approval",
// "builtin.*"), conditions that do not parse or type-check, and more than
// one YAML document are errors, each reported as "file:line: problem" (the
// rule's id included), all of them at once. A file's version is "sha256:"
// followed by the hex SHA-256 of its content; see PolicySet for several.
//
// Without a policy file the built-in DefaultPolicyYAML applies: read and
// reversible tools are allowed, irreversible (and unspecified) ones require
// approval. Its version is the hash of that text.
//
// # Rules
//
// A rule matches a proposal when every selector it gives takes the tool in
// and its condition holds: tools when the tool's name matches at least one
// pattern, effects when the tool's effect class is one of those listed,
// when when the CEL expression is true. A rule without selectors or
// condition matches every proposal. In a pattern '*' matches any run of
// characters, dots included ("fs.*" matches "fs.read" and "fs.dir.list"),
// '?' matches one character, and everything else matches itself. A tool
// that declares no effect class is matched as irreversible.
//
// Every rule is evaluated; file order only orders the reasons. Conflicts
// resolve by strength: if any matching rule denies, the proposal is
// denied; otherwise if any requires approval, it needs approval; otherwise
// if any allows, it is allowed. If no rule matches it is denied, with
// reason "default-deny". A condition that fails when evaluated (a missing
// argument, a type mismatch, the cost limit) makes its rule deny, whatever
// the rule's effect, with a reason saying why.
//
// # Conditions
//
// A condition is a CEL expression (cel.dev/cel-go: the standard library,
// the strings extension, optional values) that must be a bool. It is
// compiled and type-checked when the policy loads, and evaluated per
// proposal with these variables:
//
//	tool                   string              the proposed tool's name
//	args                   map(string, dyn)    the arguments (JSON: numbers are doubles)
//	goal                   string              what the model wants the step to achieve
//	confidence             optional(double)    the model's confidence, when it gave one
//	effect                 string              "read", "reversible" or "irreversible"
//	idempotent             bool                the tool declares it is idempotent
//	now                    timestamp           the time of the evaluation
//	run.id                 string              the run id
//	run.principal          string              who started the run
//	run.roles              list(string)        the principal's roles
//	run.labels             map(string, string) the run's labels
//	run.step               int                 this step's number
//	run.steps_used         int                 steps proposed so far, this one included
//	run.consecutive_errors int                 error responses in a row before this step
//	run.input_tokens       int                 model tokens used so far (in, out, both)
//	run.output_tokens      int
//	run.tokens             int
//	run.cost_usd           double              those tokens at the run model's price (0 unpriced)
//	run.model              string              the run's model reference
//	run.elapsed            duration            the run's wall time so far
//	crew.name              string              a crew run's crew ("" otherwise; docs/crews.md)
//	crew.agent             string              the crew agent that proposes
//	crew.agent_type        string              its profile type (executor, analyzer, reviewer, ...)
//	crew.handed_by         string              the agent whose handoff gave it control ("" for the entry agent)
//	crew.handoff_path      list(string)        the agents that held control, in order, the entry first, it last
//
// Numbers compare across int and double (args.size > 10 works). An
// argument may be absent: guard it with has(args.x). Conditions that
// iterate (all, exists, map, filter) run under a cost limit.
//
// # Budgets
//
// A budget is used up when the amount used is greater than its maximum:
// steps_used > max_steps, elapsed > max_wall_time, input + output tokens >
// max_tokens, their cost > max_cost_usd. Each denies with BUDGET_EXCEEDED
// and ends the run (Verdict.ends_run). The cost is priced by the run's
// model: the exact reference ("openai:gpt-4o-mini"), else the name after
// the adapter prefix ("gpt-4o-mini"), else the adapter's "scripted:*", else "*"; a run that used tokens with
// an unpriced model is denied (POLICY_DENIED, ends_run) while a cost
// budget is set: its cost cannot be checked. Consecutive errors are used up
// when they reach max_consecutive_errors: the step is denied and the model
// is told to finish; if it proposes again, the run ends.
//
// # Confidence
//
// A proposal's confidence c is gated by the LCTL thresholds (spec part 3),
// configurable per policy: c >= proceed passes; warn <= c < proceed passes
// with a warning reason; verify <= c < warn needs approval (a human
// verifies); c < verify, or a value that is not a number in [0, 1], is
// denied. No confidence, no gate. Thresholds of 0 turn the gate off.
//
// # Crews
//
// A crew run's proposal carries a CrewContext (ValidateRequest.crew): a
// tool the crew file does not list for the proposing agent is denied
// first (TOOL_NOT_ALLOWED, reason "builtin.crew.tools"); the crew's system
// tools (xct.handoff, facts.*) are judged with their own descriptors;
// and the crew's confidence gate replaces the policy's, on the lowest of
// the proposal's confidence and the facts it relies on: warn allows with
// a reason, verify denies with VERIFICATION_REQUIRED naming the reviewer
// to hand to (an approval when there is none), below verify needs an
// approval. crew.go has the details.
//
// # Rate limits
//
// A rate limit applies to the tools its glob matches: per_run "N/DURATION"
// allows N allowed steps per sliding window in each run, per_principal
// across the runs of one principal, global across all runs. On NATS the calls are counted in the KV bucket XCT_RATE_LIMITS,
// shared by every replica, each count a compare-and-set (ratestore.go): a
// limit is the cluster's and outlives restarts, and a call whose count
// cannot be kept is denied (VALIDATOR_UNAVAILABLE). A step is counted
// once, when it is allowed; asking again about the same step id (on any
// replica) does not count it twice. Counts survive policy reloads.
//
// # Approvals
//
// A step that needs approval is paused by the orchestrator, which calls
// RequestApproval with the proposal and the tool's dry run (a preview).
// The approval is stored in the JetStream KV bucket XCT_APPROVALS under
// "<run_id>.<step_id>" as the protobuf JSON of an xctv1.Approval: bound to
// the step id, hence to the exact arguments; expiring after the policy's
// approval_ttl; naming the principal who started the run, who cannot
// decide it. DecideApproval records who decided, when and why (a reason is
// required to deny), with a compare-and-set on the entry's revision, so of
// two concurrent decisions exactly one wins. ListApprovals lists pending
// ones (all with all), marking those past their time EXPIRED; the pending
// ones are found by an index, "pending.<run_id>.<step_id>", written before
// an approval is opened and removed once it leaves pending (approvals.go).
// Validate,
// for a step that needs approval, reads its entry: APPROVED and unexpired
// allows it, adding reason {approval, "approved by X: why"}; DENIED denies
// it with APPROVAL_DENIED and the approver's reason; EXPIRED, or past its
// time, denies it with APPROVAL_EXPIRED; PENDING or absent leaves it
// NEEDS_APPROVAL. Approvals live in KV, so they survive a restart of any
// service. A validator built with NewWithCatalog has no approvals.
//
// # Several files, shadow mode, reloads
//
// The files in enforce mode act as one policy (PolicySet): their rules are
// evaluated together, and of the settings they give the strictest applies
// (a setting none gives keeps its default). Each file in shadow mode is
// evaluated on its own; when every file is in shadow mode the built-in
// default is enforced. With Config.PolicyReload set, the
// files are read again on that period; a change that compiles is installed
// atomically (validations in flight finish under the policy they started
// with), a file that is broken, missing or unreadable leaves the last good
// policy in force and is logged at Error level when the problem appears.
//
// # Offline tools
//
// Recheck re-judges a recorded chain against another policy (xct policy
// check); Lint reports rules that cannot change a decision, constant
// conditions and unknown tool names (xct policy lint).
//
// # Other policies
//
// Policy is the extension point. Another engine implements Policy and is
// installed with Service.SetPolicy, which swaps it atomically; the
// pipeline's catalog and schema checks stay in front of it, and its
// needs-approval decisions are resolved by the stored approvals.
package validator
