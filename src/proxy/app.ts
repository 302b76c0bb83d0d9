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
import type { ImageClient } from "../lock/index.ts";
import { formatDuration } from "../config/duration.ts";
import { dialectFor, errorResponse, ownAnswerSize, type ErrorReply, type ImageDialect } from "../http/dialect.ts";
import { admit, requestPath, type RequestTarget } from "./front-door.ts";
import type { PassWatch } from "./comfy-cancels.ts";
import { forward, whenBodyDone, type Hold, type RetryNotice, type RetryPolicy } from "../http/forward.ts";
import { IdleTimeoutError, type IdleReason, type IdleTicker, type IdleWatch } from "../http/idle-watch.ts";
import { modelFieldWatcher } from "../ollama/model-field.ts";
import { inflatesZstd, type NoGpuReason } from "../ollama/gpu-free.ts";
import { ZstdInflater } from "../http/zstd-body.ts";
import { releasingTracker, type LlmQuota } from "./llm-quota.ts";
import { admitLLM, busyMessage, GpuBusyError, type BusyReason, type GateSettings, type LlmLock } from "./llm-gate.ts";
import { QUEUE_VIEW_PATHS, withHeldJobs, type HeldQueue } from "../balance/comfy-queue.ts";
import type { WorkClass } from "../tenants/types.ts";

/** A request as the log sees it: `client` is the peer address, `model` an LLM request's (once its body was read). */
export interface RequestInfo {
  listener: Listener;
  method: string;
  path: string;
  class: RequestClass | "internal";
  client?: string;
  model?: string;
  /** An LLM request that passed without the lock: it uses no local GPU (ollama/gpu-free.ts). */
  noGpu?: NoGpuReason;
  /** Served at once during an image job, on the nested listener (LISTEN_OLLAMA_NESTED). */
  nested?: boolean;
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
  /** The request runs as part of the image job now on the GPU (the nested listener). */
  nested(t: T): void;
  /** The upstream refused the connection: the slot is given back until the next try. */
  retrying?(t: T): void;
  end(t: T): void;
}

/** A nested request's place in the running image session; the session's end waits for its release. */
export interface NestedSlot {
  release(): void;
  /** False once the session's end let go of it: the request then goes through the lock. */
  live(): boolean;
  /** Called when the session's end stopped waiting for it: the request is cut. */
  onCut(cut: (err: Error) => void): void;
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
  /** The image listener's error shape: its image tenant's (ComfyUI's by default). */
  imageDialect?: ImageDialect;
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
  /** Concurrent LLM requests per client (QUOTA_LLM_REQUESTS, issue 30); absent = none. */
  llmQuota?: LlmQuota;
  /**
   * Who an LLM request that must wait is, with the number `llmTracker` gave it (`tracked`): its
   * place in line (issue 30). Asked only when it waits.
   */
  llmWaiter?: (req: Request, clientIp: string | undefined, tracked: unknown) => ImageClient;
  /** Each LLM request granted a slot (each try), with its wait: the metrics by class (issue 30). */
  llmWaited?: (req: Request, clientIp: string | undefined, waitedMs: number) => void;
  /** The inflate budget for zstd bodies, shared by the listeners (zstd-body.ts). */
  inflater?: ZstdInflater;
  /**
   * Which LLM bodies use no local GPU and pass without the lock (Ollama's rules for its version);
   * a promise when Ollama must be asked first (a cloud-looking model). It never rejects.
   */
  noGpu?: (path: string, body: Uint8Array, scanned: string | undefined) => NoGpuReason | undefined | Promise<NoGpuReason | undefined>;
  /** The nested listener: a slot in the image session running a job now, if there is one. */
  nested?: () => NestedSlot | undefined;
  /**
   * COEXIST: during an image session, a hold for a request to the model staying beside it (served
   * at once, jobs/coexist.ts); undefined otherwise. The model is read from a buffered body.
   */
  coexist?: (model: string | undefined) => Hold | undefined;
  /** Whether the last health probe found this listener's upstream down (pass-through fails fast then). */
  upstreamDown?: () => boolean;
  /** Drops a client's connection without an error (the listener's server; see h1-pool.ts's cutClient). */
  cutClient?: (req: Request) => void;
  /** Sets the client connection's idle timer (CLIENT_IDLE_TIMEOUT) again, just before an answer's last byte (client-idle.ts). */
  clientIdle?: (req: Request) => void;
  /** Sees requests that pass through (the ComfyUI listener's cancel routes, comfy-cancels.ts). */
  watchPass?: (method: string, routedPath: string) => PassWatch | undefined;
  /** GET /readyz, given its `class` query parameter (balance/readyz.ts); absent: 404. */
  readyz?: (classParam: string | null) => Response;
  /** The listener's tenant's classification (LLM_KIND's or IMAGE_KIND's driver); absent: classify.ts's tables. */
  classify?: (method: string, routedPath: string) => WorkClass;
  /** A request the turnstile answers itself because it manages what it would do (vLLM's /sleep); absent: none. */
  refuse?: (method: string, routedPath: string) => ErrorReply | undefined;
  /** An `image-sync` request: the request is the job (tenants/sync-job.ts). */
  syncJob?: (req: Request, url: RequestTarget, clientIp: string | undefined) => Promise<Response>;
  /** Resolves once the LLM side is restored after an image turn (vLLM's wake_up); undefined when nothing is owed. */
  restored?: () => Promise<void> | undefined;
  /** Would an image job start now (X-Turnstile-Wait: 0 on /prompt)? Absent: it always waits. */
  imageReady?: () => boolean;
  /** Image jobs held for the GPU that ComfyUI cannot see yet, added to its GET /queue and /prompt answers. */
  heldImageJobs?: () => HeldQueue;
}

/**
 * A request header asking not to wait: a request that would wait gets its busy answer at once, so a
 * balancer can send it to another card (HAProxy `retry-on 503`, nginx `proxy_next_upstream`).
 * Read with one lookup per LLM or image request, and never forwarded (upstream/headers.ts).
 */
export const NO_WAIT_HEADER = "x-turnstile-wait";

/** The gate of a request that asked not to wait: LLM_BUSY_MODE=reject for this one request. */
const NO_WAIT_GATE: GateSettings = { mode: "reject", waitTimeoutMs: 0 };

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

/** A tenant's work class as the log, the metrics and the rest of this file name it. */
const CLASS_OF: Record<WorkClass, RequestClass> = { llm: "llm", "image-async": "image", "image-sync": "image", pass: "pass" };

/** The two paths the turnstile answers itself; everything else belongs to the upstream. */
export const INTERNAL_PATHS: ReadonlySet<string> = new Set(["/healthz", "/metrics", "/readyz"]);

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
  app.get("/readyz", (c) => {
    counted("/readyz");
    return deps.readyz ? deps.readyz(c.req.query("class") ?? null) : c.json({ error: "gpu-turnstile: no /readyz here" }, 404);
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
    return answered(errorResponse(dialectFor(listener, info.path, deps.imageDialect), reply), req, deps, info, performance.now());
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
      const page = deps.turnstile(req, clientIp);
      return deps.clientIdle ? idleAfterPage(page, req, deps.clientIdle) : page;
    }
    const own = deps.refuse?.(req.method, door.routed);
    if (own) return refused(req, "pass", own, clientIp);
    const work = deps.classify?.(req.method, door.routed);
    const cls = work === undefined ? classify(listener, req.method, door.routed) : CLASS_OF[work];
    const t0 = performance.now();
    const info: Info = { listener, method: req.method, path: url.pathname, class: cls, client: clientIp };
    observer.start(info);
    const failed = (err: unknown): Response => {
      const res = req.signal.aborted ? new Response(null, { status: CLIENT_CLOSED }) : internalError(deps, req, url.pathname, err);
      return answered(res, req, deps, info, t0);
    };
    try {
      if (cls === "llm") return proxyLLM(req, url, door.routed, clientIp, deps, info, t0).catch(failed);
      const job = cls !== "image" ? undefined : work === "image-sync" ? deps.syncJob : deps.imageJob && ((r: Request, _u: RequestTarget, ip: string | undefined) => handleImageJob(r, ip, deps.imageJob!));
      if (job) {
        if (deps.imageReady && req.headers.get(NO_WAIT_HEADER) === "0" && !deps.imageReady()) return answered(busyAnswer(deps, deps.imageDialect ?? "comfy"), req, deps, info, t0);
        return job(req, url, clientIp).then((res) => answered(res, req, deps, info, t0)).catch(failed);
      }
      const held = deps.heldImageJobs && req.method === "GET" && QUEUE_VIEW_PATHS.has(door.routed) ? deps.heldImageJobs : undefined;
      return proxyPass(req, url, clientIp, deps, info, t0, deps.watchPass?.(req.method, door.routed), held).catch(failed);
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
      if (!door.ok) return refused(req, cls, door.reply);
      // A websocket the tenant runs GPU work over (SwarmUI's GenerateText2ImageWS) would hold the card without the lock.
      const work = deps.classify?.(req.method, door.routed);
      if (work === undefined || work === "pass") return door.url;
      const message = `gpu-turnstile: ${req.method} ${door.url.pathname} runs GPU work over a websocket, which the turnstile cannot hold the card for; use the HTTP route`;
      return refused(req, cls, { status: 403, type: "websocket_work_refused", message });
    },
  };
}

function internalError(deps: ListenerAppDeps, req: Request, path: string, err: unknown): Response {
  const reason = err instanceof Error ? err.message : String(err);
  deps.observer.upstreamFailed(deps.listener, { method: req.method, path, reason });
  return errorResponse(dialectFor(deps.listener, path, deps.imageDialect), {
    status: 500,
    type: "internal_error",
    message: `gpu-turnstile internal error: ${reason}`,
  });
}

/**
 * The response to send, its request logged and counted when its body has ended (not when its
 * head left: a 5 s stream is logged as 5 s), and `hold` released then. Built outside the request's
 * scope, so an open stream keeps only what it needs alive (the request itself only for the
 * listener's timer calls, as cutClient does). The client connection's idle timer is set again
 * just before the last byte (ListenerAppDeps.clientIdle).
 */
function answered(res: Response, req: Request, deps: Pick<ListenerAppDeps, "observer" | "clientIdle">, info: Info, t0: number, hold?: Hold, watch?: IdleWatch): Response {
  const status = res.status;
  const { observer, clientIdle } = deps;
  const end = (e: BodyEnd) => {
    hold?.release();
    observer.end({ ...info, status, durationMs: performance.now() - t0, bytes: e.bytes, cut: e.cut });
  };
  const own = ownAnswerSize(res);
  if (own === undefined) return whenBodyDone(res, req.signal, end, watch, clientIdle && (() => clientIdle(req)));
  end({ bytes: own });
  clientIdle?.(req);
  return res;
}

/** `held`: ComfyUI's queue answers get the image jobs the turnstile holds added (balance/comfy-queue.ts). */
function proxyPass(req: Request, url: RequestTarget, clientIp: string | undefined, deps: ListenerAppDeps, info: Info, t0: number, pass?: PassWatch, held?: () => HeldQueue): Promise<Response> {
  return forward(req, {
    upstream: deps.upstream,
    url,
    signal: req.signal,
    clientIp,
    retry: deps.retry,
    // Open WebUI's model list must not hang for UPSTREAM_RETRY_TIMEOUT on an Ollama known to be down.
    knownDown: deps.upstreamDown,
    // An answer read whole here (held) must fail its read when cut, not wait for a client cut with it.
    cutClient: held ? undefined : cutFor(deps, req),
    onRetry: (n) => deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname }),
    onBody: pass && ((b) => pass.body(b)),
  }).then((result) => {
    if (!result.ok) return answered(unreachable(deps, req, url, result.reason), req, deps, info, t0);
    pass?.answered(result.response.status);
    // No async frame for the common pass-through (forward.ts says what one costs).
    if (held) {
      // A queue answer ComfyUI cut off: a 502 in its shape, not a request that never ends.
      return withHeldJobs(result.response, held()).then(
        (res) => answered(res, req, deps, info, t0),
        (err: unknown) => answered(unreachable(deps, req, url, err instanceof Error ? err.message : String(err)), req, deps, info, t0),
      );
    }
    return answered(result.response, req, deps, info, t0, pass?.ended && { release: () => pass.ended!() });
  });
}

/** A request body the turnstile refuses before any upstream sees it (a zstd bomb, a corrupt frame). */
class BodyRefused extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The hold of a request that needs no GPU slot. */
const NO_HOLD: Hold = { release() {} };

/**
 * An LLM request holds its slot until the response is fully written or the client goes away,
 * whichever comes first, or no byte moved for LLM_IDLE_TIMEOUT; the lease's release is
 * idempotent, so more than one of these may fire. A buffered body is read before the slot: one
 * that uses no local GPU (a cloud model, an unload) passes without it.
 */
async function proxyLLM(
  req: Request,
  url: RequestTarget,
  routed: string,
  clientIp: string | undefined,
  deps: ListenerAppDeps,
  info: Info,
  t0: number,
): Promise<Response> {
  const dialect = dialectFor(deps.listener, url.pathname, deps.imageDialect);
  // A client at its quota is refused before anything is held; a slot ends with the request's entry.
  const quota = deps.llmQuota?.take(req, clientIp);
  if (quota && "refused" in quota) return answered(errorResponse(dialect, { status: 429, ...quota.refused }), req, deps, info, t0);
  const watch = deps.idle && watchIdle(deps.idle, deps, req.method, url.pathname);
  const tracker = quota ? releasingTracker(deps.llmTracker, quota) : deps.llmTracker;
  const tracked = tracker?.start(url.pathname, clientIp);
  // The nested listener during an image job: the request is part of the job, it takes no LLM slot.
  let nested = deps.nested?.();
  if (nested) {
    info.nested = true;
    tracker?.nested(tracked);
  }
  const gate = req.headers.get(NO_WAIT_HEADER) === "0" ? NO_WAIT_GATE : deps.busy;
  const waited = deps.llmWaited;
  const admitSlot = () =>
    admitLLM(deps.lock, gate, req.signal, deps.llmWaiter && (() => deps.llmWaiter!(req, clientIp, tracked))).then((h) => {
      tracker?.admitted(tracked);
      waited?.(req, clientIp, h.waitedMs);
      return h;
    });
  // Ollama's word on a cloud-looking model, asked while the body was read (readAhead).
  let asked: Promise<void> | undefined;
  // Per attempt: a retry after the image job ended goes through the lock like any request.
  const acquire = async (): Promise<Hold> => {
    if (asked) await asked;
    if (info.noGpu) {
      // Nothing of the job's card is used: the session's end need not wait for it.
      nested?.release();
      nested = undefined;
      info.nested = undefined;
      return NO_HOLD;
    }
    let slot = nested ?? deps.nested?.();
    nested = undefined;
    // Taken when the request arrived; its job may have ended while the body was still coming.
    if (slot && !slot.live()) {
      slot.release();
      slot = undefined;
    }
    info.nested = slot ? true : undefined;
    if (slot && watch) slot.onCut((err) => watch.cut(err));
    // COEXIST: the model staying beside the image session is served without the lock.
    const beside = slot ? undefined : deps.coexist?.(model);
    const hold = slot ?? beside ?? (await admitSlot());
    // Under the slot, so no image turn can begin while the LLM side wakes. A nested request wakes it
    // too (vLLM put to sleep for the session): the job asked for the LLM, beside itself.
    if (!beside) await deps.restored?.();
    return watch ? watch.arm(hold) : hold;
  };
  const bodyWatch = deps.watchLlmBody?.();
  // Ollama reads a zstd body inflated on its /v1 routes (api-facts S1); the original bytes are what is forwarded.
  const zstd = req.headers.get("content-encoding") === "zstd" && inflatesZstd(routed);
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
  const read = (plain: Uint8Array) => {
    scannedAhead = true;
    scan?.(plain);
    const free = deps.noGpu?.(routed, plain, model);
    const mark = (reason: NoGpuReason | undefined) => {
      if (!reason) return;
      info.noGpu = reason;
      // Not a GPU user: off the status list of LLM requests, out of the blind unload's memory.
      tracker?.end(tracked);
    };
    if (free instanceof Promise) asked = free.then(mark);
    else mark(free);
  };
  // A zstd body is always read, even with nothing to learn from it: a corrupt one is never forwarded.
  const readAhead = zstd ? (b: Uint8Array) => readInflated(deps.inflater ?? sharedInflater, b, req.signal, read) : scan || deps.noGpu ? read : undefined;
  let result;
  try {
    result = await forward(req, {
      upstream: deps.upstream,
      url,
      signal: req.signal,
      clientIp,
      retry: deps.retry,
      acquire,
      // Per attempt, once its hold is taken: only one made under the job's slot is part of the job.
      mark: deps.nested && (() => (info.nested ? NESTED_MARK : undefined)),
      cutClient: cutFor(deps, req),
      watchBody:
        scan &&
        ((c) => {
          if (!scannedAhead && !zstd) scan(c);
          if (model !== undefined && !told && !info.noGpu) {
            told = true;
            bodyWatch?.sent(model);
          }
        }),
      onRetry: (n) => {
        tracker?.retrying?.(tracked);
        deps.observer.retry(deps.listener, { ...n, method: req.method, path: url.pathname });
      },
      watch,
      onBody: readAhead,
    });
  } catch (err) {
    info.model = model;
    tracker?.end(tracked);
    // Refused or gone before its first attempt: it used nothing of the job's card.
    if (nested) {
      nested.release();
      info.nested = undefined;
    }
    if (err instanceof IdleTimeoutError) return answered(idleAnswer(deps, dialect, err), req, deps, info, t0);
    if (err instanceof BodyRefused) {
      const type = err.status === 413 ? "request_too_large" : "invalid_request_error";
      return answered(errorResponse(dialect, { status: err.status, type, message: `gpu-turnstile: ${err.message}` }), req, deps, info, t0);
    }
    if (!(err instanceof GpuBusyError)) throw err;
    deps.observer.busy(err.reason);
    return answered(busyAnswer(deps, dialect, err.reason), req, deps, info, t0);
  }
  info.model = model;
  if (!result.ok) {
    tracker?.end(tracked);
    return answered(unreachable(deps, req, url, result.reason), req, deps, info, t0);
  }
  if (!info.noGpu) bodyWatch?.answered(result.response.status);
  if (watch) watch.stage = "response";
  return answered(result.response, req, deps, info, t0, trackedHold(result.hold!, tracker, tracked), watch);
}

/**
 * The header a request served during an image job carries to Ollama: Ollama ignores it; the
 * simulated one records the model it loads as loaded by the operator's choice (src/sim/gpu.ts).
 * The front door drops it from clients (upstream/headers.ts), so no other request can carry it.
 */
export const NESTED_MARK: readonly [string, string] = ["x-gpu-turnstile-nested", "1"];

/** The process's one budget for inflated zstd bodies, when the deps bring none (tests). */
const sharedInflater = new ZstdInflater();

/** Reads the inflated body, its share of the inflate budget held meanwhile; or throws the refusal the client gets. */
async function readInflated(inflater: ZstdInflater, b: Uint8Array, signal: AbortSignal, read: (plain: Uint8Array) => void): Promise<void> {
  const r = await inflater.inflate(b, signal);
  if (!r.ok) throw new BodyRefused(r.status, r.message);
  try {
    // Reading a large body is one long piece of work: what waits for I/O (a /healthz) goes first.
    if (r.body.length > 1 << 20) await new Promise((resolve) => setImmediate(resolve));
    read(r.body);
  } finally {
    r.release();
  }
}

/** A turnstile page sets the idle timer again as it goes out; /turnstile/events (a stream that ends by closing) leaves it lifted. */
function idleAfterPage(page: Response | Promise<Response>, req: Request, clientIdle: (req: Request) => void): Response | Promise<Response> {
  const set = (res: Response) => {
    if (!res.headers.get("content-type")?.startsWith("text/event-stream")) clientIdle(req);
    return res;
  };
  return page instanceof Promise ? page.then(set) : set(page);
}

function cutFor(deps: ListenerAppDeps, req: Request): (() => void) | undefined {
  const cut = deps.cutClient;
  return cut && (() => cut(req));
}

/** The busy answer in the client's dialect: LLM_BUSY_STATUS when refused at once, 503 after LLM_WAIT_TIMEOUT. */
function busyAnswer(deps: ListenerAppDeps, dialect: ReturnType<typeof dialectFor>, reason: BusyReason = "reject"): Response {
  // Read once: in `auto` mode it is an estimate, and the message and the header must agree.
  const retryAfterS = deps.busy.retryAfterS;
  return errorResponse(dialect, {
    status: reason === "reject" ? deps.busy.status : 503,
    type: "gpu_busy",
    message: busyMessage(reason, retryAfterS, deps.lock.state),
    headers: { "retry-after": String(retryAfterS) },
  });
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
  const name = deps.listener === "comfy" ? "ComfyUI" : "Ollama";
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
  const name = deps.listener === "comfy" ? "ComfyUI" : "Ollama";
  return errorResponse(dialectFor(deps.listener, url.pathname, deps.imageDialect), {
    status: 502,
    type: "upstream_unreachable",
    message: `gpu-turnstile could not reach ${name} at ${deps.upstream.host}: ${redactCredentials(reason)}`,
  });
}
