/**
 * Who a client is (issue 30), for fair turns and their place in line: the API key it sends
 * (`Authorization: Bearer …`), else ComfyUI's `client_id`, else its address. CLIENTS_FILE maps
 * keys, client_id prefixes and address ranges to a name and a class; the first rule that matches,
 * looked up in that order, names the client. One that matches none is named by a short hash of its
 * key or client_id, or by its address, in the class `normal`. A key is never kept or shown: rules
 * hold a hash of it, and names made from one are a hash too. Pure: the file is read by the caller.
 */
import { createHash } from "node:crypto";
import type { HeaderSource } from "./forwarded.ts";

export interface ClientRule {
  readonly name: string;
  readonly cls: string;
  /** sha256 hex of each key. */
  readonly keyHashes: readonly string[];
  readonly clientIdPrefixes: readonly string[];
  readonly ranges: readonly Range[];
  /** `images=N`: its own image-job quota (QUOTA_IMAGE_JOBS otherwise). */
  readonly images?: number;
  /** `llm=N`: its own quota of concurrent LLM requests (QUOTA_LLM_REQUESTS otherwise). */
  readonly llm?: number;
  /** `gpu=N`: its own GPU seconds per QUOTA_GPU_WINDOW (QUOTA_GPU_SECONDS otherwise). */
  readonly gpu?: number;
}

export interface Identity {
  /** Shown in status and logs: never a key. */
  readonly client: string;
  readonly cls: string;
  /** What told it: a rule of CLIENTS_FILE, or the fallback. */
  readonly by: "key" | "client_id" | "address" | "nobody";
  /** True when a CLIENTS_FILE rule named it. */
  readonly known: boolean;
  /** Its CLIENTS_FILE `images=N`, `llm=N` and `gpu=N`, if any. */
  readonly images?: number;
  readonly llm?: number;
  readonly gpu?: number;
}

export interface Seen {
  readonly authorization?: string | null;
  readonly clientId?: string;
  /** The TCP peer. */
  readonly address?: string;
  /** The request's headers: when the peer is a TRUSTED_PROXIES proxy, Fair.identify (setup.ts) goes by the client they name. */
  readonly headers?: HeaderSource;
}

export const DEFAULT_CLASS = "normal";

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

/** The bearer token of an Authorization header, or undefined. */
export function bearerKey(authorization: string | null | undefined): string | undefined {
  const m = /^\s*Bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
  return m?.[1];
}

const named = (r: ClientRule, by: Identity["by"]): Identity => ({ client: r.name, cls: r.cls, by, known: true, images: r.images, llm: r.llm, gpu: r.gpu });

export function identify(seen: Seen, rules: readonly ClientRule[]): Identity {
  const key = bearerKey(seen.authorization);
  const keyHash = key === undefined ? undefined : sha256(key);
  if (keyHash !== undefined) {
    const r = rules.find((r) => r.keyHashes.includes(keyHash));
    if (r) return named(r, "key");
  }
  const clientId = seen.clientId || undefined;
  if (clientId !== undefined) {
    let best: ClientRule | undefined;
    let length = -1;
    for (const r of rules)
      for (const p of r.clientIdPrefixes)
        if (p.length > length && clientId.startsWith(p)) {
          best = r;
          length = p.length;
        }
    if (best) return named(best, "client_id");
  }
  const ip = seen.address === undefined ? undefined : parseIp(seen.address);
  if (ip) {
    const r = rules.find((r) => r.ranges.some((g) => inRange(ip, g)));
    if (r) return named(r, "address");
  }
  if (keyHash !== undefined) return { client: `key-${keyHash.slice(0, 8)}`, cls: DEFAULT_CLASS, by: "key", known: false };
  if (clientId !== undefined) return { client: `comfy-${sha256(clientId).slice(0, 8)}`, cls: DEFAULT_CLASS, by: "client_id", known: false };
  if (seen.address) return { client: seen.address, cls: DEFAULT_CLASS, by: "address", known: false };
  return { client: "unknown", cls: DEFAULT_CLASS, by: "nobody", known: false };
}

export type ParsedClients = { ok: true; rules: ClientRule[] } | { ok: false; line: number; message: string };

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * CLIENTS_FILE: one client a line, `name class matcher…`, where a matcher is `key=<API key>`,
 * `client_id=<prefix>` or `cidr=<address>/<bits>` (a bare address is one host), and `images=<N>`,
 * `llm=<N>` and `gpu=<seconds>` its own quotas; `#` starts a comment line. A name may appear on one line only; `classes` are the known class names.
 */
export function parseClients(text: string, classes: readonly string[]): ParsedClients {
  const rules: ClientRule[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "" || line.startsWith("#")) continue;
    const fail = (message: string): ParsedClients => ({ ok: false, line: i + 1, message });
    const [name, cls, ...matchers] = line.split(/\s+/);
    if (!NAME.test(name!)) return fail(`"${name}" is not a client name (letters, digits, . _ -; at most 64)`);
    if (rules.some((r) => r.name === name)) return fail(`client ${name} is named twice`);
    if (cls === undefined || !classes.includes(cls)) return fail(`client ${name}: class must be one of ${classes.join(", ")}${cls === undefined ? "" : `, not "${cls}"`}`);
    if (matchers.length === 0) return fail(`client ${name}: nothing identifies it (key=…, client_id=… or cidr=…)`);
    const keyHashes: string[] = [];
    const clientIdPrefixes: string[] = [];
    const ranges: Range[] = [];
    let images: number | undefined;
    let llm: number | undefined;
    let gpu: number | undefined;
    for (const m of matchers) {
      const eq = m.indexOf("=");
      const what = eq < 0 ? m : m.slice(0, eq);
      const value = eq < 0 ? "" : m.slice(eq + 1);
      // Never echo a matcher's value: it may be a key.
      if (value === "") return fail(`client ${name}: "${what}" needs a value (key=…, client_id=… or cidr=…)`);
      if (what === "key") keyHashes.push(sha256(value));
      else if (what === "client_id") clientIdPrefixes.push(value);
      else if (what === "cidr") {
        const r = parseRange(value);
        if (!r) return fail(`client ${name}: "${value}" is not an address range (e.g. 192.168.1.0/24, fd00::/8, 10.0.0.7)`);
        ranges.push(r);
      } else if (what === "images" || what === "llm" || what === "gpu") {
        if (!/^\d{1,7}$/.test(value) || (what !== "gpu" && value.length > 6)) return fail(`client ${name}: ${what}=${value} is not a number (${what === "gpu" ? "seconds per QUOTA_GPU_WINDOW, " : ""}0 = no limit)`);
        if (what === "images") images = Number(value);
        else if (what === "llm") llm = Number(value);
        else gpu = Number(value);
      } else return fail(`client ${name}: unknown matcher "${what}" (key, client_id, cidr, images, llm or gpu)`);
    }
    if (keyHashes.length + clientIdPrefixes.length + ranges.length === 0) return fail(`client ${name}: nothing identifies it (key=…, client_id=… or cidr=…)`);
    rules.push({ name: name!, cls, keyHashes, clientIdPrefixes, ranges, images, llm, gpu });
  }
  return { ok: true, rules };
}

/** An address as a 128-bit number; IPv4 (and IPv4-mapped IPv6) as ::ffff:a.b.c.d. */
export interface Ip {
  readonly v: bigint;
}

export interface Range {
  readonly base: bigint;
  /** Prefix length over the 128 bits. */
  readonly bits: number;
}

const V4_MAPPED = 0xffffn << 32n;

function parseV4(s: string): bigint | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  let v = 0n;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return undefined;
    v = (v << 8n) | BigInt(Number(p));
  }
  return v;
}

export function parseIp(s: string): Ip | undefined {
  const bare = s.startsWith("[") && s.endsWith("]") ? s.slice(1, -1) : s.replace(/%.*$/, "");
  const v4 = parseV4(bare);
  if (v4 !== undefined) return { v: V4_MAPPED | v4 };
  if (!bare.includes(":")) return undefined;
  let head = bare;
  let tail4: bigint | undefined;
  const lastColon = bare.lastIndexOf(":");
  if (bare.slice(lastColon + 1).includes(".")) {
    tail4 = parseV4(bare.slice(lastColon + 1));
    if (tail4 === undefined) return undefined;
    head = `${bare.slice(0, lastColon + 1)}0:0`;
  }
  const halves = head.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string) => (h === "" ? [] : h.split(":"));
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  const missing = 8 - left.length - right.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  let v = 0n;
  for (const g of [...left, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...right]) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    v = (v << 16n) | BigInt(parseInt(g, 16));
  }
  if (tail4 !== undefined) v = (v & ~0xffffffffn) | tail4;
  return { v };
}

export function parseRange(s: string): Range | undefined {
  const slash = s.indexOf("/");
  const ip = parseIp(slash < 0 ? s : s.slice(0, slash));
  if (!ip) return undefined;
  const isV4 = parseV4(slash < 0 ? s : s.slice(0, slash)) !== undefined;
  let bits = 128;
  if (slash >= 0) {
    const b = s.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b)) return undefined;
    const n = Number(b);
    if (n > (isV4 ? 32 : 128)) return undefined;
    bits = isV4 ? 96 + n : n;
  }
  return { base: ip.v & mask(bits), bits };
}

const mask = (bits: number) => (bits === 0 ? 0n : ((1n << 128n) - 1n) ^ ((1n << BigInt(128 - bits)) - 1n));

export function inRange(ip: Ip, r: Range): boolean {
  return (ip.v & mask(r.bits)) === r.base;
}
