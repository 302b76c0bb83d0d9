/**
 * The client a relaying proxy speaks for: behind a balancer every client arrives from the
 * balancer's address, so fair turns and quotas by address need the one it forwards (issue 30).
 * Pure: headers and addresses in, an address out.
 *
 * TRUSTED_PROXIES names the proxies, by address or range, whose forwarding headers are believed: a
 * reverse proxy on this machine or a balancer on another. X-Forwarded-For, Forwarded (RFC 7239) and
 * X-Real-IP are lists of hops written left to right: the client may write any of it, and each proxy
 * appends the address it saw. So the client is the rightmost hop that is not itself a trusted proxy,
 * never the leftmost; when every hop is one, the leftmost (a client on the first proxy's own machine).
 * A proxy writes one of these headers and passes the others on as the client sent them, so every
 * header present must name the same client. Headers that disagree, or a hop that must be read and is
 * not an address (`unknown`, `_hidden`, a name, junk), tell nothing: the request is then the peer's.
 */
import { inRange, parseIp, parseRange, type Ip, type Range } from "./identity.ts";

export type TrustedProxies = readonly Range[];

export interface HeaderSource {
  get(name: string): string | null;
}

/** TRUSTED_PROXIES as written: comma-separated addresses or ranges (`192.168.1.5`, `10.0.0.0/24`, `::1`, `[fd00::1]`). */
export function parseTrustedProxies(text: string): { ok: true; proxies: Range[] } | { ok: false; message: string } {
  const proxies: Range[] = [];
  for (const item of text.split(",").map((s) => s.trim())) {
    if (item === "") continue;
    const r = parseRange(item.replace(/^\[([^\]]*)\]/, "$1"));
    if (!r) return { ok: false, message: `"${item}" is not an address or range (e.g. 127.0.0.1, 192.168.1.5, 10.0.0.0/24, ::1)` };
    proxies.push(r);
  }
  return { ok: true, proxies };
}

export function isTrustedProxy(address: string | undefined, proxies: TrustedProxies): boolean {
  const ip = address === undefined || proxies.length === 0 ? undefined : parseIp(address);
  return ip !== undefined && proxies.some((r) => inRange(ip, r));
}

/** The headers a proxy writes for the client it relays, as they are spelt in messages to the operator. */
const FORWARDING = [
  ["forwarded", "Forwarded"],
  ["x-forwarded-for", "X-Forwarded-For"],
  ["x-real-ip", "X-Real-IP"],
] as const;

/** The forwarding headers a request carries, by name ("X-Forwarded-For"); none = not relayed. */
export function forwardingHeaders(headers: HeaderSource): string[] {
  return FORWARDING.filter(([h]) => headers.get(h) !== null).map(([, name]) => name);
}

/**
 * `local`: the client and every trusted hop skipped on the way to it are loopback addresses — all
 * of them on the machine the headers' last writer runs on. Only when that writer is itself a
 * loopback peer is the client on this machine (status/auth.ts clientBehindProxy).
 */
export type Relayed = { ok: true; client: string; local: boolean } | { ok: false };

/** The client the forwarding headers name; undefined when there are none. The caller checks that its peer is trusted. */
export function relayedClient(headers: HeaderSource, proxies: TrustedProxies): Relayed | undefined {
  let found: { ok: true; client: string; local: boolean } | undefined;
  for (const [h] of FORWARDING) {
    const value = headers.get(h);
    if (value === null) continue;
    const hops = h === "forwarded" ? forwardedFors(value) : value.split(",");
    const r = hops && walk(hops, proxies);
    if (!r || (found && found.client !== r.client)) return { ok: false };
    found = { ok: true, client: r.client, local: r.local && (found?.local ?? true) };
  }
  return found;
}

/** The address identity goes by: the forwarded client when a trusted proxy relays, else the peer itself. */
export function clientAddress(peer: string | undefined, headers: HeaderSource | undefined, proxies: TrustedProxies): string | undefined {
  if (headers === undefined || !isTrustedProxy(peer, proxies)) return peer;
  const r = relayedClient(headers, proxies);
  return r?.ok ? r.client : peer;
}

const LOOPBACK = [parseRange("127.0.0.0/8")!, parseRange("::1")!];

/** 127.0.0.0/8 or ::1, in any spelling (IPv4-mapped, with a zone, in full). */
export function isLoopback(address: string): boolean {
  const ip = parseIp(address);
  return ip !== undefined && LOOPBACK.some((r) => inRange(ip, r));
}

/** Right to left, past the trusted proxies. */
function walk(hops: readonly string[], proxies: TrustedProxies): { client: string; local: boolean } | undefined {
  let local = true;
  for (let i = hops.length - 1; i >= 0; i--) {
    const ip = hopAddress(hops[i]!);
    if (ip === undefined) return undefined;
    const loopback = LOOPBACK.some((r) => inRange(ip, r));
    local &&= loopback;
    if (i === 0 || !proxies.some((r) => inRange(ip, r))) return { client: formatIp(ip), local };
  }
  return undefined;
}

/** One hop as proxies write it: `a.b.c.d`, `a.b.c.d:port`, `v6`, `[v6]` or `[v6]:port`. */
function hopAddress(hop: string): Ip | undefined {
  const h = hop.trim();
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(h);
  if (bracketed) return parseIp(bracketed[1]!);
  const v4port = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(h);
  return parseIp(v4port ? v4port[1]! : h);
}

/**
 * The `for=` of each element of a Forwarded header (RFC 7239 §4), unquoted; undefined when an
 * element has none, or two. Commas and semicolons inside a quoted string belong to the value.
 */
function forwardedFors(value: string): string[] | undefined {
  const fors: string[] = [];
  for (const element of splitOutsideQuotes(value, ",")) {
    let found: string | undefined;
    for (const pair of splitOutsideQuotes(element, ";")) {
      const eq = pair.indexOf("=");
      if (eq < 0 || pair.slice(0, eq).trim().toLowerCase() !== "for") continue;
      if (found !== undefined) return undefined;
      const v = pair.slice(eq + 1).trim();
      found = v.startsWith('"') ? v.slice(1, v.endsWith('"') && v.length > 1 ? -1 : undefined).replace(/\\(.)/g, "$1") : v;
    }
    if (found === undefined) return undefined;
    fors.push(found);
  }
  return fors;
}

function splitOutsideQuotes(s: string, sep: string): string[] {
  const parts: string[] = [];
  let quoted = false;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === "\\" && quoted) i++;
    else if (c === '"') quoted = !quoted;
    else if (c === sep && !quoted) {
      parts.push(s.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(s.slice(start));
  return parts;
}

/** One spelling per address, as clients are named: IPv4 (and IPv4-mapped) dotted, IPv6 compressed (RFC 5952). */
export function formatIp(ip: Ip): string {
  const v = ip.v;
  if (v >> 32n === 0xffffn) return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join(".");
  const groups = Array.from({ length: 8 }, (_, i) => Number((v >> BigInt(112 - 16 * i)) & 0xffffn));
  // The longest run of two or more zero groups (the first of equals) becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = (g: number[]) => g.map((x) => x.toString(16)).join(":");
  return best < 0 ? hex(groups) : `${hex(groups.slice(0, best))}::${hex(groups.slice(best + bestLen))}`;
}
