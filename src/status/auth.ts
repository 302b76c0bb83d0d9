/**
 * Who may steer the GPU and see client addresses (SPEC "Status API", authorisation):
 * - a request that carries `Authorization: Bearer <token>` is judged by the token alone: the
 *   admin token passes from anywhere, any other token is refused — from loopback too, so a
 *   script with a stale token fails loudly instead of working by accident on one machine;
 * - without a token, loopback clients (127.0.0.0/8, ::1, ::ffff:127.x) pass, if the Host they sent
 *   names this machine: a DNS-rebinding page also comes from loopback, but under its own name;
 * - a loopback peer that relays for someone (Forwarded, X-Forwarded-For, X-Real-IP) is not the
 *   client: nginx or HAProxy on this machine connects from 127.0.0.1 for every client of the LAN.
 *   Unless TRUSTED_PROXIES names it and its client is on this machine, it passes only with the
 *   token (clientBehindProxy). A balancer on another machine never vouches for a loopback client;
 * - everyone else is refused.
 * Pure: the listener hands in the peer address it saw.
 */
import type { timingSafeEqual as TimingSafeEqual } from "node:crypto";
import { forwardingHeaders, isLoopback, isTrustedProxy, relayedClient, type HeaderSource, type TrustedProxies } from "../fair/forwarded.ts";

export type Authorisation =
  | { ok: true; via: "loopback" | "token" }
  | { ok: false; reason: string };

/**
 * `proxied`: the forwarding header that made a loopback peer's request one from nowhere
 * (clientBehindProxy), said in the refusal so the operator sees why loopback did not pass.
 */
export function authorise(clientAddress: string | undefined, authorization: string | null, adminToken: string, hostNamesMachine = true, proxied?: string): Authorisation {
  const token = bearerToken(authorization);
  if (token !== undefined) {
    if (adminToken === "") return { ok: false, reason: "a bearer token was sent, but no ADMIN_TOKEN is set" };
    if (!sameSecret(token, adminToken)) return { ok: false, reason: "wrong admin token" };
    return { ok: true, via: "token" };
  }
  if (clientAddress !== undefined && isLoopback(clientAddress)) {
    if (hostNamesMachine) return { ok: true, via: "loopback" };
    return { ok: false, reason: "the Host header does not name this machine (a DNS-rebinding page?); use localhost, an IP address, a name in ALLOWED_HOSTS, or Authorization: Bearer <ADMIN_TOKEN>" };
  }
  if (proxied !== undefined) {
    return {
      ok: false,
      reason: `the request came through a proxy (it carries ${proxied}), so it is not a loopback client; send Authorization: Bearer <ADMIN_TOKEN>, or name a proxy on this machine in TRUSTED_PROXIES`,
    };
  }
  return {
    ok: false,
    reason: adminToken === "" ? "only loopback clients may do this (set ADMIN_TOKEN to allow others)" : "this needs Authorization: Bearer <ADMIN_TOKEN>",
  };
}

/**
 * A steering request a web page of another site made the browser send (CSRF): loopback needs no
 * token, so without this check any site the operator visits could force-release the GPU with a
 * plain form POST. The status page itself is same-origin; the CLI and scripts send no Origin.
 */
export function crossSiteRequest(origin: string | null, host: string | null, fetchSite: string | null): { ok: true } | { ok: false; reason: string } {
  if (fetchSite === "cross-site" || fetchSite === "same-site") return { ok: false, reason: `a request from another web site (Sec-Fetch-Site: ${fetchSite})` };
  if (origin === null) return { ok: true };
  let originHost: string | undefined;
  try {
    originHost = new URL(origin).host;
  } catch {
    // "null" (a sandboxed frame, a file) or junk: not this page
  }
  if (originHost === undefined || host === null || originHost !== host.toLowerCase()) {
    return { ok: false, reason: `a request from another web site (Origin: ${origin})` };
  }
  return { ok: true };
}

/** The 403 body for a refusal, in JSON like every answer under /turnstile/. */
export function forbidden(a: { reason: string }): Response {
  return Response.json({ error: `gpu-turnstile: forbidden: ${a.reason}` }, { status: 403 });
}

/** The token of `Bearer <token>` (scheme case-insensitive, RFC 9110 §11.1); other schemes are not ours. */
function bearerToken(header: string | null): string | undefined {
  if (header === null) return undefined;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1] : undefined;
}

function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  // Length is not secret enough to matter here, and timingSafeEqual needs equal lengths.
  return a.length === b.length && timingSafeEqual()(a, b);
}

/**
 * node:crypto, loaded at the first token compared: importing it is 3–13 ms of a compiled start
 * (docs/BENCHMARKS.md), and most turnstiles never see a bearer token.
 */
let cachedTimingSafeEqual: typeof TimingSafeEqual | undefined;
function timingSafeEqual(): typeof TimingSafeEqual {
  return (cachedTimingSafeEqual ??= process.getBuiltinModule("node:crypto").timingSafeEqual);
}

/**
 * The address a request is judged by, and, when it is judged as from nowhere, the headers that made
 * it so. Only a loopback peer's headers matter: any other peer is not loopback however it was
 * relayed, and a balancer on another machine that TRUSTED_PROXIES names is trusted for who its
 * clients are (fair turns), never for steering. A loopback peer that sent a forwarding header is a
 * proxy on this machine: unless TRUSTED_PROXIES names it, its request has no client address (only
 * the token passes). A named proxy's request is judged by the client the headers name
 * (fair/forwarded.ts: the rightmost hop not itself a trusted proxy, every header agreeing), and
 * counts as loopback only when that client and every proxy skipped on the way are loopback too: a
 * "127.0.0.1" written by a balancer on another machine is that machine.
 */
export function clientBehindProxy(peer: string | undefined, headers: HeaderSource, trustedProxies: TrustedProxies): { address: string | undefined; proxied?: string } {
  if (peer === undefined || !isLoopback(peer)) return { address: peer };
  const present = forwardingHeaders(headers);
  if (present.length === 0) return { address: peer };
  const proxied = present.join(", ");
  if (!isTrustedProxy(peer, trustedProxies)) return { address: undefined, proxied };
  const r = relayedClient(headers, trustedProxies);
  return r?.ok && r.local ? { address: r.client } : { address: undefined, proxied };
}
