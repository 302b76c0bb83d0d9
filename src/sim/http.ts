/**
 * What both simulated servers share at the HTTP level: the record of calls tests assert on,
 * failure injection by (method, path), and a loopback-only Bun listener.
 */
import { now } from "./clock.ts";

export interface RecordedCall {
  method: string;
  /** URL path, e.g. "/api/generate". */
  path: string;
  /** Raw query string without "?" ("" when none). */
  query: string;
  /** Request headers, names lowercased. */
  headers: Record<string, string>;
  /** Body decoded as UTF-8 ("" when none). */
  bodyText: string;
  /** Arrival time, epoch ms on the same clock as the GPU ledger. */
  at: number;
}

/**
 * Failure injection: return a Response to answer instead of the simulator, or undefined to let
 * the simulator handle the request normally (e.g. to count or delay calls).
 */
export type OverrideHandler = (req: Request) => Response | undefined | Promise<Response | undefined>;

interface Override {
  method: string;
  path: string;
  handler: OverrideHandler;
}

export class CallLog {
  readonly calls: RecordedCall[] = [];
  private overrides: Override[] = [];

  /** `enabled: false` keeps benchmarks from growing the log (and decoding bodies) without bound. */
  constructor(private readonly enabled = true) {}

  record(req: Request, url: URL, body: Uint8Array<ArrayBuffer>): void {
    if (!this.enabled) return;
    const headers: Record<string, string> = {};
    req.headers.forEach((v, k) => {
      headers[k] = v;
    });
    const call: RecordedCall = {
      method: req.method,
      path: url.pathname,
      query: url.search.slice(1),
      headers,
      bodyText: new TextDecoder().decode(body),
      at: now(),
    };
    this.calls.push(call);
  }

  clear(): void {
    this.calls.length = 0;
  }

  /** `method` "*" matches any method. The most recently added matching override runs first. */
  override(method: string, path: string, handler: OverrideHandler): () => void {
    const o: Override = { method: method.toUpperCase(), path, handler };
    this.overrides.unshift(o);
    return () => {
      this.overrides = this.overrides.filter((x) => x !== o);
    };
  }

  async runOverrides(req: Request, url: URL, body: Uint8Array<ArrayBuffer>): Promise<Response | undefined> {
    for (const o of this.overrides) {
      if (o.path !== url.pathname || (o.method !== "*" && o.method !== req.method)) continue;
      // The simulator already consumed the body to record it; hand the override a fresh request.
      const copy = new Request(req.url, {
        method: req.method,
        headers: req.headers,
        body: body.length > 0 && req.method !== "GET" && req.method !== "HEAD" ? body : undefined,
      });
      const res = await o.handler(copy);
      if (res !== undefined) return res;
    }
    return undefined;
  }
}

export async function readBody(req: Request): Promise<Uint8Array<ArrayBuffer>> {
  if (req.method === "GET" || req.method === "HEAD" || req.body === null) return new Uint8Array(0);
  return new Uint8Array(await req.arrayBuffer());
}

/**
 * The path a server routes on: Go's net/http (Ollama's gin) and aiohttp (ComfyUI) percent-decode
 * the request path once, `%2F` included, before matching routes. undefined when the encoding is
 * invalid, which Go's server answers with 400.
 */
export function routedPath(pathname: string): string | undefined {
  if (!pathname.includes("%")) return pathname;
  try {
    return decodeURIComponent(pathname);
  } catch {
    return undefined;
  }
}

export function isLoopbackHostname(h: string): boolean {
  return h === "localhost" || h === "::1" || h === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** The simulators are test and demo fixtures: they never listen beyond this machine. */
export function loopbackOnly(hostname: string | undefined): string {
  const h = hostname ?? "127.0.0.1";
  if (!isLoopbackHostname(h)) throw new Error(`simulators listen on loopback only, not ${JSON.stringify(h)}`);
  return h;
}

/** `http://host:port` with IPv6 literals bracketed. */
export function baseUrl(hostname: string, port: number): string {
  const host = hostname.includes(":") && !hostname.startsWith("[") ? `[${hostname}]` : hostname;
  return `http://${host}:${port}`;
}
