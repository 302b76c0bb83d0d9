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
import { dialectFor, errorResponse, type ErrorReply } from "./dialect.ts";
import { admit, requestPath } from "./front-door.ts";
import { forward, relayResponse, whenBodyDone, type Hold, type RetryNotice, type RetryPolicy } from "./forward.ts";
import { admitLLM, busyMessage, GpuBusyError, type BusyReason, type LlmLock } from "./llm-gate.ts";

export interface RequestObserver {
  start(r: { listener: Listener; method: string; path: string; class: RequestClass | "internal" }): void;
  end(r: {
    listener: Listener;
    method: string;
    path: string;
    class: RequestClass | "internal";
    status: number;
    durationMs: number;
  }): void;
  busy(reason: BusyReason): void;
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
  /** The buffered request body, when there is one (to read the model from). */
  body(t: T, bytes: Uint8Array): void;
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
  watchLlmBody?: () => (chunk: Uint8Array) => void;
  /** The listener's DNS-rebinding guard (host-guard.ts): may a request with this Host pass. */
  hostAllowed: (host: string) => boolean;
  /** Answers everything under /turnstile/ (status API, event stream, page). */
  turnstile?: (req: Request, clientIp: string | undefined) => Response | Promise<Response>;
  llmTracker?: LlmTracker;
}

/** Status written to the request log when the client went away before an answer (nginx's 499). */
export const CLIENT_CLOSED = 499;

export type AppEnv = { Bindings: { clientIp: string | undefined } };

export interface ListenerApp {
  /** The whole listener as a Hono app: /healthz, /metrics, and everything else to `proxy`. */
  app: Hono<AppEnv>;
  /** The proxy route alone: admit → classify → gate → forward. Never throws. */
  proxy(req: Request, clientIp: string | undefined): Promise<Response>;
  /** GET or HEAD of an INTERNAL_PATHS path, answered whatever the Host (an `nc` or HTTP/1.0 check sends none). */
  internal(req: Request, clientIp: string | undefined): Response | Promise<Response>;
  /** The front-door checks for a request that `proxy` does not see (a websocket upgrade): its URL, or the refusal to send. */
  admit(req: Request, cls: RequestClass): URL | Response;
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
  const refused = (req: Request, cls: RequestClass, reply: ErrorReply): Response => {
    const info = { listener, method: req.method, path: requestPath(req.url), class: cls };
    observer.start(info);
    observer.end({ ...info, status: reply.status, durationMs: 0 });
    return errorResponse(dialectFor(listener, info.path), reply);
  };

  const proxy = async (req: Request, clientIp: string | undefined): Promise<Response> => {
    const door = admit(req, deps.hostAllowed);
    if (!door.ok) return refused(req, "pass", door.reply);
    const { url } = door;
    // After the door, not before: the Host rules guard these pages (DNS rebinding) like the proxy.
    if (deps.turnstile && isTurnstilePath(door.routed)) {
      counted(url.pathname);
      return deps.turnstile(req, clientIp);
    }
    const cls = classify(listener, req.method, door.routed);
    const t0 = performance.now();
    const info = { listener, method: req.method, path: url.pathname, class: cls };
    observer.start(info);
    let res: Response;
    try {
      if (cls === "llm") res = await proxyLLM(req, url, clientIp, deps);
      else if (cls === "image" && deps.imageJob) res = await handleImageJob(req, clientIp, deps.imageJob);
      else res = await proxyPass(req, url, clientIp, deps);
    } catch (err) {
      if (req.signal.aborted) res = new Response(null, { status: CLIENT_CLOSED });
      else res = internalError(deps, req, url.pathname, err);
    }
    observer.end({ ...info, status: res.status, durationMs: performance.now() - t0 });
    return res;
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

async function proxyPass(req: Request, url: URL, clientIp: string | undefined, deps: ListenerAppDeps): Promise<Response> {
  const result = await forward(req, {
    upstream: deps.upstream,
    url,
    signal: req.signal,
    clientIp,
    retry: deps.retry,
    onRetry: (n) => deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname }),
  });
  if (!result.ok) return unreachable(deps, req, url, result.reason);
  return relayResponse(result.response);
}

/**
 * An LLM request holds its slot until the response is fully written or the client goes away,
 * whichever comes first; the lease's release is idempotent, so both paths may fire.
 */
async function proxyLLM(req: Request, url: URL, clientIp: string | undefined, deps: ListenerAppDeps): Promise<Response> {
  const dialect = dialectFor(deps.listener, url.pathname);
  const tracker = deps.llmTracker;
  const t = tracker?.start(url.pathname, clientIp);
  let streaming = false;
  let result;
  try {
    try {
      result = await forward(req, {
        upstream: deps.upstream,
        url,
        signal: req.signal,
        clientIp,
        retry: deps.retry,
        acquire: tracker
          ? () => admitLLM(deps.lock, deps.busy, req.signal).then((h) => (tracker.admitted(t), h))
          : () => admitLLM(deps.lock, deps.busy, req.signal),
        watchBody: deps.watchLlmBody?.(),
        onRetry: (n) => deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname }),
        onBody: tracker && ((b) => tracker.body(t, b)),
      });
    } catch (err) {
      if (!(err instanceof GpuBusyError)) throw err;
      deps.observer.busy(err.reason);
      return errorResponse(dialect, {
        status: err.reason === "reject" ? deps.busy.status : 503,
        type: "gpu_busy",
        message: busyMessage(err.reason, deps.busy.retryAfterS),
        headers: { "retry-after": String(deps.busy.retryAfterS) },
      });
    }
    if (!result.ok) return unreachable(deps, req, url, result.reason);
    streaming = true;
    return whenBodyDone(result.response, req.signal, releaser(result.hold!, tracker, t));
  } finally {
    if (!streaming) tracker?.end(t);
  }
}

/** A release that keeps only the lease alive while the stream is open (not this request's scope). */
function releaser(hold: Hold, tracker: LlmTracker | undefined, t: unknown): () => void {
  if (!tracker) return () => hold.release();
  return () => {
    hold.release();
    tracker.end(t);
  };
}

function unreachable(deps: ListenerAppDeps, req: Request, url: URL, reason: string): Response {
  deps.observer.upstreamFailed(deps.listener, { method: req.method, path: url.pathname, reason });
  const name = deps.listener === "ollama" ? "Ollama" : "ComfyUI";
  return errorResponse(dialectFor(deps.listener, url.pathname), {
    status: 502,
    type: "upstream_unreachable",
    message: `gpu-turnstile could not reach ${name} at ${deps.upstream.host}: ${redactCredentials(reason)}`,
  });
}
