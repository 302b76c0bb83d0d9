import { UpstreamError } from "./h1-pool.ts";

/**
 * Which fetch and pooled-client failures mean "the request never reached the upstream application" and are
 * therefore safe to retry: the connection was refused, could not be opened, the name did not
 * resolve, or the TLS handshake failed. Anything after that (a reset mid-response) is not.
 */
const CONNECT_PHASE_CODES = new Set([
  "ECONNREFUSED",
  "ConnectionRefused",
  "ENOTFOUND",
  "EAI_AGAIN",
  "DNSException",
  "ETIMEDOUT",
  "ConnectionTimeout",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "EADDRNOTAVAIL",
  "FailedToOpenSocket",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "CERT_HAS_EXPIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "HandshakeFailure",
  "ERR_SSL_WRONG_VERSION_NUMBER",
]);

export function errorCode(err: unknown): string | undefined {
  if (err && typeof err === "object" && "code" in err && typeof err.code === "string") return err.code;
  return undefined;
}

export function isConnectPhaseError(err: unknown): boolean {
  // The pooled client knows whether a connection was made; its codes alone do not say.
  if (err instanceof UpstreamError) return err.beforeConnect;
  const code = errorCode(err);
  return code !== undefined && CONNECT_PHASE_CODES.has(code);
}

/**
 * No answer in time, as opposed to a definite one (refused, no such host, reset, an HTTP error):
 * a timeout while connecting or waiting for the answer, or a temporary DNS failure. The upstream
 * may well be running, only too busy to answer (SPEC "Restarts": the start fails closed on it).
 */
export function isNoAnswer(err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name;
  if (name === "TimeoutError" || name === "AbortError") return true;
  const code = errorCode(err);
  return code === "ETIMEDOUT" || code === "ConnectionTimeout" || code === "EAI_AGAIN";
}

/**
 * A connection refused (a TCP reset to the SYN): nothing listens at that address. Not a timeout,
 * a reset of an open connection, or a name that did not resolve: those leave a process possible.
 */
export function isConnectionRefused(err: unknown): boolean {
  const code = errorCode(err);
  return (code === "ECONNREFUSED" || code === "ConnectionRefused") && (!(err instanceof UpstreamError) || err.beforeConnect);
}

/** One short human reason for logs and 502 bodies, never a stack. */
export function describeFetchError(err: unknown): string {
  const code = errorCode(err);
  const msg = err instanceof Error ? err.message : String(err);
  return code && !msg.includes(code) ? `${code}: ${msg}` : msg;
}
