/**
 * How a close seen on one side of a websocket relay is passed to the other side.
 *
 * RFC 6455 §7.4.1 reserves 1005 (no status), 1006 (abnormal closure) and 1015 (TLS failure)
 * for reporting only: they must never be sent in a close frame, and Bun throws if asked to.
 * So "no status" becomes a close without a code (the peer then sees 1005 too), an abnormal or
 * TLS-failed closure becomes an abrupt termination (the peer then sees 1006), and any other code
 * that cannot legally be sent becomes 1011 with the original code kept in the reason.
 */
export type CloseAction = { kind: "close"; code?: number; reason?: string } | { kind: "terminate" };

export function closeActionFor(code: number, reason: string): CloseAction {
  if (code === 1005) return { kind: "close" };
  if (code === 1006 || code === 1015) return { kind: "terminate" };
  if (isSendable(code)) return { kind: "close", code, reason: truncateReason(reason) };
  return { kind: "close", code: 1011, reason: truncateReason(`upstream closed with ${code}${reason ? `: ${reason}` : ""}`) };
}

/** Codes an endpoint may put in a close frame (RFC 6455 §7.4.1, IANA registry). */
function isSendable(code: number): boolean {
  if (code >= 3000 && code <= 4999) return true;
  return code === 1000 || code === 1001 || code === 1002 || code === 1003 || (code >= 1007 && code <= 1014);
}

/** A close reason is limited to 123 bytes of UTF-8 (125 minus the code). */
function truncateReason(reason: string): string {
  const bytes = new TextEncoder().encode(reason);
  if (bytes.length <= 123) return reason;
  let cut = 123;
  while (cut > 0 && (bytes[cut]! & 0xc0) === 0x80) cut--;
  return new TextDecoder().decode(bytes.subarray(0, cut));
}
