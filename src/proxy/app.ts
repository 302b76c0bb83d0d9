/**
 * One listener's Hono app. A request is classified once, then either passes straight through,
 * waits for an LLM slot, or runs as an image job; /healthz and /metrics are answered here.
 * Websocket upgrades never reach this app (see listener.ts): they need the Bun server itself.
 */
// hono/tiny (PatternRouter): two fixed routes and a catch-all need no more router, and it loads
// ~1 MiB lighter than the default preset — memory every idle turnstile pays (docs/BENCHMARKS.md).
import { Hono } from "hono/tiny";
import { redactCredentials } from "../config/redact.ts";
import type { ImageJobDeps } from "../jobs/image-job.ts";
import { handleImageJob } from "../jobs/image-job.ts";
import { classify, type Listener, type RequestClass } from "./classify.ts";
import type { BodyEnd } from "../upstream/h1-pool.ts";
import { formatDuration } from "../config/duration.ts";
import { dialectFor, errorResponse, ownAnswerSize, type ErrorReply } from "../http/dialect.ts";
import { admit, requestPath, type RequestTarget } from "./front-door.ts";
import { forward, whenBodyDone, type Hold, type RetryNotice, type RetryPolicy } from "../http/forward.ts";
import { IdleTimeoutError, type IdleReason, type IdleTicker, type IdleWatch } from "../http/idle-watch.ts";
import { modelFieldWatcher } from "../ollama/model-field.ts";
import { admitLLM, busyMessage, GpuBusyError, type BusyReason, type LlmLock } from "./llm-gate.ts";

/** A request as the log sees it: `client` is the peer address, `model` an LLM request's (once its body was read). */
export interface RequestInfo {
  listener: Listener;
  method: string;
  path: string;
  class: RequestClass | "internal";
  client?: string;
  model?: string;
}

export interface RequestObserver {
  start(r: RequestInfo): void;
  end(r: RequestInfo & {
    status: number;
    /** From arrival until the response body ended (or was cut). */
    durationMs: number;
    /** Response body bytes handed to the client; absent for /healthz and /metrics. */
    bytes?: number;
    cut?: BodyEnd["cut"];
  }): void;
  busy(reason: BusyReason): void;
  /** An LLM exchange ended by LLM_IDLE_TIMEOUT. */
  idle(listener: Listener, r: { method: string; path: string; reason: IdleReason; timeoutMs: number }): void;
  retry(listener: Listener, n: RetryNotice & { method: string; path: string }): void;
  upstreamFailed(listener: Listener, r: { method: string; path: string; reason: string }): void;
}

/**
 * Follows each LLM request for the status API: `start` on arrival, `admitted` once it holds a GPU
 * slot, `end` (idempotent) when it is over. Called on every LLM request, so it must stay cheap.
 */
export interface LlmTracker<T = unknown> {
  start(path: string, clientIp: string | undefined): T;
  admitted(t: T): void;
  /** The model the request's body named, once it was read. */
  named(t: T, model: string): void;
  end(t: T): void;
}

/** An upstream as the last health probe found it; `disabled` when its URL is empty. */
export type UpstreamHealth = "up" | "down" | "disabled";

export interface HealthBody {
  state: string;
  llm_inflight: number;
  image_pending: boolean;
  upstreams: { ollama: UpstreamHealth; comfy: UpstreamHealth };
}

export interface ListenerAppDeps {
  listener: Listener;
  upstream: URL;
  lock: LlmLock;
  retry: RetryPolicy;
  busy: { mode: "wait" | "reject"; waitTimeoutMs: number; status: number; retryAfterS: number };
  observer: RequestObserver;
  health: () => HealthBody;
  metrics: () => { contentType: string; text: string };
  /** The ComfyUI listener's image jobs; absent on the Ollama listener. */
  imageJob?: ImageJobDeps;
  /** A watcher per LLM request, fed its body as it is sent (the blind unload's model memory). */
  watchLlmBody?: () => LlmBodyWatch;
  /** The listener's DNS-rebinding guard (host-guard.ts): may a request with this Host pass. */
  hostAllowed: (host: string) => boolean;
  /** LLM_IDLE_TIMEOUT's clock; absent when it is 0 (no limit). */
  idle?: IdleTicker;
  /** Answers everything under /turnstile/ (status API, event stream, page). */
  turnstile?: (req: Request, clientIp: string | undefined) => Response | Promise<Response>;
  llmTracker?: LlmTracker;
}

type Info = RequestInfo;

/** One LLM request's model once its body went to Ollama (under the slot), then the status Ollama answered with. */
export interface LlmBodyWatch {
  sent(model: string): void;
  answered(status: number): void;
}

/** Status written to the request log when the client went away before an answer (nginx's 499). */
export const CLIENT_CLOSED = 499;

export type AppEnv = { Bindings: { clientIp: string | undefined } };

export interface ListenerApp {
  /** The whole listener as a Hono app: /healthz, /metrics, and everything else to `proxy`. */
  app: Hono<AppEnv>;
  /** The proxy route alone: admit → classify → gate → forward. Never throws nor rejects. */
  proxy(req: Request, clientIp: string | undefined): Response | Promise<Response>;
  /** GET or HEAD of an INTERNAL_PATHS path, answered whatever the Host (an `nc` or HTTP/1.0 check sends none). */
  internal(req: Request, clientIp: string | undefined): Response | Promise<Response>;
  /** The front-door checks for a request that `proxy` does not see (a websocket upgrade): its URL, or the refusal to send. */
  admit(req: Request, cls: RequestClass): RequestTarget | Response;
}

/** The two paths the turnstile answers itself; everything else belongs to the upstream. */
export const INTERNAL_PATHS: ReadonlySet<string> = new Set(["/healthz", "/metrics"]);

/** The turnstile's own pages (status, events, page) live under this; neither Ollama nor ComfyUI uses it. */
export function isTurnstilePath(path: string): boolean {
  return path.startsWith("/turnstile") && (path.length === 10 || path.charCodeAt(10) === 47 /* "/" */);
}

export function createListenerApp(deps: ListenerAppDeps): ListenerApp {
  const app = new Hono<AppEnv>();
  const { listener, observer } = deps;

  // Counted like any request, but not logged: a scraper every few seconds is noise.
  const counted = (path: string) => observer.end({ listener, method: "GET", path, class: "internal", status: 200, durationMs: 0 });
  app.get("/healthz", (c) => {
    counted("/healthz");
    return c.json(deps.health());
  });
  app.get("/metrics", (c) => {
    counted("/metrics");
    const m = deps.metrics();
    return c.body(m.text, 200, { "content-type": m.contentType });
  });

  /** A request refused at the door: counted and logged like any other, answered in its dialect. */
  const refused = (req: Request, cls: RequestClass, reply: ErrorReply, client?: string): Response => {
    const info: Info = { listener, method: req.method, path: requestPath(req.url), class: cls, client };
    observer.start(info);
    return answered(errorResponse(dialectFor(listener, info.path), reply), req.signal, observer, info, performance.now());
  };

  // Not async, nor is proxyPass: a pass-through request's promise is forward()'s, continued, with
  // no async frames in between (docs/BENCHMARKS.md).
  const proxy = (req: Request, clientIp: string | undefined): Response | Promise<Response> => {
    const door = admit(req, deps.hostAllowed);
    if (!door.ok) return refused(req, "pass", door.reply, clientIp);
    const { url } = door;
    // After the door, not before: the Host rules guard these pages (DNS rebinding) like the proxy.
    if (deps.turnstile && isTurnstilePath(door.routed)) {
      counted(url.pathname);
      return deps.turnstile(req, clientIp);
    }
    const cls = classify(listener, req.method, door.routed);
    const t0 = performance.now();
    const info: Info = { listener, method: req.method, path: url.pathname, class: cls, client: clientIp };
    observer.start(info);
    const failed = (err: unknown): Response => {
      const res = req.signal.aborted ? new Response(null, { status: CLIENT_CLOSED }) : internalError(deps, req, url.pathname, err);
      return answered(res, req.signal, observer, info, t0);
    };
    try {
      if (cls === "llm") return proxyLLM(req, url, clientIp, deps, info, t0).catch(failed);
      if (cls === "image" && deps.imageJob) return handleImageJob(req, clientIp, deps.imageJob).then((res) => answered(res, req.signal, observer, info, t0)).catch(failed);
      return proxyPass(req, url, clientIp, deps, info, t0).catch(failed);
    } catch (err) {
      return failed(err);
    }
  };
  app.all("*", (c) => proxy(c.req.raw, c.env.clientIp));
  app.onError((err, c) => internalError(deps, c.req.raw, requestPath(c.req.url), err));
  return {
    app,
    proxy,
    internal(req, clientIp) {
      // Hono reads the path from an absolute URL; Bun gives a relative one when the Host is missing or unusable.
      const r = req.url.charCodeAt(0) === 47 /* "/" */ ? new Request(`http://localhost${req.url}`, { method: req.method, headers: req.headers }) : req;
      return app.fetch(r, { clientIp });
    },
    admit(req, cls) {
      const door = admit(req, deps.hostAllowed);
      return door.ok ? door.url : refused(req, cls, door.reply);
    },
  };
}

function internalError(deps: ListenerAppDeps, req: Request, path: string, err: unknown): Response {
  const reason = err instanceof Error ? err.message : String(err);
  deps.observer.upstreamFailed(deps.listener, { method: req.method, path, reason });
  return errorResponse(dialectFor(deps.listener, path), {
    status: 500,
    type: "internal_error",
    message: `gpu-turnstile internal error: ${reason}`,
  });
}

/**
 * The response to send, its request logged and counted when its body has ended (not when its
 * head left: a 5 s stream is logged as 5 s), and `hold` released then. Built outside the request's
 * scope, so an open stream keeps only what it needs alive, not the request.
 */
function answered(res: Response, signal: AbortSignal, observer: RequestObserver, info: Info, t0: number, hold?: Hold, watch?: IdleWatch): Response {
  const status = res.status;
  const end = (e: BodyEnd) => {
    hold?.release();
    observer.end({ ...info, status, durationMs: performance.now() - t0, bytes: e.bytes, cut: e.cut });
  };
  const own = ownAnswerSize(res);
  if (own === undefined) return whenBodyDone(res, signal, end, watch);
  end({ bytes: own });
  return res;
}

function proxyPass(req: Request, url: RequestTarget, clientIp: string | undefined, deps: ListenerAppDeps, info: Info, t0: number): Promise<Response> {
  return forward(req, {
    upstream: deps.upstream,
    url,
    signal: req.signal,
    clientIp,
    retry: deps.retry,
    onRetry: (n) => deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname }),
  }).then((result) => answered(result.ok ? result.response : unreachable(deps, req, url, result.reason), req.signal, deps.observer, info, t0));
}

/**
 * An LLM request holds its slot until the response is fully written or the client goes away,
 * whichever comes first, or no byte moved for LLM_IDLE_TIMEOUT; the lease's release is
 * idempotent, so more than one of these may fire.
 */
async function proxyLLM(req: Request, url: RequestTarget, clientIp: string | undefined, deps: ListenerAppDeps, info: Info, t0: number): Promise<Response> {
  const dialect = dialectFor(deps.listener, url.pathname);
  const watch = deps.idle && watchIdle(deps.idle, deps, req.method, url.pathname);
  const tracker = deps.llmTracker;
  const tracked = tracker?.start(url.pathname, clientIp);
  const admitSlot = tracker
    ? () => admitLLM(deps.lock, deps.busy, req.signal).then((h) => (tracker.admitted(tracked), h))
    : () => admitLLM(deps.lock, deps.busy, req.signal);
  const bodyWatch = deps.watchLlmBody?.();
  // The model is read once from the body, for the status, the log and the blind unload's memory:
  // a buffered body before the slot (a waiting request shows its model), a streamed one as it goes out.
  let model: string | undefined;
  let scannedAhead = false;
  let told = false;
  const scan =
    tracker || bodyWatch
      ? modelFieldWatcher((m) => {
          model = m;
          tracker?.named(tracked, m);
        })
      : undefined;
  let result;
  try {
    result = await forward(req, {
      upstream: deps.upstream,
      url,
      signal: req.signal,
      clientIp,
      retry: deps.retry,
      acquire: watch ? async () => watch.arm(await admitSlot()) : admitSlot,
      watchBody:
        scan &&
        ((c) => {
          if (!scannedAhead) scan(c);
          if (model !== undefined && !told) {
            told = true;
            bodyWatch?.sent(model);
          }
        }),
      onRetry: (n) => deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname }),
      watch,
      onBody:
        scan &&
        ((b) => {
          scan(b);
          scannedAhead = true;
        }),
    });
  } catch (err) {
    info.model = model;
    tracker?.end(tracked);
    if (err instanceof IdleTimeoutError) return answered(idleAnswer(deps, dialect, err), req.signal, deps.observer, info, t0);
    if (!(err instanceof GpuBusyError)) throw err;
    deps.observer.busy(err.reason);
    // Read once: in `auto` mode it is an estimate, and the message and the header must agree.
    const retryAfterS = deps.busy.retryAfterS;
    const busy = errorResponse(dialect, {
      status: err.reason === "reject" ? deps.busy.status : 503,
      type: "gpu_busy",
      message: busyMessage(err.reason, retryAfterS, deps.lock.state),
      headers: { "retry-after": String(retryAfterS) },
    });
    return answered(busy, req.signal, deps.observer, info, t0);
  }
  info.model = model;
  if (!result.ok) {
    tracker?.end(tracked);
    return answered(unreachable(deps, req, url, result.reason), req.signal, deps.observer, info, t0);
  }
  bodyWatch?.answered(result.response.status);
  if (watch) watch.stage = "response";
  return answered(result.response, req.signal, deps.observer, info, t0, trackedHold(result.hold!, tracker, tracked), watch);
}

/** The hold, ending the request's entry in the status model when it is released. */
function trackedHold(hold: Hold, tracker: LlmTracker | undefined, tracked: unknown): Hold {
  if (!tracker) return hold;
  return {
    release() {
      hold.release();
      tracker.end(tracked);
    },
  };
}

/** The exchange's idle watch, made outside proxyLLM's scope so the open stream does not keep the request alive. */
function watchIdle(ticker: IdleTicker, deps: ListenerAppDeps, method: string, path: string): IdleWatch {
  const { observer, listener } = deps;
  return ticker.watch((reason) => observer.idle(listener, { method, path, reason, timeoutMs: ticker.timeoutMs }));
}

/** 408 when the client's body stalled (RFC 9110 §15.5.9), 504 when the upstream never answered. */
function idleAnswer(deps: ListenerAppDeps, dialect: ReturnType<typeof dialectFor>, err: IdleTimeoutError): Response {
  const limit = `LLM_IDLE_TIMEOUT (${formatDuration(deps.idle!.timeoutMs)})`;
  const name = deps.listener === "ollama" ? "Ollama" : "ComfyUI";
  if (err.reason === "request_body") {
    return errorResponse(dialect, {
      status: 408,
      type: "request_timeout",
      message: `gpu-turnstile: the request body stopped arriving for ${limit}`,
      headers: { connection: "close" },
    });
  }
  return errorResponse(dialect, {
    status: 504,
    type: "upstream_timeout",
    message: `gpu-turnstile: ${name} sent no answer for ${limit}`,
  });
}

function unreachable(deps: ListenerAppDeps, req: Request, url: RequestTarget, reason: string): Response {
  deps.observer.upstreamFailed(deps.listener, { method: req.method, path: url.pathname, reason });
  const name = deps.listener === "ollama" ? "Ollama" : "ComfyUI";
  return errorResponse(dialectFor(deps.listener, url.pathname), {
    status: 502,
    type: "upstream_unreachable",
    message: `gpu-turnstile could not reach ${name} at ${deps.upstream.host}: ${redactCredentials(reason)}`,
  });
}
