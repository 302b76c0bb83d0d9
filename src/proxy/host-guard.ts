/**
 * Ollama's DNS-rebinding defence, kept at the turnstile.
 *
 * A page on evil.example whose name is re-pointed at 127.0.0.1 makes the browser send
 * `Host: evil.example:11434` (and `Origin: http://evil.example:11434`) to a loopback server. A
 * loopback-bound Ollama refuses every Host that does not name this machine (allowedHostsMiddleware
 * in its server/routes.go). The turnstile sends the upstream its own Host, so Ollama never sees
 * the client's: the same rule is applied here, before anything is forwarded, on both listeners.
 *
 * The rule, as Ollama's: a listener bound to every interface or to a non-loopback address lets
 * any Host through. One bound to loopback lets through only an empty Host, `localhost`, this
 * machine's name, names under `.localhost`, `.local` or `.internal`, and loopback, private,
 * unspecified or this machine's own IP addresses — plus what ALLOWED_HOSTS names.
 */
import type { BlockList } from "node:net";

/** ALLOWED_HOSTS, parsed: names (lower-case), `*.suffix` wildcards, or `*` for any Host. */
export interface AllowedHosts {
  any: boolean;
  names: ReadonlySet<string>;
  /** ".suffix" for each `*.suffix` entry. */
  suffixes: readonly string[];
}

export const NO_EXTRA_HOSTS: AllowedHosts = { any: false, names: new Set(), suffixes: [] };

/** Comma-separated entries; an IPv6 address may be written with or without brackets. */
export function parseAllowedHosts(text: string): AllowedHosts {
  const entries = text
    .split(",")
    .map((e) => e.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1"))
    .filter(Boolean);
  if (entries.length === 0) return NO_EXTRA_HOSTS;
  return {
    any: entries.includes("*"),
    names: new Set(entries.filter((e) => !e.startsWith("*"))),
    suffixes: entries.filter((e) => e.startsWith("*.")).map((e) => e.slice(1)),
  };
}

export interface HostGuardOptions {
  /** The listener's bind host as parseListen gives it; undefined = every interface. */
  bindHost: string | undefined;
  allowed: AllowedHosts;
  /** This machine's name (os.hostname()). */
  machineName: string;
  /** This machine's addresses; asked only for an IP Host outside the local ranges. */
  machineAddresses: () => string[];
}

/** Loopback, private (RFC 1918, RFC 4193) and unspecified: Go's netip IsLoopback/IsPrivate/IsUnspecified. */
/**
 * node:net is loaded when the first address is compared, not at start: importing it is ~3 ms of
 * the compiled binary's ~15 ms start-up (docs/BENCHMARKS.md), and /healthz never needs it.
 */
let netModule: typeof import("node:net") | undefined;
const net = (): typeof import("node:net") => (netModule ??= require("node:net") as typeof import("node:net"));
const isIP = (s: string): number => net().isIP(s);

/** An IPv4 or IPv6 address, not a name. */
export const isIpLiteral = (host: string): boolean => isIP(host) !== 0;

let ranges: { local: BlockList; loopback: BlockList } | undefined;
function rangeLists(): { local: BlockList; loopback: BlockList } {
  if (ranges) return ranges;
  const local = new (net().BlockList)();
  local.addSubnet("127.0.0.0", 8, "ipv4");
  local.addSubnet("10.0.0.0", 8, "ipv4");
  local.addSubnet("172.16.0.0", 12, "ipv4");
  local.addSubnet("192.168.0.0", 16, "ipv4");
  local.addAddress("0.0.0.0", "ipv4");
  local.addAddress("::1", "ipv6");
  local.addAddress("::", "ipv6");
  local.addSubnet("fc00::", 7, "ipv6");
  const loopback = new (net().BlockList)();
  loopback.addSubnet("127.0.0.0", 8, "ipv4");
  loopback.addAddress("::1", "ipv6");
  return (ranges = { local, loopback });
}

const LOCAL_SUFFIXES = [".localhost", ".local", ".internal"];

/** Verdicts remembered per Host value; a flood of distinct names only empties the memory. */
const CACHE_LIMIT = 1024;

/** True when a listener bound to `bindHost` is reachable from this machine only. */
export function isLoopbackBind(bindHost: string | undefined): boolean {
  if (bindHost === undefined) return false;
  const h = bindHost.toLowerCase();
  if (h === "localhost" || h.endsWith(".localhost")) return true;
  return inRanges(rangeLists().loopback, h);
}

/**
 * Whether an upstream URL's host is this machine: a loopback name or address, this machine's
 * name, or one of its interface addresses. Only such an address answers "connection refused"
 * from this machine's own kernel, which proves no process listens there (ollama/unload.ts); a
 * remote refusal may come from a firewall in front of a running service. Names are not resolved.
 */
export function namesThisMachine(urlHost: string, machineName: string, addresses: () => string[]): boolean {
  const h = urlHost.toLowerCase().replace(/^\[|\]$/g, "");
  if (isLoopbackBind(h) || h === machineName.toLowerCase()) return true;
  return isIP(h) !== 0 && isMachineAddress(h, addresses());
}

/**
 * The check for one listener: Host header value → may it pass. A Host that passed is remembered,
 * so the usual request costs one Map lookup; a refused one is judged again each time (refusals
 * are rare, and an address of this machine may appear later).
 */
export function hostGuard(opts: HostGuardOptions): (host: string) => boolean {
  if (opts.allowed.any) return () => true;
  // Made at the first request rather than at start (see net() above).
  let guard: ((host: string) => boolean) | undefined;
  return (hostHeader) => (guard ??= makeGuard(opts))(hostHeader);
}

function makeGuard(opts: HostGuardOptions): (host: string) => boolean {
  if (!isLoopbackBind(opts.bindHost)) return () => true;
  const machineName = opts.machineName.toLowerCase();
  const passed = new Map<string, true>();
  return (hostHeader) => {
    if (passed.has(hostHeader)) return true;
    const host = hostName(hostHeader);
    const ok =
      host === "" ||
      host === "localhost" ||
      host === machineName ||
      LOCAL_SUFFIXES.some((s) => host.endsWith(s)) ||
      opts.allowed.names.has(host) ||
      opts.allowed.suffixes.some((s) => host.endsWith(s)) ||
      (isIP(host) !== 0 && (inRanges(rangeLists().local, host) || isMachineAddress(host, opts.machineAddresses())));
    if (ok) {
      if (passed.size >= CACHE_LIMIT) passed.clear();
      passed.set(hostHeader, true);
    }
    return ok;
  };
}

/** The host part of a Host header value, lower-case, without port or IPv6 brackets (Go's net.SplitHostPort). */
export function hostName(hostHeader: string): string {
  const h = hostHeader.toLowerCase();
  if (h.startsWith("[")) {
    const close = h.indexOf("]");
    return close < 0 ? h : h.slice(1, close);
  }
  const colon = h.lastIndexOf(":");
  return colon < 0 ? h : h.slice(0, colon);
}

function inRanges(list: BlockList, ip: string): boolean {
  const family = isIP(ip);
  if (family === 0) return false;
  try {
    return list.check(ip, family === 4 ? "ipv4" : "ipv6");
  } catch {
    // A zone index (fe80::1%eth0) or another form the list cannot compare.
    return false;
  }
}

function isMachineAddress(ip: string, addresses: string[]): boolean {
  if (addresses.length === 0) return false;
  // Compared as addresses, not as text: ::FFFF:A00:1 and 0:0::ffff:10.0.0.1 are one address.
  const own = new (net().BlockList)();
  for (const a of addresses) {
    const family = isIP(a);
    try {
      if (family !== 0) own.addAddress(a, family === 4 ? "ipv4" : "ipv6");
    } catch {
      // not comparable (a zone index): cannot be what a Host names either
    }
  }
  return inRanges(own, ip);
}
