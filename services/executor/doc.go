// Package executor is XCT's executor service: it runs one allowed step at a
// time with a tool from its catalog, and never decides whether a step should
// run (the validator does, the orchestrator asks). It acts only on a step
// that carries the validator's signed allow for exactly that step, verified
// with a key it trusts (binding.go); a verdict starts at most one attempt.
//
// # Tools
//
// Every tool declares a JSON Schema of its arguments (a closed object for
// the built-ins), an effect class, whether it is idempotent, a timeout and
// an output cap. Every call is bounded in time (the tool's timeout, else
// Config.DefaultTimeout) and in output (the tool's max_output_bytes, else
// Config.MaxOutputBytes, measured on the result's JSON).
//
//   - fs.read, fs.list (read), fs.write, fs.delete, fs.move (reversible):
//     confined to Config.Workspace through an os.Root, so no path, ".."
//     component, symbolic link or race leads out. A reversible tool stores
//     its Compensation (what it replaced, deleted or moved) before acting.
//     The changing tools refuse protected paths (DefaultProtectedPaths plus
//     the configuration's: .git, .xct, tool config files), compared after
//     cleaning, case folding and following links; fs.read refuses a file
//     with several hard links.
//   - http.request (irreversible, not idempotent): allowed hosts only, every
//     connection checked at dial time against private, loopback, link-local,
//     CGNAT, unique-local, IPv4-mapped and metadata addresses, redirects
//     re-checked and capped, bodies capped, no proxy from the environment.
//   - shell.exec: every program inside an OS sandbox (bubblewrap: only the
//     workspace writable, no network unless configured, its own PID
//     namespace, rlimits; every call refused if it cannot be set up, unless
//     the configuration says "sandbox: none", which is logged loudly); and,
//     as a second line, allowed programs only, by absolute path, argv
//     without a shell, option allow-lists per program (checked after "--"
//     too), path operands inside the workspace after following links, a
//     scrubbed environment. Its effect and idempotency are the program's.
//   - "<server>.<tool>": the tools of external ToolService servers.
//   - "mcp.<server>.<tool>": the tools of MCP servers (stdio, in the same
//     sandbox: the instance that lives between calls sees the workspace
//     read-only, and each call of a tool that may write runs in an
//     instance of its own, killed with its PID namespace before the call
//     returns; or streamable HTTP); the configuration says each tool's
//     effect and idempotency, a tool it does not name is irreversible and
//     not idempotent, and the server's annotations only narrow that.
//
// http.request, shell.exec and the external tools exist only when the tools
// configuration (-tools-config, see ToolsConfig) asks for them. A server
// that cannot be reached at Start is logged and its tools are not served.
//
// # Errors are data
//
// Failures are structured error signals in the step's Response
// (PERMISSION_DENIED, NOT_FOUND, INVALID_ARGUMENT, TIMEOUT, OUTPUT_TOO_LARGE,
// TOOL_FAILURE, UNKNOWN_TOOL, IN_DOUBT) with the LCTL taxonomy, never gRPC
// errors; a panicking or misbehaving tool is a TOOL_FAILURE and the executor
// keeps serving. A gRPC error means nothing was executed: a malformed
// request, an unusable record store, or a stopping executor. A tool that
// returned a result succeeded, whatever the result: one the executor
// cannot keep (over the tool's max_output_bytes, not JSON, nested past
// wire.MaxDepth) is replaced by {"result_not_kept": true, "reason", ...}
// (notKept), never turned into a failure a model would answer by running
// the step again.
//
// # At most once
//
// The step id is the idempotency key. Before acting the executor creates
// the step's StepRecord, state PENDING, in the JetStream KV bucket
// XCT_STEPS (create-if-absent, so two executors cannot both start it), with
// a deadline: the tool's timeout plus Config.StepGrace. A reversible tool
// stores its compensation in the object store XCT_STEP_BLOBS before its
// effect. After acting the executor records the outcome, SUCCEEDED or
// FAILED, with the response. Every change of a record is conditional on the
// revision read, so concurrent executors and resolvers cannot overwrite
// each other.
//
// The same step asked again returns the recorded response (replayed)
// without acting; a step still PENDING before its deadline is waited for.
// A step PENDING past its deadline was left by an executor that stopped
// mid-step: it is in doubt. If its call is idempotent it is re-run, and the
// re-run is recorded; otherwise it is recorded IN_DOUBT and answered with
// the IN_DOUBT error (not recoverable, suggested action
// needs_human_decision): the run must stop until a human decides with
// Service.ResolveStep (RPC ResolveStep): succeeded, failed, or retry, the
// explicit way to execute a step again. Nothing is ever retried
// implicitly. Without NATS (unit tests) records are kept in memory.
package executor
