/** Small JSON calls the turnstile itself makes to an upstream (unload, history, free …). */

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
}

/** Join `path` to a base URL that may itself carry a path prefix. */
export function joinUrl(base: URL, path: string): string {
  const prefix = base.pathname.endsWith("/") ? base.pathname.slice(0, -1) : base.pathname;
  return `${base.origin}${prefix}${path}`;
}

export async function callJson(base: URL, path: string, opts: CallOptions): Promise<{ status: number; text: string }> {
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  const res = await fetch(joinUrl(base, path), {
    method: opts.method ?? (opts.body === undefined ? "GET" : "POST"),
    headers: opts.body === undefined ? undefined : { "content-type": "application/json" },
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    signal,
  });
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
