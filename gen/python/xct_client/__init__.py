"""XCT's Python client: the generated gRPC stubs, who the caller is (a
bearer token), and gRPC channels that carry it.

The stubs are the packages xct.v1 and lctl.v1 (installed with this one);
the common modules are re-exported here: xct_client.orchestrator_pb2,
xct_client.validator_pb2_grpc, xct_client.tracer_pb2, ...
"""

import collections
import os
from dataclasses import dataclass
from typing import Optional

import grpc
import yaml

from lctl.v1 import event_pb2, tracer_pb2, tracer_pb2_grpc  # noqa: F401
from xct.v1 import (  # noqa: F401
    decision_pb2,
    executor_pb2,
    executor_pb2_grpc,
    orchestrator_pb2,
    orchestrator_pb2_grpc,
    proposer_pb2,
    proposer_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
    validator_pb2,
    validator_pb2_grpc,
)

__version__ = "0.1.0"

# Every unary call carries this deadline; streams get their own.
CALL_TIMEOUT = 10.0


@dataclass
class Identity:
    """A caller: the principal's name and, when authentication is on, its token."""

    name: str
    token: Optional[str] = None


def default_credentials() -> str:
    """The credentials file `xct dev` writes: XCT_CREDENTIALS, else
    DATA_DIR/dev/credentials.yaml with DATA_DIR from XCT_DATA_DIR (default
    .xct), as the xct command line finds it."""
    if os.environ.get("XCT_CREDENTIALS"):
        return os.environ["XCT_CREDENTIALS"]
    return os.path.join(os.environ.get("XCT_DATA_DIR") or ".xct", "dev", "credentials.yaml")


def identity(name: str, token: Optional[str], credentials_file: str) -> Identity:
    """Returns the caller `name`: with `token` when one is given (an
    environment variable), else with the token the credentials file holds
    for that principal (`xct dev` writes one), else without a token."""
    if token:
        return Identity(name, token)
    return Identity(name, token_from_file(credentials_file, name))


def token_from_file(path: str, principal: str) -> Optional[str]:
    """The token of `principal` in a credentials file; None when the file
    does not exist."""
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, list):
        raise ValueError(f"{path}: want a list of {{principal, roles, token}}")
    for entry in doc:
        if isinstance(entry, dict) and entry.get("principal") == principal and isinstance(entry.get("token"), str):
            return entry["token"]
    raise ValueError(f"{path}: no token for principal {principal!r}")


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call, and a deadline to
    a call that has none."""

    def __init__(self, token: Optional[str]):
        self._token = token

    def _details(self, d):
        metadata = list(d.metadata or [])
        if self._token:
            metadata.append(("authorization", f"Bearer {self._token}"))
        timeout = d.timeout if d.timeout is not None else CALL_TIMEOUT
        return _CallDetails(d.method, timeout, metadata, d.credentials, d.wait_for_ready, d.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)


def channel(addr: str, who: Identity, tls_ca: str = "", tls_cert: str = "", tls_key: str = "") -> grpc.Channel:
    """A gRPC channel to `addr` ("host:port") that calls as `who`: plaintext,
    or TLS when tls_ca names the CA that signed the server (with an optional
    client certificate)."""
    if tls_ca:
        def read(p):
            with open(p, "rb") as f:
                return f.read()

        creds = grpc.ssl_channel_credentials(
            root_certificates=read(tls_ca),
            private_key=read(tls_key) if tls_cert else None,
            certificate_chain=read(tls_cert) if tls_cert else None,
        )
        ch = grpc.secure_channel(addr, creds)
        if not tls_cert:
            global _tls_without_cert
            _tls_without_cert = True
    else:
        ch = grpc.insecure_channel(addr)
    return grpc.intercept_channel(ch, _Bearer(who.token))


# What gRPC's C core reports when a server that requires a client
# certificate ends the TLS handshake of a client that sent none: the alert
# itself (TSI_DATA_CORRUPTED, "certificate required") when it reaches the
# status, else only that the connection was read from and closed.
_NO_CLIENT_CERT = ("TSI_DATA_CORRUPTED", "certificate required", "CERTIFICATE_REQUIRED")
_CLOSED_IN_HANDSHAKE = ("Endpoint read failed", "Socket closed", "handshake")

# Set once channel() made a TLS channel without a client certificate.
_tls_without_cert = False


def explain(err: Exception) -> str:
    """An error as one line: the gRPC code's name and the message, and what
    to do when the cause is known: a server that requires a client
    certificate closes the TLS handshake of a client that sent none, which
    gRPC reports as UNAVAILABLE."""
    if isinstance(err, grpc.RpcError):
        details = err.details() or ""
        if err.code() == grpc.StatusCode.UNAVAILABLE and (
            any(s in details for s in _NO_CLIENT_CERT)
            or (_tls_without_cert and any(s in details for s in _CLOSED_IN_HANDSHAKE))
        ):
            return (f"{err.code().name}: the server requires a client certificate and this client sent none "
                    f"(pass --tls-cert and --tls-key, e.g. from xct dev certs); gRPC said: {details}")
        return f"{err.code().name}: {details}"
    return str(err)
