/**
 * The proxy's HTTP/1.1 client for plain-http upstreams: keep-alive connections on `Bun.connect`,
 * pooled per upstream, instead of `fetch`. Measured in bench/ (docs/BENCHMARKS.md): reading a
 * fetch body from JavaScript costs ~7 KiB per open stream and fetch runs at most 256 requests at
 * once; here a response body goes from the socket's `data` callback straight into a Bun "direct"
 * stream towards the client, and the client knows the moment the upstream's answer ends — which
 * is when an LLM request gives its GPU slot back.
 *
 * Like fetch with `redirect: "manual"` and `decompress: false`: bodies and redirects pass as
 * they are. Unlike fetch, response fields that describe the upstream connection (hop-by-hop,
 * RFC 9110 §7.6.1) are dropped here already, so the proxy can hand the Response on untouched.
 */
import type { Socket, SocketHandler } from "bun";
import { isHopByHop } from "./headers.ts";
import { ResponseReader, type ResponseHead, type ResponseSink } from "./h1-response.ts";

export interface PoolRequest {
  method: string;
  /** Origin-form request target: path and query. */
  target: string;
  /**
   * Everything to send but the framing fields (Content-Length, Transfer-Encoding), which are set
   * here; or those fields already rendered as `name: value\r\n` lines, with the client's declared
   * Content-Length apart (headers.ts's upstreamRequestHead).
   */
  headers: Headers | { lines: string; contentLength: string | null };
  /** Bytes are sent with a Content-Length; a stream with the client's Content-Length, else chunked. */
  body: Uint8Array | ReadableStream<Uint8Array> | undefined;
  signal: AbortSignal;
  /** Told of every byte from the upstream and every write the client took (an LLM exchange's idle watch). */
  activity?: Activity;
  /**
   * Ends the client's connection without an error, for a body that failed before Bun first pulled
   * it: Bun prints the stack of an error a response stream is closed with inside its pull, which
   * broke LOG_FORMAT=json (see closeBody). Without it the body is closed with the error.
   */
  cutClient?: () => void;
}

/** What a watcher of an exchange's bytes sees (http/idle-watch.ts). */
export interface Activity {
  /** Set whenever a byte moved; the watcher clears it. */
  moved: boolean;
  /** True while a write towards the client waits for the client to read. */
  clientBlocked: boolean;
  /** Given the exchange once it runs, so the watcher can end it. */
  stopper?: Stoppable;
}

export interface Stoppable {
  /** End the exchange now, as an abort of its signal would. */
  stop(reason: Error): void;
}

/** How a response body ended. */
export interface BodyEnd {
  /** Body bytes handed to the client's connection. */
  bytes: number;
  /**
   * Set when the body did not end as the upstream framed it: the upstream broke it off, the client
   * left, or a signal (the client's, an idle or job timeout) cut the upstream request.
   */
  cut?: { by: "upstream" | "client" | "signal"; reason: string };
}

/** Shared by exchanges nobody watches: stores into it cost the same and mean nothing. */
const UNWATCHED: Activity = { moved: false, clientBlocked: false };

/** A failure talking to the upstream; `code` says which kind (upstream-errors.ts sorts them). */
export class UpstreamError extends Error {
  constructor(
    message: string,
    readonly code: string,
    /**
     * No connection was made, so nothing was sent: safe to retry. A socket error on an open
     * connection can carry the same codes (ETIMEDOUT, EHOSTUNREACH) after the request went out.
     */
    readonly beforeConnect = false,
  ) {
    super(message);
  }
}

/** A SYN that nobody answers is given up on after this; like a refusal, it is retried by forward(). */
const CONNECT_TIMEOUT_MS = 10_000;
/** Idle connections are closed before any usual server would close them (Bun 10 s, aiohttp 75 s). */
const IDLE_TIMEOUT_S = 4;
const MAX_IDLE = 256;
/** Answers with a Content-Length up to this are collected and handed on in one piece (no stream). */
const COLLECT_LIMIT = 64 * 1024;
/** Request bodies up to this travel in the same write as the head. */
const COALESCE_LIMIT = 16 * 1024;

const BODY_EXPECTED = new Set(["POST", "PUT", "PATCH"]);

const pools = new Map<string, Pool>();
/** The pool per upstream URL object, or null for one that is not http: (the proxy asks on every request). */
const byUrl = new WeakMap<URL, Pool | null>();

/** poolFor() for an http: upstream, undefined for any other scheme; remembered per URL object. */
export function pooledUpstream(upstream: URL): Pool | undefined {
  let p = byUrl.get(upstream);
  if (p === undefined) byUrl.set(upstream, (p = upstream.protocol === "http:" ? poolFor(upstream) : null));
  return p ?? undefined;
}

/** The pool for an http: upstream (one per host and port, like fetch's). */
export function poolFor(upstream: URL): Pool {
  const hostname = upstream.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = Number(upstream.port || 80);
  const key = `${hostname}|${port}`;
  let p = pools.get(key);
  if (!p) pools.set(key, (p = new Pool(hostname, port)));
  return p;
}

/**
 * Every Response handed out: the Exchange whose body is still streaming into it, or the body's
 * size when it was handed out whole (collected, or without a body).
 */
const handedOut = new WeakMap<Response, Exchange | number>();

/**
 * Run `done` once when the body of `res` has been handed to the client in full, has failed, or
 * the client went away. False when `res` did not come from a pool (the caller must watch its body
 * itself). A response that came whole (collected, or without a body) is done at once.
 * `beforeEnd` runs before the body's last byte is written to the client, when it ends in full.
 */
export function onPooledBodyEnd(res: Response, done: (end: BodyEnd) => void, beforeEnd?: () => void): boolean {
  const ex = handedOut.get(res);
  if (ex === undefined) return false;
  if (typeof ex === "number") {
    done({ bytes: ex });
    beforeEnd?.();
  } else ex.whenDone(done, beforeEnd);
  return true;
}

export class Pool {
  private readonly idle: Conn[] = [];

  constructor(
    readonly hostname: string,
    readonly port: number,
  ) {}

  /** Resolves with the upstream's response once its head (or, when small, all of it) arrived. */
  async request(r: PoolRequest): Promise<Response> {
    for (let attempt = 1; ; attempt++) {
      r.signal.throwIfAborted();
      // The retry opens a connection: another idle one may have died in the same restart.
      const conn = (attempt === 1 ? this.takeIdle() : undefined) ?? (await this.connect(r.signal));
      try {
        return await conn.exchange(r);
      } catch (err) {
        if (!(err instanceof StaleConnection)) throw err;
        // A kept-alive connection that died before a byte of the answer came: most often the
        // upstream closed it while it sat idle (a restart) and never took this request. Sent again
        // once, on a fresh connection — unless the body was a stream, already consumed, or the
        // request may have reached the upstream's application and is not safe to run twice.
        if (attempt === 1 && !(r.body instanceof ReadableStream) && !r.signal.aborted && (!err.written || replayable(r))) continue;
        throw err.written && !replayable(r) ? notSentAgain(r, err.cause) : err.cause;
      }
    }
  }

  /** Idle connections (tests). */
  get idleCount(): number {
    return this.idle.length;
  }

  release(conn: Conn): void {
    if (this.idle.length >= MAX_IDLE) return void conn.socket.end();
    conn.socket.timeout(IDLE_TIMEOUT_S);
    // An idle pooled connection must not keep the process alive at shutdown.
    conn.socket.unref();
    this.idle.push(conn);
  }

  forget(conn: Conn): void {
    const i = this.idle.indexOf(conn);
    if (i >= 0) this.idle.splice(i, 1);
  }

  private takeIdle(): Conn | undefined {
    for (;;) {
      const c = this.idle.pop();
      if (!c) return undefined;
      if (c.closed) continue;
      c.socket.timeout(0);
      c.socket.ref();
      c.reused = true;
      return c;
    }
  }

  private async connect(signal: AbortSignal): Promise<Conn> {
    signal.throwIfAborted();
    const conn = new Conn(this);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    const connecting = Bun.connect<Conn>({ hostname: this.hostname, port: this.port, socket: HANDLERS, data: conn });
    try {
      conn.socket = await Promise.race([
        connecting,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new UpstreamError(`no answer to connect within ${CONNECT_TIMEOUT_MS / 1000} s`, "ETIMEDOUT", true)), CONNECT_TIMEOUT_MS);
          onAbort = () => reject(signal.reason);
          signal.addEventListener("abort", onAbort, { once: true });
        }),
      ]);
    } catch (err) {
      // A connection that opens after we gave up on it is closed at once.
      connecting.then((s) => s.terminate(), () => {});
      throw signal.aborted || err instanceof UpstreamError ? err : connectError(err);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal.removeEventListener("abort", onAbort);
    }
    conn.socket.setNoDelay(true);
    return conn;
  }
}

/** Thrown inside the pool only: a reused connection died before a byte of the answer came. */
class StaleConnection extends Error {
  constructor(
    override readonly cause: Error,
    /** Some of the request's bytes went to the socket: the upstream may have read it all. */
    readonly written: boolean,
  ) {
    super(cause.message);
  }
}

/**
 * Whether a request may be sent a second time once some of its bytes may have reached the
 * upstream. Go's net/http rule (Request.isReplayable in request.go, applied by
 * persistConn.shouldRetryRequest in transport.go): GET, HEAD, OPTIONS and TRACE, or any request
 * that carries an Idempotency-Key or X-Idempotency-Key field. Go does not replay PUT or DELETE
 * either, and neither do we. A request of which nothing was written (Go's nothingWrittenError)
 * is always safe to send again.
 */
function replayable(r: PoolRequest): boolean {
  if (r.method === "GET" || r.method === "HEAD" || r.method === "OPTIONS" || r.method === "TRACE") return true;
  const h = r.headers;
  if (h instanceof Headers) return h.has("idempotency-key") || h.has("x-idempotency-key");
  // Rendered lines have lower-case names and always start with Host (headers.ts).
  return /\r\n(?:x-)?idempotency-key:/.test(h.lines);
}

/** The error for a request that died after it was sent and is not safe to send again. */
function notSentAgain(r: PoolRequest, cause: Error): UpstreamError {
  // Never a connect-phase code: forward() must not retry it either.
  return new UpstreamError(`${cause.message}; the ${r.method} is not sent again (the upstream may have acted on it)`, "ECONNRESET");
}

/** One socket: shared handlers (one set for every connection) reach it through `socket.data`. */
const HANDLERS: SocketHandler<Conn> = {
  data: (s, bytes) => s.data.onData(bytes),
  drain: (s) => s.data.onDrain(),
  end: (s) => s.data.onClosed(undefined),
  close: (s, err) => s.data.onClosed(err),
  error: (s, err) => s.data.onClosed(err),
  timeout: (s) => s.data.onIdleTimeout(),
};

class Conn implements ResponseSink {
  socket!: Socket<Conn>;
  readonly reader = new ResponseReader(this);
  ex: Exchange | null = null;
  reused = false;
  closed = false;
  private out: Uint8Array[] | null = null;
  private drained: (() => void) | null = null;

  constructor(readonly pool: Pool) {}

  exchange(r: PoolRequest): Promise<Response> {
    const ex = new Exchange(this, r.signal, r.activity ?? UNWATCHED);
    ex.cutClient = r.cutClient;
    this.ex = ex;
    this.reader.expect(r.method === "HEAD");
    ex.send(r);
    if (r.activity) r.activity.stopper = ex;
    return ex.response;
  }

  // ResponseSink: the reader's callbacks go to the current exchange.
  head(h: ResponseHead): void {
    this.ex?.onHead(h);
  }
  data(bytes: Uint8Array): void {
    this.ex?.onBody(bytes);
  }
  end(): void {
    this.ex?.onEnd();
  }

  onData(bytes: Uint8Array): void {
    const ex = this.ex;
    // Bytes on an idle connection answer nothing we asked: its framing can no longer be trusted.
    if (!ex) return this.terminate();
    ex.gotBytes = true;
    ex.activity.moved = true;
    try {
      this.reader.feed(bytes);
    } catch (err) {
      this.fail(err as Error);
    }
  }

  onClosed(err: Error | undefined): void {
    if (this.closed) return;
    this.closed = true;
    this.pool.forget(this);
    this.drained?.();
    if (!this.ex) return;
    try {
      this.reader.eof();
    } catch (e) {
      this.fail(err ? new UpstreamError(`${(e as Error).message} (${err.message})`, errCode(err) ?? "ECONNRESET") : (e as Error));
    }
  }

  onIdleTimeout(): void {
    if (!this.ex) this.socket.end();
  }

  /** Write all of `data`; resolves at once when the kernel took it, else after drains. */
  write(data: Uint8Array): Promise<void> | undefined {
    if (this.closed) throw new UpstreamError("upstream closed the connection while the request was sent", "ECONNRESET");
    if (this.out) {
      this.out.push(data);
      return this.whenDrained();
    }
    const n = this.socket.write(data);
    if (n > 0 && this.ex) this.ex.written = true;
    if (n === data.length) return undefined;
    if (n < 0) throw new UpstreamError("upstream closed the connection while the request was sent", "ECONNRESET");
    this.out = [data.subarray(Math.max(0, n))];
    return this.whenDrained();
  }

  onDrain(): void {
    const q = this.out;
    if (!q) return;
    while (q.length > 0) {
      const d = q[0]!;
      const n = this.socket.write(d);
      if (n > 0 && this.ex) this.ex.written = true;
      if (n < d.length) {
        q[0] = d.subarray(Math.max(0, n));
        return;
      }
      q.shift();
    }
    this.out = null;
    const d = this.drained;
    this.drained = null;
    d?.();
  }

  private whenDrained(): Promise<void> {
    return new Promise<void>((resolve) => {
      const prev = this.drained;
      this.drained = () => {
        prev?.();
        resolve();
      };
    });
  }

  /** The exchange is over; give the connection back when it can carry another one. */
  finished(ex: Exchange, reusable: boolean): void {
    if (this.ex !== ex) return;
    this.ex = null;
    if (reusable && !this.closed && this.reader.reusable && !this.out) this.pool.release(this);
    else this.terminate();
  }

  terminate(): void {
    if (!this.closed) this.socket.terminate();
  }

  private fail(err: Error): void {
    // The exchange reports first (its error is the real one), then finishes and closes us.
    if (this.ex) this.ex.onError(err);
    else this.terminate();
  }
}

/** Bun's direct-stream controller (not in the DOM typings). */
interface DirectController {
  write(chunk: Uint8Array): number | Promise<number>;
  flush(): number | Promise<number>;
  close(err?: unknown): void;
}

/** One request and its response on a connection. */
class Exchange implements Stoppable {
  readonly response: Promise<Response>;
  gotBytes = false;
  /** Some of the request went to the socket (the kernel took it; the upstream may have read it). */
  written = false;
  private resolve!: (r: Response) => void;
  private reject!: (e: unknown) => void;
  private settled = false;
  private head: ResponseHead | null = null;
  private collected: Uint8Array[] | null = null;
  private ctl: DirectController | null = null;
  private early: Uint8Array[] | null = null;
  private ended = false;
  private error: Error | null = null;
  private endPull: (() => void) | null = null;
  private doneCallbacks: ((end: BodyEnd) => void) | null = null;
  /** Runs before a body that ended in full is closed (closeBody): the client's last byte is not out yet. */
  private beforeEnd: (() => void) | undefined;
  /** Body bytes handed to the client, and why the body ended early (if it did). */
  private bytesOut = 0;
  private cut: BodyEnd["cut"];
  private over = false;
  private requestSent = false;
  private readonly onAbort = () => this.abort();
  cutClient: (() => void) | undefined;

  // Only the signal is kept: an open stream must not pin the request's headers and body.
  private readonly signal: AbortSignal;

  constructor(
    private readonly conn: Conn,
    signal: AbortSignal,
    readonly activity: Activity,
  ) {
    this.signal = signal;
    this.response = new Promise<Response>((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
    // No `once`: finish() removes it, and the options object doubles the cost of the pair (measured).
    signal.addEventListener("abort", this.onAbort);
  }

  send(req: PoolRequest): void {
    const { method, target, headers, body } = req;
    let head = `${method} ${target} HTTP/1.1\r\n`;
    if (headers instanceof Headers) {
      headers.forEach((v, k) => {
        if (k !== "content-length" && k !== "transfer-encoding") head += `${k}: ${v}\r\n`;
      });
    } else head += headers.lines;
    let chunked = false;
    if (body instanceof Uint8Array) head += `content-length: ${body.length}\r\n`;
    else if (body) {
      const declared = headers instanceof Headers ? headers.get("content-length") : headers.contentLength;
      if (declared !== null) head += `content-length: ${declared}\r\n`;
      else {
        head += "transfer-encoding: chunked\r\n";
        chunked = true;
      }
    } else if (BODY_EXPECTED.has(method)) head += "content-length: 0\r\n";
    head += "\r\n";
    const headBytes = Buffer.from(head, "latin1");
    try {
      if (body instanceof Uint8Array) {
        if (body.length <= COALESCE_LIMIT) {
          const all = new Uint8Array(headBytes.length + body.length);
          all.set(headBytes);
          all.set(body, headBytes.length);
          this.sent(this.conn.write(all));
        } else {
          this.conn.write(headBytes);
          this.sent(this.conn.write(body));
        }
      } else if (body) {
        this.conn.write(headBytes);
        void this.pump(body, chunked);
      } else this.sent(this.conn.write(headBytes));
    } catch (err) {
      this.onError(err as Error);
    }
  }

  private sent(p: Promise<void> | undefined): void {
    if (!p) this.requestSent = true;
    else void p.then(() => (this.requestSent = true));
  }

  /** Streams a request body; an answer that comes early (a 413, say) does not stop it. */
  private async pump(body: ReadableStream<Uint8Array>, chunked: boolean): Promise<void> {
    const reader = body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (this.over || this.conn.closed) return void reader.cancel().catch(() => {});
        if (done) break;
        if (value.length === 0) continue;
        if (chunked) this.conn.write(Buffer.from(`${value.length.toString(16)}\r\n`, "latin1"));
        const w = this.conn.write(value);
        if (chunked) this.conn.write(CRLF);
        if (w) await w;
      }
      if (chunked) await this.conn.write(LAST_CHUNK);
      this.requestSent = true;
    } catch (err) {
      // The client's body broke off (or the upstream went away): the exchange cannot complete.
      this.conn.terminate();
      this.onError(err instanceof UpstreamError ? err : new UpstreamError(`request body failed: ${(err as Error)?.message ?? err}`, "REQUEST_BODY"));
    }
  }

  onHead(h: ResponseHead): void {
    this.head = h;
    if (this.settled) return;
    const length = h.bodyLength;
    if (length === 0) {
      this.settle(null);
      return;
    }
    if (length !== undefined && length <= COLLECT_LIMIT) {
      this.collected = [];
      return;
    }
    const source = new BodySource(this);
    const res = this.settle(new ReadableStream<Uint8Array>(source as unknown as UnderlyingDefaultSource<Uint8Array>));
    if (res) handedOut.set(res, this);
  }

  onBody(bytes: Uint8Array): void {
    if (this.collected) this.collected.push(bytes);
    else if (this.ctl) this.deliver(bytes);
    else (this.early ??= []).push(bytes);
  }

  onEnd(): void {
    if (this.collected) {
      // Usually the whole body came in one read: no copy then.
      const body = this.collected.length === 1 ? (this.collected[0] as Uint8Array<ArrayBuffer>) : Buffer.concat(this.collected);
      this.collected = null;
      this.settle(body);
    }
    this.ended = true;
    if (this.ctl) this.closeBody();
    this.finish(this.requestSent);
  }

  onError(err: Error): void {
    if (this.over) return;
    const stale = this.conn.reused && !this.gotBytes;
    if (!this.settled) {
      this.settled = true;
      this.reject(stale ? new StaleConnection(err, this.written) : err);
    } else if (!this.ended) {
      this.error = err;
      // The request body's own failure (the client's side broke off) is no fault of the upstream.
      this.cut = { by: err instanceof UpstreamError && err.code === "REQUEST_BODY" ? "client" : "upstream", reason: err.message };
      if (this.ctl) this.closeBody();
    }
    this.finish(false);
  }

  /** The idle watch: ends the exchange like an abort of its signal. */
  stop(reason: Error): void {
    this.abort(reason);
  }

  /** The client's signal (or the image job's timeout): the upstream request is cut at once. */
  private abort(reason: unknown = this.signal.reason): void {
    if (this.over) return;
    if (!this.settled) {
      this.settled = true;
      this.reject(reason);
    } else if (!this.ended) {
      this.error = reason instanceof Error ? reason : new Error(String(reason));
      this.cut = { by: "signal", reason: this.error.message };
      if (this.ctl) this.closeBody();
    }
    this.finish(false);
  }

  /** Bun calls this through BodySource.pull once the client side is ready for the body. */
  attach(ctl: DirectController): Promise<void> | undefined {
    this.ctl = ctl;
    const early = this.early;
    this.early = null;
    if (early) for (const b of early) this.deliver(b);
    if (this.ended || this.error) {
      this.closeBody(true);
      return undefined;
    }
    return new Promise<void>((r) => (this.endPull = r));
  }

  /** The client went away mid-body. */
  cancelBody(): void {
    if (!this.over && !this.ended) this.cut = { by: "client", reason: "the client went away" };
    this.finish(false);
  }

  whenDone(cb: (end: BodyEnd) => void, beforeEnd?: () => void): void {
    if (beforeEnd) this.beforeEnd = beforeEnd;
    if (this.over) return cb(this.bodyEnd());
    const prev = this.doneCallbacks;
    this.doneCallbacks = prev ? (e) => (prev(e), cb(e)) : cb;
  }

  private bodyEnd(): BodyEnd {
    return this.cut ? { bytes: this.bytesOut, cut: this.cut } : { bytes: this.bytesOut };
  }

  private deliver(bytes: Uint8Array): void {
    const ctl = this.ctl!;
    this.bytesOut += bytes.length;
    // Each piece goes out at once (an NDJSON line or SSE event must not wait). When the client is
    // slower than the upstream, Bun's sink answers the write with a promise: the upstream socket
    // is not read until it settles, so TCP pushes back instead of memory filling up.
    const w = ctl.write(bytes);
    const f = ctl.flush();
    const wait = w instanceof Promise ? w : f instanceof Promise ? f : undefined;
    if (wait) {
      this.conn.socket.pause();
      const activity = this.activity;
      activity.clientBlocked = true;
      wait.then(
        () => {
          activity.clientBlocked = false;
          activity.moved = true;
          if (!this.conn.closed) this.conn.socket.resume();
        },
        () => this.cancelBody(),
      );
    }
  }

  /**
   * `inPull`: called from Bun's pull (attach). A stream closed with an error there has its stack
   * printed by Bun (breaking LOG_FORMAT=json), so it is left open and unfed until the server drops
   * the connection (cutClient: Bun's request timeout, which fires on its 4 s timer tick). Anywhere
   * else (a cut mid-stream: a force-release, LLM_IDLE_TIMEOUT, an upstream that broke off) closing
   * with the error prints nothing and closes the client's connection at once, without the last
   * chunk: the client sees the answer cut, not a short one.
   */
  private closeBody(inPull = false): void {
    const ctl = this.ctl!;
    if (this.error && this.cutClient && inPull) {
      this.cutClient();
      return;
    }
    try {
      if (this.error) ctl.close(this.error);
      else {
        this.beforeEnd?.();
        ctl.close();
      }
    } catch {
      // Already closed by Bun (the client left).
    }
    const end = this.endPull;
    this.endPull = null;
    end?.();
  }

  private settle(body: BodyInit | null): Response | undefined {
    if (this.settled) return undefined;
    this.settled = true;
    const h = this.head!;
    this.head = null;
    let res: Response;
    try {
      res = new Response(body, { status: h.status, statusText: h.statusText, headers: h.hopByHop ? responseHeaders(h.fields) : h.fields });
    } catch (err) {
      this.reject(new UpstreamError(`unusable response from upstream: ${(err as Error).message}`, "BAD_UPSTREAM_RESPONSE"));
      this.conn.terminate();
      return undefined;
    }
    if (!(body instanceof ReadableStream)) handedOut.set(res, body === null ? 0 : (body as Uint8Array).length);
    this.resolve(res);
    return res;
  }

  private finish(reusable: boolean): void {
    if (this.over) return;
    this.over = true;
    this.signal.removeEventListener("abort", this.onAbort);
    this.conn.finished(this, reusable);
    const cbs = this.doneCallbacks;
    this.doneCallbacks = null;
    cbs?.(this.bodyEnd());
  }
}

/** The body handed to the client: a Bun "direct" stream fed from the socket. */
class BodySource {
  readonly type = "direct";
  constructor(private readonly ex: Exchange) {}
  pull(ctl: DirectController): Promise<void> | undefined {
    return this.ex.attach(ctl);
  }
  cancel(): void {
    this.ex.cancelBody();
  }
}

const CRLF = Buffer.from("\r\n");
const LAST_CHUNK = Buffer.from("0\r\n\r\n");

/** The response's fields minus those about the upstream connection (RFC 9110 §7.6.1). */
function responseHeaders(fields: [string, string][]): Headers {
  const h = new Headers();
  let named: Set<string> | undefined;
  for (const [n, v] of fields) {
    if (n.length === 10 && n.toLowerCase() === "connection") {
      named ??= new Set();
      for (const t of v.split(",")) named.add(t.trim().toLowerCase());
    }
  }
  for (const [n, v] of fields) {
    const lower = n.toLowerCase();
    if (isHopByHop(lower) || named?.has(lower)) continue;
    h.append(n, v);
  }
  return h;
}

const CONNECT_FAILURES: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ENOTFOUND: "host name not found",
  EAI_AGAIN: "host name lookup failed for now",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ETIMEDOUT: "no answer",
};

/** Bun.connect's error as one line an operator can act on, its code kept for the retry rules. */
function connectError(err: unknown): UpstreamError {
  const code = err instanceof Error ? (errCode(err) ?? "ECONNECT") : "ECONNECT";
  const what = CONNECT_FAILURES[code] ?? (err instanceof Error ? err.message : String(err));
  return new UpstreamError(`${what} (${code})`, code, true);
}

function errCode(err: Error): string | undefined {
  const c = (err as { code?: unknown }).code;
  return typeof c === "string" ? c : undefined;
}
