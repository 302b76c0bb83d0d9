/**
 * One request to an upstream, the way Go's httputil.ReverseProxy does it: rewrite the target,
 * strip hop-by-hop headers, stream the body both ways, never follow redirects, never decompress.
 * Adds what a shared GPU needs: retry with backoff for an upstream that is down, and an optional
 * hold (a lock lease) taken per attempt so a request that is sleeping in backoff never keeps the
 * GPU from anyone else.
 */
import { formatDuration } from "../config/duration.ts";
import { backoffDelays, sleep } from "./backoff.ts";
import { clientResponseHeaders, hasHopByHop, upstreamRequestHead, upstreamRequestHeaders } from "../upstream/headers.ts";
import { joinUrl } from "../upstream/http.ts";
import { NO_BODY, prepareBody } from "./request-body.ts";
import { onPooledBodyEnd, pooledUpstream, type Activity, type BodyEnd, type Pool, type PoolRequest } from "../upstream/h1-pool.ts";
import { IdleTimeoutError, type IdleWatch } from "./idle-watch.ts";
import { describeFetchError, isConnectPhaseError } from "../upstream/upstream-errors.ts";

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
  /** An upstream that keeps refusing connections is given up on this long after the first refusal. */
  retryTimeoutMs: number;
}

export interface RetryNotice {
  attempt: number;
  delayMs: number;
  reason: string;
}

/** The path and query of a request as received (the front door cuts them from Bun's URL). */
export interface RequestTarget {
  readonly pathname: string;
  /** `?` and the query, or "". */
  readonly search: string;
}

export interface ForwardOptions {
  upstream: URL;
  /** The request's path and query, when the caller has them already (front-door.ts). */
  url?: RequestTarget;
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
  /**
   * Whether the upstream is known to be down (its health probe says so): a refused connection is
   * then answered at once instead of retried for UPSTREAM_RETRY_TIMEOUT. Asked at each failed
   * attempt, not once on arrival: a request that came before the probe's verdict (just after start,
   * or just after the upstream died) stops retrying as soon as the probe has found it down.
   */
  knownDown?: () => boolean;
  /** Ends the client's connection silently when the upstream breaks off a body before Bun first pulled it (h1-pool.ts). */
  cutClient?: () => void;
  /** Sees the request body as it is first sent, under the attempt's hold (see prepareBody). */
  watchBody?: (chunk: Uint8Array) => void;
  /**
   * Shown a buffered body (small, with a Content-Length) at once, before any hold is taken: the
   * status page names the model of a request that is still waiting. Never a copy. A promise
   * (an inflated zstd body) is awaited, and its rejection is the request's.
   */
  onBody?: (bytes: Uint8Array) => void | Promise<void>;
  /**
   * An LLM exchange's idle watch: it sees the bytes move, it cuts the upstream request when it
   * fires, and when that was before the answer started, forward() rejects with IdleTimeoutError.
   */
  watch?: IdleWatch;
  /** One more header field for the upstream (lower-case name), e.g. app.ts's NESTED_MARK; asked per attempt, after `acquire`. */
  mark?: () => readonly [string, string] | undefined;
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

function fetchInit(method: string, headers: Headers, body: BodyInit | undefined, signal: AbortSignal): BunUpstreamInit {
  return { method, headers, body, redirect: "manual", decompress: false, signal, duplex: "half" };
}

/** RFC 9110 §9.2.2: replaying these cannot do more than the first attempt did. */
const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]);

/** The upstream URL for a request: the upstream's origin and path prefix, then the request's path and query. */
export function targetUrl(upstream: URL, incoming: RequestTarget): string {
  return joinUrl(upstream, incoming.pathname + incoming.search);
}

/** The upstream's path prefix without its trailing slash, per upstream URL (read once: URL getters are native calls). */
const prefixes = new WeakMap<URL, string>();
function pathPrefix(upstream: URL): string {
  let p = prefixes.get(upstream);
  if (p === undefined) prefixes.set(upstream, (p = upstream.pathname.endsWith("/") ? upstream.pathname.slice(0, -1) : upstream.pathname));
  return p;
}

/**
 * Forward `req`. Resolves with the upstream's response (its body not yet read) or with a reason
 * the upstream could not be reached; rejects only with the client's abort reason (or, with a
 * `watch`, an IdleTimeoutError).
 *
 * A bodiless request to a pooled upstream with nothing to wait for (the usual pass-through GET)
 * makes its first attempt here, and only an answer the retry rules look at twice — a failure or
 * a 5xx — goes on to `retrying`, which treats it as its own first attempt. The rest of the time
 * the request costs no async frame of its own (with the caller's, 1–4 µs of a ~50 µs request:
 * docs/BENCHMARKS.md).
 */
export function forward(req: Request, opts: ForwardOptions): Promise<ForwardResult> {
  try {
    const pending = prepareBody(req, opts.retry.retryBodyLimit, opts.watch, opts.watchBody);
    const pool = pending === NO_BODY && !opts.acquire && !opts.watch && !opts.fetchSignal ? pooledUpstream(opts.upstream) : undefined;
    if (!pool) return retrying(req, opts, pending);
    const head = requestHead(req, opts, pool);
    return pool.request({ method: req.method, target: head.target, headers: head.headers as PoolRequest["headers"], body: undefined, signal: opts.signal, cutClient: opts.cutClient }).then(
      (res) => (res.status >= 500 ? retrying(req, opts, pending, { res }) : { ok: true, response: res, hold: undefined }),
      (err: unknown) => retrying(req, opts, pending, { err }),
    );
  } catch (err) {
    // As from an async function: a failure is a rejection, never a throw.
    return Promise.reject(err);
  }
}

/** What an attempt sends besides the body: the upstream head's fields (rendered for the pool) and target. */
function requestHead(req: Request, opts: ForwardOptions, pool: Pool | undefined): { headers: Headers | { lines: string; contentLength: string | null }; target: string } {
  const incoming = opts.url ?? new URL(req.url);
  const forwarded = { clientIp: opts.clientIp, proto: "http" };
  const headers = pool ? upstreamRequestHead(req.headers, opts.upstream, forwarded) : upstreamRequestHeaders(req.headers, opts.upstream, forwarded);
  const mark = opts.mark?.();
  if (mark) {
    if ("lines" in headers) headers.lines += `${mark[0]}: ${mark[1]}\r\n`;
    else headers.set(mark[0], mark[1]);
  }
  return { headers, target: pathPrefix(opts.upstream) + incoming.pathname + incoming.search };
}

/** How `forward` already ended a first attempt: the answer it got, or what it threw. */
type FirstAttempt = { res: Response } | { err: unknown };

/** The retry loop; `first`, when given, is attempt 1's outcome, made by `forward` itself. */
async function retrying(req: Request, opts: ForwardOptions, pending: ReturnType<typeof prepareBody>, first?: FirstAttempt): Promise<ForwardResult> {
  const { signal, retry } = opts;
  const { watch } = opts;
  const body = pending instanceof Promise ? await pending : pending;
  if (opts.onBody && body.buffered) {
    const bytes = body.peek?.();
    // Awaited only when it is a promise: the usual body costs no extra turn.
    const read = bytes && opts.onBody(bytes);
    if (read) await read;
  }
  // Made on the first retry only: almost every request never needs one.
  let delays: (() => number) | undefined;
  const nextDelay = () => (delays ??= backoffDelays(retry.backoffInitialMs, retry.backoffMaxMs))();
  const replay5xx = IDEMPOTENT.has(req.method) && body.buffered;
  let retries5xx = 0;
  let giveUpAt: number | undefined;
  // When the first attempt went out: the give-up message says how long was really tried.
  let firstTryAt: number | undefined;
  // Plain-http upstreams (the usual: Ollama and ComfyUI on the LAN) go through our own pooled
  // client; https ones through fetch.
  const pool = pooledUpstream(opts.upstream);
  const fixedHead = opts.mark ? undefined : requestHead(req, opts, pool);

  for (let attempt = 1; ; attempt++) {
    const hold = opts.acquire ? await opts.acquire() : undefined;
    // A mark depends on the attempt's hold (app.ts's nested requests): that head is made per attempt.
    const { headers, target } = fixedHead ?? requestHead(req, opts, pool);
    firstTryAt ??= performance.now();
    let res: Response;
    try {
      if (attempt === 1 && first) {
        if ("err" in first) throw first.err;
        res = first.res;
      } else {
        // The pooled client is stopped by the watch itself; fetch only listens to a signal.
        const upstreamSignal = opts.fetchSignal?.() ?? (watch && !pool ? watch.signalWith(signal) : signal);
        res = pool
          ? await pool.request({ method: req.method, target, headers, body: body.next() as PoolRequest["body"], signal: upstreamSignal, activity: watch, cutClient: opts.cutClient })
          : await fetch(opts.upstream.origin + target, fetchInit(req.method, headers as Headers, body.next(), upstreamSignal));
      }
      if (watch) watch.moved = true;
    } catch (err) {
      hold?.release();
      if (signal.aborted) throw signal.reason;
      if (watch?.reason) throw new IdleTimeoutError(watch.reason);
      const reason = describeFetchError(err);
      if (!isConnectPhaseError(err) || !body.replayable) return { ok: false, reason };
      if (opts.knownDown?.()) return { ok: false, reason: `${reason}; not retried: the health probe finds it down` };
      const now = performance.now();
      giveUpAt ??= now + retry.retryTimeoutMs;
      if (now >= giveUpAt) {
        const tried = formatDuration(Math.round(now - firstTryAt));
        return { ok: false, reason: `${reason}; gave up after trying for ${tried} (${attempt} attempts; UPSTREAM_RETRY_TIMEOUT is ${formatDuration(retry.retryTimeoutMs)})` };
      }
      // The last wait ends at the deadline, so the client hears within UPSTREAM_RETRY_TIMEOUT.
      const delayMs = Math.min(nextDelay(), Math.ceil(giveUpAt - now));
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
 * or the client went away (its `signal`), and return the response to send; `beforeEnd` just
 * before the last byte of a body that ended in full. A pooled upstream
 * answer says so itself; any other body is watched through a JavaScript stream. `watch` (an LLM
 * exchange's idle watch) sees the bytes move and, when it fires, cuts the body.
 */
export function whenBodyDone(res: Response, signal: AbortSignal, done: (end: BodyEnd) => void, watch?: IdleWatch, beforeEnd?: () => void): Response {
  // The pool dropped the hop-by-hop fields already (and reading `res.headers` would build a Headers object).
  if (onPooledBodyEnd(res, done, beforeEnd)) return res;
  if (res.body === null) {
    done({ bytes: 0 });
    beforeEnd?.();
    return relayResponse(res);
  }
  // Bun cancels the body when the client leaves; the signal is the second line of defence.
  return relayResponse(res, onBodyDone(res.body, done, { activity: watch, signal: watch?.signalWith(signal) ?? signal, beforeEnd }));
}

export interface BodyWatch {
  /** Told of every piece read and every write the client took. */
  activity?: Activity;
  /** Cuts the body (towards the client too) when it aborts: the client left, or an idle watch fired. */
  signal?: AbortSignal;
  /** Runs when the body ended in full, before its last byte is written (the listener's idle timer, client-idle.ts). */
  beforeEnd?: () => void;
}

/**
 * Wrap a response body so `done` runs exactly once when it has been fully read, has failed, or
 * was cancelled because the client went away. With no body, `done` runs at once.
 */
export function onBodyDone(
  body: ReadableStream<Uint8Array> | null,
  done: (end: BodyEnd) => void,
  opts: BodyWatch = {},
): ReadableStream<Uint8Array> | null {
  if (body === null) {
    done({ bytes: 0 });
    return null;
  }
  let called = false;
  let bytes = 0;
  const finish = (cut?: BodyEnd["cut"]) => {
    if (called) return;
    called = true;
    opts.signal?.removeEventListener("abort", onAbort);
    done(cut ? { bytes, cut } : { bytes });
  };
  const reader = body.getReader();
  const activity = opts.activity;
  let sink: DirectController | undefined;
  // A client that does not read leaves a write pending for ever: the abort cuts it from outside.
  const onAbort = () => {
    const reason = opts.signal!.reason;
    finish({ by: "signal", reason: describe(reason) });
    reader.cancel(reason).catch(() => {});
    try {
      sink?.close(reason);
    } catch {
      // Already closed.
    }
  };
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  // Bun's "direct" stream writes straight to the socket: no queue of its own, so it adds far
  // less per open stream than a pull-based wrapper (measured in bench/ with 1,000 open streams).
  const source: DirectSource = {
    type: "direct",
    async pull(c) {
      sink = c;
      try {
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          bytes += r.value.length;
          if (activity) activity.moved = true;
          // A promise from write means the client is behind: wait for it before reading more.
          const w = c.write(r.value);
          if (w instanceof Promise) {
            if (activity) activity.clientBlocked = true;
            await w;
            if (activity) {
              activity.clientBlocked = false;
              activity.moved = true;
            }
          }
          // Each upstream chunk goes out at once: an NDJSON line or SSE event must not wait.
          await c.flush();
        }
        finish();
        opts.beforeEnd?.();
        c.close();
      } catch (err) {
        finish({ by: opts.signal?.aborted ? "signal" : "upstream", reason: describe(err) });
        c.close(err);
      }
    },
    cancel(reason) {
      finish({ by: "client", reason: "the client went away" });
      return reader.cancel(reason);
    },
  };
  return new ReadableStream<Uint8Array>(source as unknown as UnderlyingDefaultSource<Uint8Array>);
}

function describe(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason);
}

/** Bun's direct ReadableStream source and controller (not in the DOM typings). */
interface DirectSource {
  type: "direct";
  pull(c: DirectController): Promise<void>;
  cancel(reason: unknown): Promise<void>;
}

interface DirectController {
  write(chunk: Uint8Array): number | Promise<number>;
  flush(): number | Promise<number>;
  close(err?: unknown): void;
}
