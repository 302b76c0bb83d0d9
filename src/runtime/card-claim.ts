/**
 * One turnstile per card on a machine. Two instances guarding the same Ollama or ComfyUI would be
 * two locks for one GPU, whatever ports they listen on. So before its listeners bind, an instance
 * claims each upstream it guards, machine-wide; a second instance that finds one claimed refuses
 * to start and names the holder.
 *
 * A claim is a local socket the holder listens on, named from a hash of the upstream's URL (see
 * claim-socket.ts for each system). The kernel frees it when the holder dies, `kill -9` included,
 * so a successor starts at once; the holder answers whoever connects with one line saying who it
 * is. Upstream URLs are compared normalized (upstreamKeys), one claim per address a URL's host
 * resolves to: two instances that share only their ComfyUI conflict too, and `http://gpu-box:11434`
 * is the `127.0.1.1` /etc/hosts gives that name. The pure parts are here; the sockets are behind
 * ClaimSocket and the name lookup behind ResolveHost, each with a fake for tests
 * (claim-socket-fake.ts; resolve-host.ts is the real lookup).
 */

export interface ClaimSocket {
  /**
   * Listen at `address` (not keeping the process alive), answering every peer with `answer()`;
   * "taken" when another process listens there. Any other failure throws.
   */
  listen(address: string, answer: () => string): Promise<HeldAddress | "taken">;
  /** The line the process listening at `address` answers with, or undefined (gone, silent, slow). */
  ask(address: string): Promise<string | undefined>;
}

export interface HeldAddress {
  release(): void;
}

/** Which naming applies: abstract Unix sockets, Windows named pipes, or socket files. */
export type ClaimSystem = "linux" | "win32" | "other";

/** Who holds a claim, as it says itself. */
export interface Holder {
  pid: number;
  /** The holder's listener URLs (its LISTEN_* values until they are bound). */
  listening: string[];
}

/** Loopback names that reach the same server: an upstream is one upstream under any of them. */
const LOOPBACK = new Set(["localhost", "[::1]", "0.0.0.0", "[::]"]);

/** This machine as an upstream URL may name it besides loopback: its host name and its addresses. */
export interface MachineNames {
  name: string;
  addresses: string[];
}

/**
 * A host name's addresses (all of them, IPv4 and IPv6), as the system resolver gives them; throws
 * when it cannot tell (no such name, no answer in time). Injected: tests run without a resolver.
 */
export type ResolveHost = (name: string) => Promise<string[]>;

/**
 * The host as the claim compares it: this machine, under any spelling that reaches it, is
 * `localhost`. An operator's second copy pointed at `http://gpu-box:11434` or the LAN address
 * guards the same Ollama as the service's `http://127.0.0.1:11434`; an over-wide match only
 * refuses a start, a missed one splits the lock.
 */
function claimHost(hostname: string, machine: MachineNames | undefined): string {
  // WHATWG URL already reads 127.1 and 127.0.0.1. as 127.0.0.1 and writes ::ffff:127.0.0.1 as
  // ::ffff:7f00:1. A connect to an IPv4-mapped address goes to that IPv4 address (::ffff:0:0 reaches
  // a local server like 0.0.0.0 does), so it is judged as its IPv4 address.
  const host = unmapped(hostname.replace(/\.$/, ""));
  // `*.localhost` is loopback by definition (RFC 6761 §6.3), whether or not the resolver says so.
  if (LOOPBACK.has(host) || host.endsWith(".localhost") || /^127\./.test(host)) return "localhost";
  if (!machine) return host;
  if (host === machine.name.toLowerCase().replace(/\.$/, "")) return "localhost";
  const own = machine.addresses.some((a) => {
    const bare = a.replace(/%.*$/, "").toLowerCase();
    return host === bare || host === `[${bare}]`;
  });
  return own ? "localhost" : host;
}

/** `[::ffff:a.b.c.d]` as WHATWG URL writes it (`[::ffff:xxxx:yyyy]`) → `a.b.c.d`; any other host as it is. */
function unmapped(host: string): string {
  const m = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(host);
  if (!m) return host;
  const hi = parseInt(m[1]!, 16);
  const lo = parseInt(m[2]!, 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/**
 * Whether the claim must ask the resolver what `hostname` (as WHATWG URL writes it) names: a
 * name, not an IP literal and not one the pure rules already know as this machine.
 */
export function needsLookup(hostname: string, machine?: MachineNames): boolean {
  const host = claimHost(hostname, machine);
  return host !== "localhost" && !host.startsWith("[") && !/^[0-9.]+$/.test(host);
}

/** An address as a resolver writes it, as a URL host: IPv6 in brackets, the way claimHost reads hosts. */
function asUrlHost(address: string): string {
  return new URL(`http://${address.includes(":") ? `[${address.replace(/%.*$/, "")}]` : address}/`).hostname;
}

/**
 * An upstream URL as the operator would recognize it, in one spelling: scheme and host in lower
 * case, the port always written, no credentials, query or fragment, no trailing slash.
 */
export function normalizeUpstream(url: string): string {
  const u = new URL(url);
  const port = u.port || (u.protocol === "https:" ? "443" : "80");
  return `${u.protocol}//${u.hostname}:${port}${u.pathname.replace(/\/+$/, "")}`;
}

/**
 * What a claim is keyed by: the normalized URL with every loopback name made one, and a name
 * replaced by each address it resolves to (`resolved`, from ResolveHost; absent: the name as
 * spelled). A name with several addresses is claimed at each, so a copy that names any one of them
 * is refused; all of this machine's (loopback, 0.0.0.0, its own interfaces) are one, `localhost`.
 */
export function upstreamKeys(url: string, machine?: MachineNames, resolved?: readonly string[]): string[] {
  const u = new URL(normalizeUpstream(url));
  const hosts = resolved && resolved.length > 0 && needsLookup(u.hostname, machine) ? resolved.map(asUrlHost) : [u.hostname];
  const keys = hosts.map((h) => `${u.protocol}//${claimHost(h, machine)}:${u.port}${u.pathname === "/" ? "" : u.pathname}`);
  return [...new Set(keys)].sort();
}

/** The key of a URL as spelled, without asking a resolver. */
export function upstreamKey(url: string, machine?: MachineNames): string {
  return upstreamKeys(url, machine)[0]!;
}

/**
 * The socket address for a key. The same on every start, for every user and every version, so
 * that a service and a double-clicked copy find each other.
 */
export function claimAddress(key: string, system: ClaimSystem, tmpdir: string): string {
  const id = new Bun.CryptoHasher("sha256").update(key).digest("hex").slice(0, 32);
  if (system === "linux") return `\0gpu-turnstile/${id}`;
  if (system === "win32") return `\\\\.\\pipe\\gpu-turnstile-${id}`;
  return `${tmpdir.replace(/\/+$/, "")}/gpu-turnstile-${id}.sock`;
}

/** The line a holder answers with. */
export function holderLine(h: Holder): string {
  return `${JSON.stringify({ pid: h.pid, listening: h.listening })}\n`;
}

/** Longest answer read from a holder: a squatter cannot make us read without end. */
export const MAX_HOLDER_LINE = 4096;

/**
 * A holder's answer, or undefined when it is not one. Whatever listens on the address could have
 * written it, so only a pid and short printable URLs are taken (no escape sequences reach the
 * terminal).
 */
export function parseHolderLine(text: string): Holder | undefined {
  const nl = text.indexOf("\n");
  let v: unknown;
  try {
    v = JSON.parse(nl < 0 ? text : text.slice(0, nl));
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null) return undefined;
  const { pid, listening } = v as { pid?: unknown; listening?: unknown };
  if (typeof pid !== "number" || !Number.isSafeInteger(pid) || pid <= 0) return undefined;
  const urls = Array.isArray(listening) ? listening.filter((l): l is string => typeof l === "string" && /^[\x21-\x7e]{1,200}$/.test(l)).slice(0, 4) : [];
  return { pid, listening: urls };
}

/** The one line a refused start prints. */
export function refusal(upstream: string, holder: Holder | undefined): string {
  const who = holder ? `pid ${holder.pid}, listening on ${holder.listening.length ? holder.listening.join(" and ") : "nothing yet"}` : "pid unknown";
  return `another gpu-turnstile (${who}) already guards ${upstream}`;
}

export interface ClaimOptions {
  /** OLLAMA_URL and COMFY_URL, the empty ones left out. */
  upstreams: string[];
  socket: ClaimSocket;
  system: ClaimSystem;
  tmpdir: string;
  pid: number;
  /** What to answer before the listeners are bound (their LISTEN_* values). */
  listening: string[];
  /** This machine's name and addresses: an upstream named by them is a local one (upstreamKeys). */
  machine?: MachineNames;
  /**
   * Resolves an upstream's host name (resolve-host.ts). Absent: names are claimed as spelled.
   * A name that does not resolve fails the claim (it throws): the copy cannot tell whether that
   * name is this machine, and a missed claim splits the lock.
   */
  resolve?: ResolveHost;
}

export interface CardClaim {
  /** Once the listeners are bound: their URLs, for the answer to a second instance. */
  listening: string[];
  release(): void;
}

export type ClaimResult = { ok: true; claim: CardClaim } | { ok: false; message: string };

/**
 * Claim every upstream, or none. Taken in the order of their keys, so two instances starting
 * together with the same upstreams cannot each take one and refuse each other.
 */
export async function claimCard(opts: ClaimOptions): Promise<ClaimResult> {
  const byKey = new Map<string, string>();
  for (const u of opts.upstreams) {
    const host = new URL(u).hostname;
    let resolved: string[] | undefined;
    if (opts.resolve && needsLookup(host, opts.machine)) {
      try {
        resolved = await opts.resolve(host);
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        throw new Error(`the upstream host ${host} does not resolve (${why}), so it cannot be told whether it names this machine; use an IP address, or start once the name resolves`);
      }
    }
    for (const key of upstreamKeys(u, opts.machine, resolved)) if (!byKey.has(key)) byKey.set(key, normalizeUpstream(u));
  }
  const claim: CardClaim & { held: HeldAddress[] } = {
    listening: opts.listening,
    held: [],
    release() {
      for (const h of this.held.splice(0)) h.release();
    },
  };
  const answer = () => holderLine({ pid: opts.pid, listening: claim.listening });
  for (const key of [...byKey.keys()].sort()) {
    const address = claimAddress(key, opts.system, opts.tmpdir);
    let got: HeldAddress | "taken";
    try {
      got = await opts.socket.listen(address, answer);
    } catch (err) {
      claim.release();
      throw err;
    }
    if (got === "taken") {
      claim.release();
      const said = await opts.socket.ask(address);
      return { ok: false, message: refusal(byKey.get(key)!, said === undefined ? undefined : parseHolderLine(said)) };
    }
    claim.held.push(got);
  }
  return { ok: true, claim };
}
