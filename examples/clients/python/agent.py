#!/usr/bin/python3
"""A tool server and an agent written in Python, governed by XCT.

One gRPC server offers two XCT services:

- ToolService: an inventory with two tools, `lookup` (reads) and `reserve`
  (irreversible). The executor serves them as "<server>.lookup" and
  "<server>.reserve" (the server's name comes from the executor's tools
  config) and calls them exactly like its built-in tools: with validated
  arguments, the step's deadline, and the step id as idempotency key.
- ProposerService: an agent for goals like "reserve 2 of GREEN-1". It is
  stateless: every call carries the goal, the tool catalog and the history,
  which the orchestrator rebuilds from the run's chain.

The agent only proposes; XCT validates every proposal against its policy
(an irreversible reservation waits for a human), executes what is allowed,
and records everything on the chain.

    /usr/bin/python3 agent.py --listen 127.0.0.1:7710

It prints "listening on HOST:PORT" once it serves, and one line per tool
invocation. SIGTERM or Ctrl-C stops it.
"""

import argparse
import json
import re
import signal
import sys
import threading
from concurrent import futures

import xct_client  # noqa: F401  (the packaged client: pip install ./gen/python, see ../README.md)

import grpc  # noqa: E402
from google.protobuf import duration_pb2, json_format, struct_pb2  # noqa: E402
from xct.v1 import decision_pb2, proposer_pb2, proposer_pb2_grpc, tool_pb2, tool_pb2_grpc  # noqa: E402

# The inventory the tools act on: SKU -> units available.
STOCK = {"GREEN-1": 7, "BLUE-1": 0}

SKU_SCHEMA = {"type": "string", "pattern": "^[A-Z0-9-]{1,32}$"}
TOOLS = [
    tool_pb2.ToolDescriptor(
        name="lookup",
        description="How many units of a SKU are available.",
        input_schema=json.dumps(
            {"type": "object", "properties": {"sku": SKU_SCHEMA}, "required": ["sku"], "additionalProperties": False}
        ),
        effect=tool_pb2.EFFECT_READ,
        idempotent=True,
        timeout=duration_pb2.Duration(seconds=5),
        max_output_bytes=4096,
    ),
    tool_pb2.ToolDescriptor(
        name="reserve",
        description="Reserve units of a SKU for an order. Cannot be undone.",
        input_schema=json.dumps(
            {
                "type": "object",
                "properties": {"sku": SKU_SCHEMA, "quantity": {"type": "integer", "minimum": 1, "maximum": 10}},
                "required": ["sku", "quantity"],
                "additionalProperties": False,
            }
        ),
        effect=tool_pb2.EFFECT_IRREVERSIBLE,
        idempotent=False,
        timeout=duration_pb2.Duration(seconds=5),
        max_output_bytes=4096,
    ),
]


def log(line: str) -> None:
    print(line, flush=True)


def note_credentials(context, method: str) -> None:
    """Says (never showing it) when a caller sent an authorization header:
    XCT must not hand its own credentials to servers outside it."""
    if any(key == "authorization" for key, _ in context.invocation_metadata()):
        log(f"{method}: the caller sent authorization metadata (not shown)")


def success(result) -> tool_pb2.InvokeResponse:
    value = struct_pb2.Value()
    value.struct_value.update(result)
    return tool_pb2.InvokeResponse(response=decision_pb2.Response(success=decision_pb2.Success(result=value)))


def failure(code: str, message: str) -> tool_pb2.InvokeResponse:
    return tool_pb2.InvokeResponse(response=decision_pb2.Response(error=decision_pb2.Error(code=code, message=message)))


class Inventory(tool_pb2_grpc.ToolServiceServicer):
    """The tools. Arguments arrive already validated against the schemas
    above; the server still checks what only it knows (the stock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stock = dict(STOCK)
        self._done = {}  # idempotency key -> the first response
        self._reservations = 0

    def Describe(self, request, context):
        note_credentials(context, "Describe")
        return tool_pb2.DescribeResponse(tools=TOOLS)

    def Invoke(self, request, context):
        note_credentials(context, "Invoke")
        args = json_format.MessageToDict(request.arguments)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return failure("TIMEOUT", "the step's deadline passed before the tool ran")
        with self._lock:
            # The same key is the same step: return the first result, do
            # nothing twice.
            if request.idempotency_key and request.idempotency_key in self._done:
                log(f"invoke {request.tool} key={request.idempotency_key} replayed")
                return self._done[request.idempotency_key]
            resp = self._invoke(request.tool, args)
            if request.idempotency_key:
                self._done[request.idempotency_key] = resp
        outcome = "success" if resp.response.HasField("success") else "error " + resp.response.error.code
        log(f"invoke {request.tool} key={request.idempotency_key} args={json.dumps(args, sort_keys=True)} -> {outcome}")
        return resp

    def _invoke(self, tool: str, args) -> tool_pb2.InvokeResponse:
        sku = args.get("sku", "")
        if sku not in self._stock:
            return failure("NOT_FOUND", f"no SKU {sku}")
        if tool == "lookup":
            return success({"sku": sku, "available": self._stock[sku]})
        if tool == "reserve":
            quantity = int(args["quantity"])
            if quantity > self._stock[sku]:
                return failure("INVALID_ARGUMENT", f"only {self._stock[sku]} of {sku} available")
            self._stock[sku] -= quantity
            self._reservations += 1
            return success({"reservation": f"R-{self._reservations}", "sku": sku, "quantity": quantity})
        return failure("NOT_FOUND", f"no tool {tool}")


GOAL = re.compile(r"reserve (\d+) of ([A-Z0-9-]+)")


def next_step(tool: str, arguments, goal: str) -> str:
    return json.dumps({"next_step": {"tool": tool, "arguments": arguments, "goal": goal}})


def done(message: str) -> str:
    return json.dumps({"done": True, "message": message})


class Agent(proposer_pb2_grpc.ProposerServiceServicer):
    """Decides the next step from the goal, the catalog and the history
    alone; it keeps no state between calls."""

    def Propose(self, request, context):
        note_credentials(context, "Propose")
        output = self.decide(request)
        return proposer_pb2.ProposeResponse(
            output=output,
            model="python-agent-1",
            usage=proposer_pb2.Usage(input_tokens=len(request.history) + 10, output_tokens=len(output) // 4),
        )

    def decide(self, request) -> str:
        m = GOAL.search(request.goal)
        if not m:
            return done("I can only reserve stock: say 'reserve N of SKU'")
        quantity, sku = int(m.group(1)), m.group(2)
        names = [t.name for t in request.tools]
        lookup = next((n for n in names if n.endswith(".lookup")), None)
        reserve = next((n for n in names if n.endswith(".reserve")), None)
        if lookup is None or reserve is None:
            return done(f"the inventory tools are not in the catalog: {names}")

        if not request.history:
            # A slip, as models make them: the wrong argument name. The
            # validator refuses it before any tool runs, and the error comes
            # back to this agent as information.
            return next_step(lookup, {"item": sku}, f"Check the stock of {sku}")
        last = request.history[-1]
        try:
            decision = json.loads(last.decision)
        except json.JSONDecodeError:
            decision = {}
        response = json.loads(last.response)
        tool = decision.get("next_step", {}).get("tool")

        if response.get("status") == "error":
            if response.get("code") == "SCHEMA_INVALID" and tool == lookup:
                return next_step(lookup, {"sku": sku}, f"Check the stock of {sku}, with the argument the schema names")
            return done(f"stopped: {response.get('code')}: {response.get('message')}")
        result = response.get("result") or {}
        if tool == lookup:
            if result.get("available", 0) < quantity:
                return done(f"only {result.get('available', 0)} of {sku} available; nothing reserved")
            return next_step(reserve, {"sku": sku, "quantity": quantity}, f"Reserve {quantity} of {sku}")
        if tool == reserve:
            return done(f"reserved {quantity} of {sku} as {result.get('reservation')}")
        return done(f"unexpected last step {tool}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:7710", help="address to serve on (port 0 picks a free one)")
    o = p.parse_args()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    tool_pb2_grpc.add_ToolServiceServicer_to_server(Inventory(), server)
    proposer_pb2_grpc.add_ProposerServiceServicer_to_server(Agent(), server)
    host = o.listen.rsplit(":", 1)[0]
    port = server.add_insecure_port(o.listen)
    if port == 0:
        print(f"cannot listen on {o.listen}", file=sys.stderr)
        return 1
    server.start()
    log(f"listening on {host}:{port}")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
