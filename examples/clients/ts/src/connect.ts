// Connecting to XCT: who the caller is (a bearer token) and the gRPC
// transport that carries it.

import { existsSync, readFileSync } from "node:fs";

import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { parse } from "yaml";

/** A caller: the principal's name and, when authentication is on, its token. */
export interface Identity {
  name: string;
  token?: string;
}

/** PEM files for TLS: the CA that signed the servers, and an optional client certificate. */
export interface TLSFiles {
  ca: string;
  cert: string;
  key: string;
}

/**
 * identity returns the caller `name`: with `token` when one is given (an
 * environment variable), else with the token the credentials file holds for
 * that principal (`xct dev` writes one), else without a token.
 */
export function identity(name: string, token: string | undefined, credentialsFile: string): Identity {
  if (token !== undefined && token !== "") return { name, token };
  return { name, token: tokenFromFile(credentialsFile, name) };
}

interface Credential {
  principal?: unknown;
  token?: unknown;
}

function tokenFromFile(file: string, principal: string): string | undefined {
  if (file === "" || !existsSync(file)) return undefined;
  const doc: unknown = parse(readFileSync(file, "utf8"));
  if (!Array.isArray(doc)) throw new Error(`${file}: want a list of {principal, roles, token}`);
  const entry = (doc as Credential[]).find((c) => c.principal === principal);
  if (entry === undefined || typeof entry.token !== "string") {
    throw new Error(`${file}: no token for principal ${JSON.stringify(principal)}`);
  }
  return entry.token;
}

/** bearer adds `authorization: Bearer TOKEN` to every call. */
function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

/**
 * grpcTransport is gRPC over HTTP/2 to `addr` ("host:port"), in plaintext, or
 * over TLS when `tls` names the CA. Calls without their own deadline get
 * one of 30 seconds.
 */
export function grpcTransport(addr: string, who: Identity, tls?: TLSFiles): Transport {
  const interceptors = who.token !== undefined ? [bearer(who.token)] : [];
  if (tls === undefined) {
    return createGrpcTransport({ baseUrl: `http://${addr}`, interceptors, defaultTimeoutMs: 30_000 });
  }
  return createGrpcTransport({
    baseUrl: `https://${addr}`,
    interceptors,
    defaultTimeoutMs: 30_000,
    nodeOptions: {
      ca: readFileSync(tls.ca),
      ...(tls.cert !== "" ? { cert: readFileSync(tls.cert), key: readFileSync(tls.key) } : {}),
    },
  });
}
