#!/usr/bin/python3
"""XCT from Python, with the client generated into gen/python.

Starts a governed run, prints the run's events as the orchestrator records
them, approves the step that waits for a human as a second principal (the
one who starts a run may not approve it), and, once the run has ended,
exports its LCTL chain from the tracer to a file and asks the tracer to
verify it.

    /usr/bin/python3 run_and_approve.py --model scripted:demo.yaml --goal "..."

Every option has an environment variable (see README.md). Exit status: 0
when the run ended done and its chain verified, 1 otherwise, 2 for a usage
error.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import xct_client  # the packaged client: pip install ./gen/python (see ../README.md)
from xct_client import CALL_TIMEOUT, explain

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from lctl.v1 import tracer_pb2, tracer_pb2_grpc  # noqa: E402
from xct.v1 import orchestrator_pb2, orchestrator_pb2_grpc, validator_pb2, validator_pb2_grpc  # noqa: E402


def options():
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addr", default=env("XCT_ADDR", "127.0.0.1:7701"), help="orchestrator address")
    p.add_argument("--validator-addr", default=env("XCT_VALIDATOR_ADDR", "127.0.0.1:7702"))
    p.add_argument("--tracer-addr", default=env("XCT_TRACER_ADDR", "127.0.0.1:7704"))
    p.add_argument("--model", default=env("XCT_MODEL", "scripted:demo.yaml"))
    p.add_argument("--goal", default=env("XCT_GOAL", "Show XCT from Python"))
    p.add_argument("--as", dest="submitter", default=env("XCT_AS", "alice"), help="who starts the run")
    p.add_argument("--approver", default=env("XCT_APPROVER", "bob"), help="who approves its steps")
    p.add_argument("--credentials", default=xct_client.default_credentials(), help="tokens by principal (default XCT_CREDENTIALS, else XCT_DATA_DIR/dev/credentials.yaml, .xct by default)")
    p.add_argument("--out", default=env("XCT_OUT", ""), help="chain file (default TMPDIR/xct-chain-*/RUN_ID.lctl.json)")
    p.add_argument("--timeout", type=float, default=float(env("XCT_TIMEOUT", "120")), help="seconds the run may take")
    p.add_argument("--tls-ca", default=env("XCT_TLS_CA", ""))
    p.add_argument("--tls-cert", default=env("XCT_TLS_CERT", ""))
    p.add_argument("--tls-key", default=env("XCT_TLS_KEY", ""))
    o = p.parse_args()
    if o.timeout <= 0:
        p.error("--timeout must be positive")
    if not o.goal or not o.model:
        p.error("--goal and --model must not be empty")
    if o.submitter == o.approver:
        # Not refused here: the validator refuses it, which is worth seeing.
        print(f"warning: --as and --approver are both {o.submitter}; the validator will refuse the approval", file=sys.stderr)
    return o


def claimed(who: xct_client.Identity) -> str:
    """The principal a request names: none when a token says who calls."""
    return "" if who.token else who.name


def describe(e) -> str:
    """One line for an event: its seq, type and agent, and what matters in it."""
    data = json_format.MessageToDict(e.data)
    parts = [f"[{e.seq}]", e.type, f"by {e.agent}"]
    for key in ("step", "tool", "decision", "code", "status", "by", "requested_by"):
        if data.get(key) is not None:
            value = data[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            parts.append(f"{key}={json.dumps(value)}")
    return " ".join(parts)


def wait_for_chain(tracer, chain_id: str, seq: int, timeout: float) -> None:
    """Polls the tracer until it holds the chain up to seq, within timeout."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        try:
            chain = tracer.GetChain(tracer_pb2.GetChainRequest(chain_id=chain_id, page_size=1), timeout=CALL_TIMEOUT)
            if chain.summary.events >= seq:
                return
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise
        if time.monotonic() + pause > deadline:
            raise TimeoutError(f"the tracer did not reach seq {seq} of {chain_id} in time")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def main() -> int:
    o = options()
    submitter = xct_client.identity(o.submitter, os.environ.get("XCT_TOKEN"), o.credentials)
    approver = xct_client.identity(o.approver, os.environ.get("XCT_APPROVER_TOKEN"), o.credentials)
    tls = dict(tls_ca=o.tls_ca, tls_cert=o.tls_cert, tls_key=o.tls_key)
    # The submitter starts and watches the run and reads its chain; the
    # approver only decides the approval.
    orch = orchestrator_pb2_grpc.OrchestratorServiceStub(xct_client.channel(o.addr, submitter, **tls))
    validator = validator_pb2_grpc.ValidatorServiceStub(xct_client.channel(o.validator_addr, approver, **tls))
    tracer = tracer_pb2_grpc.TracerServiceStub(xct_client.channel(o.tracer_addr, submitter, **tls))

    # With a token the cluster knows who is calling; naming the principal
    # matters only to a cluster without authentication.
    started = orch.StartRun(
        orchestrator_pb2.StartRunRequest(goal=o.goal, model=o.model, principal=claimed(submitter), labels={"client": "python"}),
        timeout=CALL_TIMEOUT,
    )
    run_id = started.run.run_id
    print(f"run {run_id} started by {started.run.principal} (model {o.model})", flush=True)

    last_seq, approved = 0, 0
    try:
        # The stream ends after the run's final event; the deadline bounds
        # the whole run.
        for msg in orch.WatchRun(orchestrator_pb2.WatchRunRequest(run_id=run_id), timeout=o.timeout):
            e = msg.event
            last_seq = e.seq
            print(describe(e), flush=True)
            if e.type == "approval_requested":
                decided = validator.DecideApproval(
                    validator_pb2.DecideApprovalRequest(
                        run_id=run_id,
                        step=e.data["step_id"],
                        approve=True,
                        approver=claimed(approver),
                        reason="checked from the Python client",
                    ),
                    timeout=CALL_TIMEOUT,
                )
                approved += 1
                print(f"approved step {decided.approval.step} as {decided.approval.decided_by}", flush=True)
    except grpc.RpcError as err:
        print(f"error: {explain(err)}", file=sys.stderr)
        # Leave nothing waiting: the run this program started is cancelled.
        try:
            orch.CancelRun(
                orchestrator_pb2.CancelRunRequest(run_id=run_id, reason=f"the Python client stopped: {explain(err)}"),
                timeout=CALL_TIMEOUT,
            )
            print(f"run {run_id} cancelled", file=sys.stderr)
        except grpc.RpcError as cerr:
            print(f"cancel: {explain(cerr)}", file=sys.stderr)
        return 1

    run = orch.GetRun(orchestrator_pb2.GetRunRequest(run_id=run_id), timeout=CALL_TIMEOUT).run
    status = orchestrator_pb2.RunStatus.Name(run.status).removeprefix("RUN_STATUS_")
    print(f"run {run_id} ended {status}: {run.message} ({approved} approval(s))", flush=True)

    # The tracer follows the log on its own: wait until it has the run's
    # last event, then export and verify.
    wait_for_chain(tracer, run_id, last_seq, o.timeout)
    exported = tracer.ExportChain(
        tracer_pb2.ExportChainRequest(chain_id=run_id, format=tracer_pb2.EXPORT_FORMAT_JSON), timeout=CALL_TIMEOUT
    )
    # Without --out the chain goes to a directory of its own under the
    # system's temporary directory, never the source tree.
    out = o.out or os.path.join(tempfile.mkdtemp(prefix="xct-chain-"), f"{run_id}.lctl.json")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(exported.content)
    print(f"exported {len(exported.content)} bytes to {out}", flush=True)
    verified = tracer.VerifyChain(tracer_pb2.VerifyChainRequest(chain_id=run_id), timeout=CALL_TIMEOUT)
    print(f"chain verified: {str(verified.ok).lower()} ({verified.events} events)", flush=True)
    return 0 if run.status == orchestrator_pb2.RUN_STATUS_DONE and verified.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (grpc.RpcError, OSError, ValueError, TimeoutError) as err:
        print(f"error: {explain(err)}", file=sys.stderr)
        sys.exit(1)
