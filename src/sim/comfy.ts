/**
 * A simulated ComfyUI server on loopback: the fake behind the end-to-end tests and the image
 * tenant of the `demo` command. Routes, status codes and bodies follow ../shared/api (C1–C8 in
 * v0.3.64 shapes, plus today's jobs API and prompt_id rule unless `legacy`), every route also
 * answers under `/api`, and bodies are Python json.dumps text.
 */
import { randomUUID } from "node:crypto";
import type { ServerWebSocket } from "bun";
import { FileStore } from "./comfy-files.ts";
import { comfyRoutes, type SimDevice, empty, FEATURES, HandlerError, methodNotAllowed, serverError, text } from "./comfy-routes.ts";
import { SocketHub, type WsData } from "./comfy-ws.ts";
import { ComfyWorker, type JobInfo } from "./comfy-worker.ts";
import { SimGpu } from "./gpu.ts";
import { baseUrl, CallLog, isLoopbackHostname, loopbackOnly, type OverrideHandler, type RecordedCall, readBody, routedPath } from "./http.ts";
import { dumpsPy, isDict, parsePy } from "./pyjson.ts";
import { Timers } from "./timers.ts";

export interface ComfySimOptions {
  /** Shared GPU; the simulator makes its own when absent. */
  gpu?: SimGpu;
  /** Run time of one job (default 300; `extra_data.sim_job_ms` overrides per prompt). */
  jobMs?: number;
  /**
   * Time to load the checkpoint cold: for the first job and after a /free that unloaded it
   * (default half of jobMs — SDXL loads in a few seconds against a 5-10 s picture).
   */
  loadMs?: number;
  /** VRAM the checkpoint occupies from a job's start until /free (default 2.5 GiB). */
  modelBytes?: number;
  /**
   * Working memory a job's sampler grows to above the checkpoint, step by step (default 0: none);
   * `extra_data.sim_work_bytes` sets it per prompt. One that does not fit fails the job (OOM).
   */
  workBytes?: number;
  /** Time between the worker acting on /free and the memory being back (default 100). */
  freeDelayMs?: number;
  /** /history never shows jobs: a ComfyUI that restarted and forgot them. */
  forgetJobs?: boolean;
  /** Jobs for which this returns true end with execution_error (also `extra_data.sim_fail`). */
  failJobs?: (promptId: string) => boolean;
  /**
   * 403 when Host is loopback and Origin names another host (default true; C7). false is ComfyUI
   * started with `--enable-cors-header` (its /system_stats argv says so).
   */
  checkOrigin?: boolean;
  /** Echo every websocket frame a client sends, unchanged (for relay tests). */
  wsEcho?: boolean;
  /** Size of each generated output image (default 64 KiB). */
  outputBytes?: number;
  /** When > 0, each sampler step also sends a binary PREVIEW_IMAGE frame of this many bytes. */
  previewBytes?: number;
  /** Where prompt-enhancer nodes with an empty URL field call Ollama (comfyui-ollama's OLLAMA_HOST). */
  ollamaUrl?: string;
  /**
   * Behave like ComfyUI v0.3.64: any string is a prompt_id and there is no jobs API (its routes
   * 404 as unknown routes). Default false: today's ComfyUI (api-facts S3).
   */
  legacy?: boolean;
  /** The torch device /system_stats shows (default cuda); `cpu`/`mps` report the system's RAM (api-facts R1). */
  device?: SimDevice;
  /** Keep `calls` (default true); benchmarks turn it off. */
  recordCalls?: boolean;
  /** Listen address; loopback only (default 127.0.0.1). */
  hostname?: string;
  /** Listen port (default 0: any free port). */
  port?: number;
}

export interface ComfySim {
  readonly url: string;
  readonly port: number;
  readonly gpu: SimGpu;
  readonly calls: RecordedCall[];
  /** Every accepted job (deleted pending ones excepted), in submission order. */
  jobs(): JobInfo[];
  runningJob(): JobInfo | undefined;
  /** Cold checkpoint loads so far (each also shows on the GPU as load-start / loaded). */
  checkpointLoads(): number;
  /** Open websocket clients. */
  sockets(): number;
  /** The clientId of each open websocket client. */
  socketIds(): string[];
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  /**
   * The ComfyUI process dies: the port refuses connections, its memory goes back to the GPU, and
   * its queue and history are gone. Recorded calls and overrides survive (they are the test's).
   */
  crash(): Promise<void>;
  /** ComfyUI starts again on the same port, with an empty queue and history and no model cached. */
  revive(): Promise<void>;
  stop(): Promise<void>;
}

export async function startComfySim(opts: ComfySimOptions = {}): Promise<ComfySim> {
  const hostname = loopbackOnly(opts.hostname);
  const gpu = opts.gpu ?? new SimGpu();
  const log = new CallLog(opts.recordCalls ?? true);
  const checkOrigin = opts.checkOrigin ?? true;
  const wsEcho = opts.wsEcho ?? false;
  let port = opts.port ?? 0;

  /** One life of the ComfyUI process: everything a crash loses. */
  interface Life {
    timers: Timers;
    hub: SocketHub;
    worker: ComfyWorker;
    server: Bun.Server<WsData>;
  }

  /**
   * create_origin_only_middleware: a browser on another site must not reach a loopback ComfyUI.
   * Today's version first refuses whatever the browser calls cross-site (Sec-Fetch-Site).
   */
  function originRejected(req: Request): boolean {
    if (checkOrigin && !opts.legacy && req.headers.get("sec-fetch-site") === "cross-site") return true;
    const host = req.headers.get("host");
    const origin = req.headers.get("origin");
    if (!checkOrigin || host === null || origin === null) return false;
    let originUrl: URL;
    try {
      originUrl = new URL(origin);
    } catch {
      return false;
    }
    let hostUrl: URL;
    try {
      hostUrl = new URL(`http://${host.toLowerCase()}`);
    } catch {
      return false;
    }
    const hostName = hostUrl.hostname;
    if (!isLoopbackHostname(hostName)) return false;
    let hostDomain = host.toLowerCase();
    let originDomain = originUrl.host.toLowerCase();
    if (originUrl.port === "") hostDomain = hostName;
    if (hostUrl.port === "") originDomain = originUrl.hostname.toLowerCase();
    return hostDomain !== "" && originDomain !== "" && hostDomain !== originDomain;
  }

  function boot(): Life {
    const timers = new Timers();
    const hub = new SocketHub();
    const files = new FileStore(opts.outputBytes ?? 64 * 1024);
    const worker = new ComfyWorker(gpu, timers, hub, files, {
      jobMs: opts.jobMs ?? 300,
      loadMs: opts.loadMs ?? Math.round((opts.jobMs ?? 300) / 2),
      modelBytes: opts.modelBytes ?? 2_684_354_560,
      freeDelayMs: opts.freeDelayMs ?? 100,
      forgetJobs: opts.forgetJobs ?? false,
      outputBytes: opts.outputBytes ?? 64 * 1024,
      previewBytes: opts.previewBytes ?? 0,
      ollamaUrl: opts.ollamaUrl,
      fail: opts.failJobs,
      sharedMemory: (opts.device ?? "cuda") !== "cuda",
      workBytes: opts.workBytes,
    });
    const route = comfyRoutes({ gpu, worker, files, hostname, port: () => port, legacy: opts.legacy ?? false, cors: !checkOrigin, device: opts.device });

    async function handle(req: Request, server: Bun.Server<WsData>): Promise<Response | undefined> {
      const url = new URL(req.url);
      const isUpgrade = req.headers.get("upgrade")?.toLowerCase() === "websocket";
      const body = isUpgrade ? new Uint8Array(0) : await readBody(req);
      log.record(req, url, body);
      const injected = await log.runOverrides(req, url, body);
      if (injected) return injected;
      if (originRejected(req)) return empty(403);
      if (req.method === "OPTIONS") return empty(200);

      const path = routedPath(url.pathname);
      if (path === undefined) return text(400, "400: Bad Request");
      if (path === "/ws" || path === "/api/ws") {
        if (req.method !== "GET" && req.method !== "HEAD") return methodNotAllowed("GET, HEAD");
        const sid = url.searchParams.get("clientId") || randomUUID().replace(/-/g, "");
        if (server.upgrade(req, { data: { sid, first: true } })) return undefined;
        return text(400, 'No WebSocket UPGRADE hdr: None\n Can "Upgrade" only to "WebSocket".');
      }

      const r = route(path);
      if (!r) return text(404, "404: Not Found");
      // aiohttp answers HEAD for every GET route.
      const handler = r.methods[req.method] ?? (req.method === "HEAD" ? r.methods.GET : undefined);
      if (!handler) return methodNotAllowed(Object.keys(r.methods).flatMap((m) => (m === "GET" ? ["GET", "HEAD"] : [m])).join(", "));
      try {
        return await handler({ req, url, body, params: r.params });
      } catch (e) {
        if (e instanceof HandlerError) return serverError();
        throw e;
      }
    }

    const server = Bun.serve<WsData>({
      hostname,
      port,
      idleTimeout: 0,
      fetch: handle,
      error: () => serverError(),
      websocket: {
        idleTimeout: 0,
        sendPings: false, // aiohttp's WebSocketResponse sends no heartbeat by default
        maxPayloadLength: 64 * 1024 * 1024,
        backpressureLimit: 256 * 1024 * 1024,
        open(ws: ServerWebSocket<WsData>) {
          hub.add(ws);
          ws.send(dumpsPy({ type: "status", data: { status: { exec_info: { queue_remaining: worker.queueRemaining() } }, sid: ws.data.sid } }));
          const node = worker.runningNodeFor(ws.data.sid);
          if (node !== undefined) ws.send(dumpsPy({ type: "executing", data: { node } }));
        },
        message(ws: ServerWebSocket<WsData>, message: string | Buffer) {
          if (wsEcho) {
            // aiohttp's send awaits the socket: an echo to a peer that does not read stops the reading.
            ws.send(message);
            if (ws.getBufferedAmount() > 16 * 1024 * 1024) ws.pause();
            return;
          }
          if (typeof message !== "string") return;
          const first = ws.data.first;
          ws.data.first = false;
          if (!first) return;
          try {
            const data = parsePy(message);
            if (isDict(data) && data.get("type") === "feature_flags") hub.send("feature_flags", FEATURES, ws.data.sid);
          } catch {
            // ComfyUI logs and ignores undecodable client messages
          }
        },
        drain(ws: ServerWebSocket<WsData>) {
          ws.resume();
        },
        close(ws: ServerWebSocket<WsData>) {
          hub.remove(ws);
        },
      },
    });
    port = server.port as number;
    return { timers, hub, worker, server };
  }

  async function kill(l: Life): Promise<void> {
    l.timers.stopAll();
    l.hub.closeAll();
    await l.server.stop(true);
    await l.worker.shutdown();
  }

  let life: Life | undefined = boot();
  /** Loads of earlier lives (before a crash). */
  let loadsBefore = 0;
  let stopped: Promise<void> | undefined;
  return {
    url: baseUrl(hostname, port),
    port,
    gpu,
    calls: log.calls,
    jobs: () => life?.worker.jobs() ?? [],
    runningJob: () => life?.worker.running(),
    checkpointLoads: () => loadsBefore + (life?.worker.checkpointLoads ?? 0),
    sockets: () => life?.hub.size ?? 0,
    socketIds: () => life?.hub.ids() ?? [],
    override: (method, path, handler) => log.override(method, path, handler),
    clearCalls: () => log.clear(),
    async crash() {
      const l = life;
      life = undefined;
      loadsBefore += l?.worker.checkpointLoads ?? 0;
      if (l) await kill(l);
    },
    async revive() {
      if (stopped || life) return;
      life = boot();
    },
    stop() {
      stopped ??= (async () => {
        const l = life;
        life = undefined;
        if (l) await kill(l);
      })();
      return stopped;
    },
  };
}
