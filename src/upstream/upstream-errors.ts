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
 * The codes that say nothing listens there (SPEC "Restarts"): refused, no such host, no route.
 * Not a connect timeout nor a temporary DNS failure: a SYN nobody answers in time may meet a
 * machine too busy to answer, and the start treats "cannot tell" as "may be running".
 */
const NOT_RUNNING_CODES = new Set(["ECONNREFUSED", "ConnectionRefused", "ENOTFOUND", "DNSException", "ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL", "FailedToOpenSocket"]);

/** The upstream is not running (nothing accepted the connection), as opposed to slow or answering wrong. */
export function isNotRunning(err: unknown): boolean {
  if (err instanceof UpstreamError && !err.beforeConnect) return false;
  const code = errorCode(err);
  return code !== undefined && NOT_RUNNING_CODES.has(code);
}

/** One short human reason for logs and 502 bodies, never a stack. */
export function describeFetchError(err: unknown): string {
  const code = errorCode(err);
  const msg = err instanceof Error ? err.message : String(err);
  return code && !msg.includes(code) ? `${code}: ${msg}` : msg;
}
