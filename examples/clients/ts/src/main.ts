// XCT from TypeScript, with the client generated into gen/ts.
//
// The program starts a governed run, prints the run's events as the
// orchestrator records them, approves the step that waits for a human as a
// second principal (the one who starts a run may not approve it), and, once
// the run has ended, exports its LCTL chain from the tracer to a file and
// asks the tracer to verify it.
//
//   npm ci && npm run build
//   node dist/examples/clients/ts/src/main.js --model scripted:demo.yaml --goal "..."
//
// Every option has an environment variable (see README.md). Exit status: 0
// when the run ended done and its chain verified, 1 otherwise, 2 for a
// usage error.

import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";

import { TracerService, ExportFormat } from "../../../../gen/ts/lctl/v1/tracer_pb.js";
import type { Event } from "../../../../gen/ts/lctl/v1/event_pb.js";
import { OrchestratorService, RunStatus } from "../../../../gen/ts/xct/v1/orchestrator_pb.js";
import { ValidatorService } from "../../../../gen/ts/xct/v1/validator_pb.js";
import { grpcTransport, identity, type Identity, type TLSFiles } from "./connect.js";

/** How long one unary call may take. Every call carries a deadline. */
const callTimeoutMs = 10_000;

interface Options {
  addr: string;
  validatorAddr: string;
  tracerAddr: string;
  model: string;
  goal: string;
  submitter: Identity;
  approver: Identity;
  out: string;
  timeoutMs: number;
  tls?: TLSFiles;
}

function usage(message: string): never {
  console.error(`usage error: ${message}`);
  process.exit(2);
}

function options(): Options {
  const env = process.env;
  const { values } = parseArgs({
    options: {
      addr: { type: "string", default: env.XCT_ADDR ?? "127.0.0.1:7701" },
      "validator-addr": { type: "string", default: env.XCT_VALIDATOR_ADDR ?? "127.0.0.1:7702" },
      "tracer-addr": { type: "string", default: env.XCT_TRACER_ADDR ?? "127.0.0.1:7704" },
      model: { type: "string", default: env.XCT_MODEL ?? "scripted:demo.yaml" },
      goal: { type: "string", default: env.XCT_GOAL ?? "Show XCT from TypeScript" },
      as: { type: "string", default: env.XCT_AS ?? "alice" },
      approver: { type: "string", default: env.XCT_APPROVER ?? "bob" },
      credentials: { type: "string", default: env.XCT_CREDENTIALS ?? ".xct/dev/credentials.yaml" },
      out: { type: "string", default: env.XCT_OUT ?? "" },
      timeout: { type: "string", default: env.XCT_TIMEOUT ?? "120" },
      "tls-ca": { type: "string", default: env.XCT_TLS_CA ?? "" },
      "tls-cert": { type: "string", default: env.XCT_TLS_CERT ?? "" },
      "tls-key": { type: "string", default: env.XCT_TLS_KEY ?? "" },
    },
    strict: true,
  });
  const seconds = Number(values.timeout);
  if (!Number.isFinite(seconds) || seconds <= 0) usage(`--timeout ${values.timeout}: want a positive number of seconds`);
  if (values.goal === "" || values.model === "") usage("--goal and --model must not be empty");
  if (values.as === values.approver) {
    // Not refused here: the validator refuses it, which is worth seeing.
    console.error(`warning: --as and --approver are both ${values.as}; the validator will refuse the approval`);
  }
  let tls: TLSFiles | undefined;
  if (values["tls-ca"] !== "") tls = { ca: values["tls-ca"], cert: values["tls-cert"], key: values["tls-key"] };
  return {
    addr: values.addr,
    validatorAddr: values["validator-addr"],
    tracerAddr: values["tracer-addr"],
    model: values.model,
    goal: values.goal,
    submitter: identity(values.as, env.XCT_TOKEN, values.credentials),
    approver: identity(values.approver, env.XCT_APPROVER_TOKEN, values.credentials),
    out: values.out,
    timeoutMs: seconds * 1000,
    tls,
  };
}

/** The principal a request names: none when a token says who calls. */
function claimed(who: Identity): string {
  return who.token !== undefined ? "" : who.name;
}

/** One line for an event: its seq, type and agent, and what matters in it. */
function describe(e: Event): string {
  const d = e.data ?? {};
  const parts = [`[${e.seq}]`, e.type, `by ${e.agent}`];
  for (const key of ["step", "tool", "decision", "code", "status", "by", "requested_by"]) {
    if (d[key] !== undefined && d[key] !== null) parts.push(`${key}=${JSON.stringify(d[key])}`);
  }
  return parts.join(" ");
}

/** An error as one line: the gRPC code by its canonical name, and the message. */
function explain(err: unknown): string {
  if (err instanceof ConnectError) {
    const name = Code[err.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
    return `${name}: ${err.rawMessage}`;
  }
  return String(err);
}

async function main(): Promise<number> {
  const o = options();
  // The submitter starts and watches the run and reads its chain; the
  // approver only decides the approval.
  const orchestrator = createClient(OrchestratorService, grpcTransport(o.addr, o.submitter, o.tls));
  const validator = createClient(ValidatorService, grpcTransport(o.validatorAddr, o.approver, o.tls));
  const tracer = createClient(TracerService, grpcTransport(o.tracerAddr, o.submitter, o.tls));

  // With a token the cluster knows who is calling; naming the principal
  // matters only to a cluster without authentication.
  const started = await orchestrator.startRun(
    { goal: o.goal, model: o.model, principal: claimed(o.submitter), labels: { client: "typescript" } },
    { timeoutMs: callTimeoutMs },
  );
  const runId = started.run!.runId;
  console.log(`run ${runId} started by ${started.run!.principal} (model ${o.model})`);

  let lastSeq = 0n;
  let approved = 0;
  try {
    // The stream ends after the run's final event; the deadline bounds the
    // whole run.
    for await (const msg of orchestrator.watchRun({ runId }, { timeoutMs: o.timeoutMs })) {
      const e = msg.event!;
      lastSeq = e.seq;
      console.log(describe(e));
      if (e.type === "approval_requested") {
        const stepId = String(e.data?.step_id ?? "");
        const decided = await validator.decideApproval(
          { runId, step: stepId, approve: true, approver: claimed(o.approver), reason: "checked from the TypeScript client" },
          { timeoutMs: callTimeoutMs },
        );
        approved++;
        console.log(`approved step ${decided.approval!.step} as ${decided.approval!.decidedBy}`);
      }
    }
  } catch (err) {
    console.error(`error: ${explain(err)}`);
    // Leave nothing waiting: the run this program started is cancelled.
    await orchestrator
      .cancelRun({ runId, reason: `the TypeScript client stopped: ${explain(err)}` }, { timeoutMs: callTimeoutMs })
      .then(() => console.error(`run ${runId} cancelled`))
      .catch((cerr: unknown) => console.error(`cancel: ${explain(cerr)}`));
    return 1;
  }

  const { run } = await orchestrator.getRun({ runId }, { timeoutMs: callTimeoutMs });
  console.log(`run ${runId} ended ${RunStatus[run!.status]}: ${run!.message} (${approved} approval(s))`);

  // The tracer follows the log on its own: wait until it has the run's last
  // event, then export and verify.
  await waitForChain(tracer, runId, lastSeq, o.timeoutMs);
  const exported = await tracer.exportChain({ chainId: runId, format: ExportFormat.JSON }, { timeoutMs: callTimeoutMs });
  const out = o.out !== "" ? o.out : await defaultOut(runId);
  await writeFile(out, exported.content, { mode: 0o600 });
  console.log(`exported ${exported.content.length} bytes to ${out}`);
  const verified = await tracer.verifyChain({ chainId: runId }, { timeoutMs: callTimeoutMs });
  console.log(`chain verified: ${verified.ok} (${verified.events} events)`);
  return run!.status === RunStatus.DONE && verified.ok ? 0 : 1;
}

/**
 * defaultOut is where the chain goes without --out: a directory of its own
 * under the system's temporary directory, never the source tree.
 */
async function defaultOut(runId: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "xct-chain-"));
  return join(dir, `${runId}.lctl.json`);
}

/** Polls the tracer until it holds the chain up to seq, within timeoutMs. */
async function waitForChain(tracer: Client<typeof TracerService>, chainId: string, seq: bigint, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let pause = 50; ; pause = Math.min(pause * 2, 1000)) {
    try {
      const chain = await tracer.getChain({ chainId, pageSize: 1 }, { timeoutMs: callTimeoutMs });
      if (chain.summary!.events >= seq) return;
    } catch (err) {
      if (!(err instanceof ConnectError && err.code === Code.NotFound)) throw err;
    }
    if (Date.now() + pause > deadline) throw new Error(`the tracer did not reach seq ${seq} of ${chainId} in time`);
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`error: ${explain(err)}`);
    process.exit(1);
  },
);
