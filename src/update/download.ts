/**
 * One bounded GET: the URL policy on every hop, redirects followed by hand (at most
 * MAX_REDIRECTS, each one checked), a byte limit enforced while streaming, and a body that must
 * be exactly as long as the server (and the release metadata) said. The caller's signal carries
 * the timeout.
 */
import type { FetchFn } from "./types.ts";
import { UpdateRefused } from "./types.ts";
import { urlRefusal } from "./url-policy.ts";

export const MAX_REDIRECTS = 5;

export interface FetchLimitedOptions {
  fetch: FetchFn;
  signal: AbortSignal;
  userAgent: string;
  /** names the download in every message, e.g. "asset gpu-turnstile.exe" */
  what: string;
  /** host[:port] every hop must stay on (see url-policy.ts) */
  allowedHost: string;
  maxBytes: number;
  /** the body must be exactly this long (release metadata, or 64 for a signature) */
  exactBytes?: number;
  accept?: string;
  /** message for a 404 (the default says which URL) */
  notFound?: string;
}

export async function fetchLimited(startUrl: string, o: FetchLimitedOptions): Promise<Uint8Array> {
  if (o.exactBytes !== undefined && o.exactBytes > o.maxBytes) {
    throw new UpdateRefused(`${o.what}: too large (${o.exactBytes} bytes, limit ${o.maxBytes})`);
  }
  let url = parseUrl(startUrl, o.what);
  for (let hop = 0; ; hop++) {
    const refusal = urlRefusal(url, o.allowedHost);
    if (refusal) throw new UpdateRefused(`${o.what}: ${hop ? "redirect " : ""}${refusal}`);
    const res = await send(url, o);
    if (res.status >= 300 && res.status < 400 && res.headers.has("location")) {
      await res.body?.cancel();
      if (hop >= MAX_REDIRECTS) throw new UpdateRefused(`${o.what}: more than ${MAX_REDIRECTS} redirects`);
      url = parseUrl(new URL(res.headers.get("location") ?? "", url).href, o.what);
      continue;
    }
    if (!res.ok) {
      await res.body?.cancel();
      if (res.status === 404) throw new UpdateRefused(o.notFound ?? `${o.what}: not found (404) at ${url.href}`);
      throw new UpdateRefused(`${o.what}: HTTP ${res.status} from ${url.host}`);
    }
    return await readBody(res, o);
  }
}

function parseUrl(text: string, what: string): URL {
  try {
    return new URL(text);
  } catch {
    throw new UpdateRefused(`${what}: bad URL ${JSON.stringify(text)}`);
  }
}

async function send(url: URL, o: FetchLimitedOptions): Promise<Response> {
  try {
    return await o.fetch(url, {
      redirect: "manual",
      signal: o.signal,
      // identity: a compressed body would make Content-Length useless for the truncation check
      headers: { "user-agent": o.userAgent, accept: o.accept ?? "*/*", "accept-encoding": "identity" },
    });
  } catch (err) {
    throw new UpdateRefused(`${o.what}: ${failureText(err, o.signal)}`, { cause: err });
  }
}

async function readBody(res: Response, o: FetchLimitedOptions): Promise<Uint8Array> {
  const encoded = (res.headers.get("content-encoding") ?? "identity") !== "identity";
  const lengthHeader = res.headers.get("content-length");
  const declared = lengthHeader !== null && !encoded ? Number(lengthHeader) : undefined;
  if (declared !== undefined && declared > o.maxBytes) {
    await res.body?.cancel();
    throw new UpdateRefused(`${o.what}: too large (Content-Length ${declared}, limit ${o.maxBytes} bytes)`);
  }
  if (declared !== undefined && o.exactBytes !== undefined && declared !== o.exactBytes) {
    await res.body?.cancel();
    throw new UpdateRefused(`${o.what}: Content-Length ${declared} differs from the expected ${o.exactBytes} bytes`);
  }
  // With a declared length the body goes straight into one buffer: a 100 MiB binary is not
  // held twice while it is joined.
  const sink = new ByteSink(declared);
  const reader = res.body?.getReader();
  try {
    for (;;) {
      if (!reader) break;
      const { done, value } = await reader.read();
      if (done) break;
      if (sink.size + value.byteLength > o.maxBytes) {
        await reader.cancel();
        throw new UpdateRefused(`${o.what}: too large (more than ${o.maxBytes} bytes)`);
      }
      if (declared !== undefined && sink.size + value.byteLength > declared) {
        await reader.cancel();
        throw new UpdateRefused(`${o.what}: longer than its Content-Length ${declared}`);
      }
      sink.push(value);
    }
  } catch (err) {
    if (err instanceof UpdateRefused) throw err;
    throw new UpdateRefused(`${o.what}: download broke off after ${sink.size} bytes: ${failureText(err, o.signal)}`, {
      cause: err,
    });
  }
  if (declared !== undefined && sink.size !== declared) {
    throw new UpdateRefused(`${o.what}: truncated (${sink.size} of ${declared} bytes)`);
  }
  if (o.exactBytes !== undefined && sink.size !== o.exactBytes) {
    throw new UpdateRefused(`${o.what}: ${sink.size} bytes, expected exactly ${o.exactBytes}`);
  }
  return sink.bytes();
}

class ByteSink {
  size = 0;
  private readonly fixed: Uint8Array | undefined;
  private readonly chunks: Uint8Array[] = [];
  constructor(length: number | undefined) {
    this.fixed = length === undefined ? undefined : new Uint8Array(length);
  }
  push(chunk: Uint8Array): void {
    if (this.fixed) this.fixed.set(chunk, this.size);
    else this.chunks.push(chunk);
    this.size += chunk.byteLength;
  }
  bytes(): Uint8Array {
    if (this.fixed) return this.fixed;
    const out = new Uint8Array(this.size);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.byteLength;
    }
    return out;
  }
}

function failureText(err: unknown, signal: AbortSignal): string {
  if (signal.aborted) {
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === "TimeoutError") return "timed out";
    return "cancelled";
  }
  return err instanceof Error ? err.message : String(err);
}
