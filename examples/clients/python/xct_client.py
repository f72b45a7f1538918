"""Connecting to XCT from Python: the generated client, who the caller is (a
bearer token), and gRPC channels that carry it.

The generated code lives in the repository's gen/python; importing this
module puts it on sys.path. It runs on Debian's python3-grpcio and
python3-protobuf, the runtimes the generated code was made for.
"""

import collections
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

GEN = Path(__file__).resolve().parents[3] / "gen" / "python"
if str(GEN) not in sys.path:
    sys.path.insert(0, str(GEN))

import grpc  # noqa: E402  (after the path is set, like the imports below)
import yaml  # noqa: E402

# Every unary call carries this deadline; streams get their own.
CALL_TIMEOUT = 10.0


@dataclass
class Identity:
    """A caller: the principal's name and, when authentication is on, its token."""

    name: str
    token: Optional[str] = None


def identity(name: str, token: Optional[str], credentials_file: str) -> Identity:
    """Returns the caller `name`: with `token` when one is given (an
    environment variable), else with the token the credentials file holds
    for that principal (`xct dev` writes one), else without a token."""
    if token:
        return Identity(name, token)
    return Identity(name, token_from_file(credentials_file, name))


def token_from_file(path: str, principal: str) -> Optional[str]:
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
    else:
        ch = grpc.insecure_channel(addr)
    return grpc.intercept_channel(ch, _Bearer(who.token))


def explain(err: Exception) -> str:
    """An error as one line: the gRPC code's name and the message."""
    if isinstance(err, grpc.RpcError):
        return f"{err.code().name}: {err.details()}"
    return str(err)
