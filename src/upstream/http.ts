/** Small JSON calls the turnstile itself makes to an upstream (unload, history, free …). */
import { basicAuth } from "./headers.ts";
import { poolFor } from "./h1-pool.ts";

export class UpstreamHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
    what: string,
  ) {
    super(`${what}: HTTP ${status}${body ? ` ${body.slice(0, 200)}` : ""}`);
  }
}

export interface CallOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  body?: unknown;
  method?: string;
  /** Extra request headers (a tenant's cookie or token). */
  headers?: Record<string, string>;
}

/** Join `path` to a base URL that may itself carry a path prefix. */
export function joinUrl(base: URL, path: string): string {
  const prefix = base.pathname.endsWith("/") ? base.pathname.slice(0, -1) : base.pathname;
  return `${base.origin}${prefix}${path}`;
}

export async function callJson(base: URL, path: string, opts: CallOptions): Promise<{ status: number; text: string }> {
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  const method = opts.method ?? (opts.body === undefined ? "GET" : "POST");
  const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  const headers = new Headers(opts.headers);
  if (body !== undefined) headers.set("content-type", "application/json");
  const auth = basicAuth(base);
  if (auth) headers.set("authorization", auth);
  const url = joinUrl(base, path);
  let res: Response;
  if (base.protocol === "http:") {
    // The same pooled connections as the proxy: no fetch thread, no 256-request limit.
    headers.set("host", base.host);
    const bytes = body === undefined ? undefined : Buffer.from(body);
    res = await poolFor(base).request({ method, target: url.slice(base.origin.length), headers, body: bytes, signal });
  } else {
    res = await fetch(url, { method, headers, body, signal });
  }
  return { status: res.status, text: await res.text() };
}

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
