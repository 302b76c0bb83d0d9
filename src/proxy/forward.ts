/**
 * One request to an upstream, the way Go's httputil.ReverseProxy does it: rewrite the target,
 * strip hop-by-hop headers, stream the body both ways, never follow redirects, never decompress.
 * Adds what a shared GPU needs: retry with backoff for an upstream that is down, and an optional
 * hold (a lock lease) taken per attempt so a request that is sleeping in backoff never keeps the
 * GPU from anyone else.
 */
import { backoffDelays, sleep } from "./backoff.ts";
import { clientResponseHeaders, hasHopByHop, upstreamRequestHeaders } from "./headers.ts";
import { joinUrl } from "../upstream/http.ts";
import { prepareBody } from "./request-body.ts";
import { onPooledBodyEnd, poolFor, type PoolRequest } from "../upstream/h1-pool.ts";
import { describeFetchError, isConnectPhaseError } from "./upstream-errors.ts";

export interface Hold {
  release(): void;
}

export interface RetryPolicy {
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** Bodies up to this many bytes (with a Content-Length) are buffered and can be replayed. */
  retryBodyLimit: number;
  /** 5xx answers to idempotent requests are retried at most this many times, then passed back. */
  max5xxRetries: number;
}

export interface RetryNotice {
  attempt: number;
  delayMs: number;
  reason: string;
}

export interface ForwardOptions {
  upstream: URL;
  /** The request's URL, when the caller has parsed it already. */
  url?: URL;
  /** The client's signal: aborting it cancels the upstream request and any backoff at once. */
  signal: AbortSignal;
  /**
   * Overrides `signal` for the upstream request itself (not for waits), when a request must outlive
   * its client. A function is called once per attempt, so a timeout it creates starts when the
   * attempt does (not when the request arrived and began waiting for the lock).
   */
  fetchSignal?: () => AbortSignal;
  clientIp?: string;
  retry: RetryPolicy;
  /** Taken before each attempt; released here when an attempt fails, otherwise handed to the caller. */
  acquire?: () => Promise<Hold>;
  onRetry?: (n: RetryNotice) => void;
  /** Sees the request body as it is first sent, under the attempt's hold (see prepareBody). */
  watchBody?: (chunk: Uint8Array) => void;
  /**
   * Shown a buffered body (small, with a Content-Length) at once, before any hold is taken: the
   * status page names the model of a request that is still waiting. Never a copy.
   */
  onBody?: (bytes: Uint8Array) => void;
}

export type ForwardResult =
  | { ok: true; response: Response; hold: Hold | undefined }
  | { ok: false; reason: string };

/**
 * Bun's fetch options beyond the standard: `decompress: false` keeps a gzip body and its
 * Content-Encoding together (Bun would otherwise inflate the body yet keep the header);
 * `duplex: "half"` is what the fetch spec requires for a streamed request body.
 */
type BunUpstreamInit = RequestInit & { decompress: boolean; duplex: "half" };

/** RFC 9110 §9.2.2: replaying these cannot do more than the first attempt did. */
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]);

/** The upstream URL for a request: the upstream's origin and path prefix, then the request's path and query. */
export function targetUrl(upstream: URL, incoming: URL): string {
  return joinUrl(upstream, incoming.pathname + incoming.search);
}

/**
 * Forward `req`. Resolves with the upstream's response (its body not yet read) or with a reason
 * the upstream could not be reached; rejects only with the client's abort reason.
 */
export async function forward(req: Request, opts: ForwardOptions): Promise<ForwardResult> {
  const { signal, retry } = opts;
  const url = targetUrl(opts.upstream, opts.url ?? new URL(req.url));
  const headers = upstreamRequestHeaders(req.headers, opts.upstream, { clientIp: opts.clientIp, proto: "http" });
  const body = await prepareBody(req, retry.retryBodyLimit, opts.watchBody);
  if (opts.onBody && body.buffered) {
    const bytes = body.peek?.();
    if (bytes) opts.onBody(bytes);
  }
  // Made on the first retry only: almost every request never needs one.
  let delays: (() => number) | undefined;
  const nextDelay = () => (delays ??= backoffDelays(retry.backoffInitialMs, retry.backoffMaxMs))();
  const replay5xx = IDEMPOTENT.has(req.method) && body.buffered;
  let retries5xx = 0;
  // Plain-http upstreams (the usual: Ollama and ComfyUI on the LAN) go through our own pooled
  // client; https ones through fetch.
  const pool = opts.upstream.protocol === "http:" ? poolFor(opts.upstream) : undefined;

  for (let attempt = 1; ; attempt++) {
    const hold = opts.acquire ? await opts.acquire() : undefined;
    let res: Response;
    try {
      const init: BunUpstreamInit = {
        method: req.method,
        headers,
        body: body.next(),
        redirect: "manual",
        decompress: false,
        signal: opts.fetchSignal?.() ?? signal,
        duplex: "half",
      };
      res = pool
        ? await pool.request({ method: req.method, target: url.slice(opts.upstream.origin.length), headers, body: init.body as PoolRequest["body"], signal: init.signal! })
        : await fetch(url, init);
    } catch (err) {
      hold?.release();
      if (signal.aborted) throw signal.reason;
      const reason = describeFetchError(err);
      if (!isConnectPhaseError(err) || !body.replayable) return { ok: false, reason };
      const delayMs = nextDelay();
      opts.onRetry?.({ attempt, delayMs, reason });
      await sleep(delayMs, signal);
      continue;
    }
    if (res.status >= 500 && replay5xx && retries5xx < retry.max5xxRetries) {
      retries5xx++;
      hold?.release();
      await res.body?.cancel().catch(() => {});
      const delayMs = nextDelay();
      opts.onRetry?.({ attempt, delayMs, reason: `upstream answered ${res.status}` });
      await sleep(delayMs, signal);
      continue;
    }
    return { ok: true, response: res, hold };
  }
}

/**
 * The response for the client: same status and body, hop-by-hop headers removed. When there are
 * none to remove (the usual case for a fixed-length answer: the HTTP client consumes `Connection`
 * and `Keep-Alive`) and the body is not being wrapped, the upstream's response itself is returned:
 * no copy of its headers, and Bun passes its body on without a JavaScript stream in between.
 */
export function relayResponse(res: Response, body: ReadableStream<Uint8Array> | null = res.body): Response {
  if (body === res.body && !hasHopByHop(res.headers)) return res;
  return new Response(body, {
    status: res.status,
    statusText: res.statusText,
    headers: clientResponseHeaders(res.headers),
  });
}

/**
 * Run `done` once when the response's body has been handed to the client in full, has failed,
 * or the client went away (its `signal`), and return the response to send. `done` must be
 * idempotent: more than one of those may fire. A pooled upstream answer says so itself; a fetch
 * body (https upstreams) is watched through a JavaScript stream.
 */
export function whenBodyDone(res: Response, signal: AbortSignal, done: () => void): Response {
  if (onPooledBodyEnd(res, done)) return relayResponse(res);
  // Bun cancels the body when the client leaves; the signal is the second line of defence.
  signal.addEventListener("abort", done, { once: true });
  return relayResponse(res, onBodyDone(res.body, done));
}

/**
 * Wrap a response body so `done` runs exactly once when it has been fully read, has failed, or
 * was cancelled because the client went away. With no body, `done` runs at once.
 */
export function onBodyDone(
  body: ReadableStream<Uint8Array> | null,
  done: () => void,
): ReadableStream<Uint8Array> | null {
  let called = false;
  const finish = () => {
    if (!called) {
      called = true;
      done();
    }
  };
  if (body === null) {
    finish();
    return null;
  }
  const reader = body.getReader();
  // Bun's "direct" stream writes straight to the socket: no queue of its own, so it adds far
  // less per open stream than a pull-based wrapper (measured in bench/ with 1,000 open streams).
  const source: DirectSource = {
    type: "direct",
    async pull(c) {
      try {
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          // A promise from write means the client is behind: wait for it before reading more.
          const w = c.write(r.value);
          if (w instanceof Promise) await w;
          // Each upstream chunk goes out at once: an NDJSON line or SSE event must not wait.
          await c.flush();
        }
        finish();
        c.close();
      } catch (err) {
        finish();
        c.close(err);
      }
    },
    cancel(reason) {
      finish();
      return reader.cancel(reason);
    },
  };
  return new ReadableStream<Uint8Array>(source as unknown as UnderlyingDefaultSource<Uint8Array>);
}

/** Bun's direct ReadableStream source (not in the DOM typings). */
interface DirectSource {
  type: "direct";
  pull(c: { write(chunk: Uint8Array): number | Promise<number>; flush(): number | Promise<number>; close(err?: unknown): void }): Promise<void>;
  cancel(reason: unknown): Promise<void>;
}
