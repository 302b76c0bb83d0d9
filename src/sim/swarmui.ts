/**
 * A simulated SwarmUI on loopback: the image tenant behind IMAGE_KIND=swarmui. Shapes follow
 * mcmonkeyprojects/SwarmUI src/WebAPI (API.cs, BackendAPI.cs, T2IAPI.cs):
 * - every call is `POST /API/<Route>` with a JSON body; route names are case-insensitive;
 * - every route but GetNewSession needs `session_id` (in the body or an X-Session-ID header):
 *   missing → 400 {"error_id":"basic_api","error":"missing session id"}; unknown → 401
 *   {"error":"Invalid session ID. You may need to refresh the page.","error_id":"invalid_session_id"};
 * - a route's own failure is a 200 whose body has an `error` key;
 * - GetCurrentStatus counts the generations of the calling session only (session.LiveGens…):
 *   work from another session (SwarmUI's own page) shows in no one else's status, only on the
 *   backends (ListBackends full_data `current_model`).
 * - `current_model` is SwarmUI's own bookkeeping (AbstractT2IBackend.CurrentModelName): set when a
 *   backend loads a model and cleared only when the backend shuts down. FreeBackendMemory
 *   (BackendAPI.cs) calls each backend's FreeMemory, and the ComfyUI one
 *   (src/BuiltinExtensions/ComfyUIBackend/ComfyUIAPIAbstractBackend.cs) only POSTs ComfyUI's
 *   `/free {unload_models:true}`: so after a free, ListBackends still names the model (probe 2).
 * - `GET /ComfyBackendDirect/<path>` relays to one ComfyUI backend
 *   (ComfyUIBackendExtension.cs maps it to ComfyUIRedirectHelper.ComfyBackendDirectHandler): the
 *   running ComfyUI backends, narrowed to the one whose BackendData.ID is the `X-Swarm-Backend-ID`
 *   header when it is an integer, then the first; none → 400 HTML "No ComfyUI backend available".
 *   The sim answers `system_stats` (the backend's own torch reservation) and `queue` there.
 * Each backend is one self-started ComfyUI with one model on the card. FreeBackendMemory returns
 * as soon as each backend was asked (SwarmUI: "give at least one full second before assuming
 * memory is properly cleared"); the memory comes back after the backend's running generation.
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { ServerWebSocket } from "bun";
import { SimGpu } from "./gpu.ts";
import { baseUrl, CallLog, loopbackOnly, type OverrideHandler, type RecordedCall, readBody } from "./http.ts";
import { type CheckpointTiming, IMAGE_SIDE, type ImageLyingModes, jobMsOf, jsonObject, PNG_BASE64, SimCheckpoint, timingOf } from "./image-engine.ts";
import { Timers } from "./timers.ts";

export interface SwarmSimOptions extends ImageLyingModes, Partial<CheckpointTiming> {
  gpu?: SimGpu;
  /** Self-started ComfyUI backends (default 1), each with its own model on the card. */
  backends?: number;
  /** Run time of one generation (default 300; `sim_job_ms` in the request body overrides). */
  jobMs?: number;
  /** The torch device of every backend's ComfyUI (default cuda); cpu/mps report the system's RAM. */
  device?: "cuda" | "cpu" | "mps";
  /** Model the backends load (default "OfficialStableDiffusion/sd_xl_base_1.0"). */
  model?: string;
  recordCalls?: boolean;
  hostname?: string;
  port?: number;
}

export interface SwarmSim {
  readonly url: string;
  readonly port: number;
  readonly gpu: SimGpu;
  readonly calls: RecordedCall[];
  readonly backends: readonly SimCheckpoint[];
  /** Sessions SwarmUI knows now. */
  sessions(): string[];
  /** SwarmUI restarted or cleaned up its sessions: every session id becomes invalid. */
  expireSessions(): void;
  /** Generations answered so far. */
  generations(): number;
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  stop(): Promise<void>;
}

interface Session {
  id: string;
  waiting: number;
  loading: number;
  live: number;
  interrupt: AbortController;
}

const VERSION = "0.9.6.2.GIT-5ee406ba";

interface WsData {
  started: boolean;
}

function err(id: string, message: string, status = 400): Response {
  return json({ error_id: id, error: message }, status);
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json; charset=utf-8" } });
}

export async function startSwarmSim(opts: SwarmSimOptions = {}): Promise<SwarmSim> {
  const hostname = loopbackOnly(opts.hostname);
  const gpu = opts.gpu ?? new SimGpu();
  const log = new CallLog(opts.recordCalls ?? true);
  const timers = new Timers();
  const model = opts.model ?? "OfficialStableDiffusion/sd_xl_base_1.0";
  const timing = timingOf(opts);
  const backends = Array.from({ length: Math.max(1, opts.backends ?? 1) }, (_, i) => new SimCheckpoint(gpu, timers, `backend ${i}: ${model}`, timing));
  const jobMs = opts.jobMs ?? 300;
  const serverId = randomUUID();
  const sessions = new Map<string, Session>();
  let generated = 0;
  /** Backends that loaded the model once: SwarmUI names it in current_model until they shut down. */
  const named = new Set<number>();
  let imageNo = 0;

  function pickBackend(): SimCheckpoint {
    let best = backends[0] as SimCheckpoint;
    for (const b of backends) if (b.running + b.waiting < best.running + best.waiting) best = b;
    return best;
  }

  async function generate(s: Session, body: Record<string, unknown>): Promise<Response> {
    if (typeof body.model !== "string" || body.model === "") return json({ error: "No model input given. Did your UI load properly?" });
    const count = typeof body.images === "number" && body.images > 0 ? Math.floor(body.images) : 1;
    const ms = jobMsOf(body, jobMs);
    const b = pickBackend();
    named.add(backends.indexOf(b));
    const signal = s.interrupt.signal;
    s.waiting++;
    const loadingBefore = b.place !== "gpu";
    if (loadingBefore) s.loading++;
    let counted = true;
    try {
      return await b.generate(async (own) => {
        s.waiting--;
        if (loadingBefore) s.loading--;
        counted = false;
        s.live++;
        gpu.note("job-start", IMAGE_SIDE, b.name);
        const both = AbortSignal.any([own, signal]);
        try {
          await b.step(ms, both);
        } finally {
          s.live--;
          gpu.note("job-end", IMAGE_SIDE, b.name);
        }
        generated++;
        if (both.aborted) return json({ images: [] });
        const day = new Date().toISOString().slice(0, 10);
        const images = Array.from({ length: count }, () =>
          body.donotsave === true ? `data:image/png;base64,${PNG_BASE64}` : `View/local/raw/${day}/${String(++imageNo).padStart(4, "0")}-${String(body.prompt ?? "").slice(0, 40)}.png`,
        );
        return json({ images });
      });
    } finally {
      if (counted) {
        s.waiting--;
        if (loadingBefore) s.loading--;
      }
    }
  }

  function backendToNet(i: number, full: boolean): Record<string, unknown> {
    const b = backends[i] as SimCheckpoint;
    return {
      type: "comfyui_selfstart",
      status: "running",
      id: i,
      settings: { StartScript: "dlbackend/comfy/ComfyUI/main.py", ExtraArgs: "", GPU_ID: "0" },
      modcount: 0,
      features: ["comfyui", "refiners", "controlnet"],
      enabled: true,
      title: "",
      can_load_models: true,
      max_usages: 1,
      seconds_since_used: 0,
      time_since_used: "Never",
      ...(full ? { current_model: named.has(i) ? model : null } : {}),
    };
  }

  /** ComfyUI's own /system_stats of one backend, as relayed by /ComfyBackendDirect. */
  function systemStats(b: SimCheckpoint): Response {
    const device = opts.device ?? "cuda";
    const ram = { total: 25_276_157_952, free: 23_143_354_368 };
    const torch = b.vramBytes;
    const dev =
      device === "cuda"
        ? { name: "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync", type: "cuda", index: 0, vram_total: gpu.vramTotal, vram_free: gpu.vramTotal - gpu.vramUsed(), torch_vram_total: torch, torch_vram_free: 0 }
        : { name: device, type: device, index: null, vram_total: ram.total, vram_free: ram.free, torch_vram_total: ram.total, torch_vram_free: ram.free };
    return json({ system: { os: "posix", comfyui_version: "0.26.0", python_version: "3.12.3", pytorch_version: "2.8.0+cu128", embedded_python: false }, devices: [dev] });
  }

  function comfyDirect(req: Request, path: string): Response {
    const raw = req.headers.get("x-swarm-backend-id");
    const id = raw !== null && /^-?\d+$/.test(raw.trim()) ? Number(raw.trim()) : undefined;
    const b = id === undefined ? backends[0] : backends[id];
    if (!b) return new Response('<!DOCTYPE html><html><body><span class="comfy-failed-to-load">No ComfyUI backend available, loading failed.</span></body></html>', { status: 400, headers: { "content-type": "text/html" } });
    if (path === "system_stats") return systemStats(b);
    if (path === "queue") {
      const entry = () => [0, randomUUID(), {}, {}, []];
      return json({ queue_running: Array.from({ length: b.running }, entry), queue_pending: Array.from({ length: b.waiting }, entry) });
    }
    return new Response("404: Not Found", { status: 404 });
  }

  type Handler = (s: Session, body: Record<string, unknown>) => Response | Promise<Response>;
  const routes: Record<string, Handler> = {
    generatetext2image: generate,
    getcurrentstatus: (s) => {
      const anyLoading = backends.some((b) => b.place === "loading");
      return json({
        status: { waiting_gens: s.waiting, loading_models: s.loading, waiting_backends: 0, live_gens: s.live },
        backend_status: { status: anyLoading ? "some_loading" : "running", class: "", message: "", any_loading: anyLoading },
        supported_features: ["comfyui", "refiners", "controlnet"],
      });
    },
    freebackendmemory: (_s, body) => {
      const which = typeof body.backend === "string" ? body.backend : "all";
      const targets = backends.filter((_, i) => which === "all" || which === String(i));
      if (targets.length === 0) return json({ result: false, count: 0 });
      if (opts.refuseWhileBusy && targets.some((b) => b.running > 0)) return json({ error: "Cannot free memory while a generation is running." });
      // Each ComfyUI backend is asked to /free; it unloads after its running job.
      if (!opts.releaseFreesNothing) for (const b of targets) void b.unload().catch(() => {});
      return json({ result: true, count: targets.length });
    },
    interruptall: (s, body) => {
      const all = body.other_sessions === true ? [...sessions.values()] : [s];
      for (const x of all) {
        x.interrupt.abort();
        x.interrupt = new AbortController();
      }
      return json({ success: true });
    },
    listbackends: (_s, body) => {
      const out: Record<string, unknown> = {};
      backends.forEach((_, i) => {
        out[String(i)] = backendToNet(i, body.full_data === true);
      });
      return json(out);
    },
    listmodels: () => json({ folders: [], files: [{ name: `${model}.safetensors`, title: model, loaded: backends.some((b) => b.place === "gpu") }] }),
  };

  /**
   * GenerateText2ImageWS (what SwarmUI's own page uses): the first text frame is the input; then
   * status frames, the image, and a normal close (API.cs).
   */
  async function generateWs(ws: ServerWebSocket<WsData>, text: string): Promise<void> {
    const body = jsonObject(text) ?? {};
    const sid = typeof body.session_id === "string" ? body.session_id : "";
    const s = sessions.get(sid);
    if (!s) {
      ws.send(JSON.stringify({ error: "Invalid session ID. You may need to refresh the page.", error_id: "invalid_session_id" }));
      ws.close(1000);
      return;
    }
    const status = () => ws.send(JSON.stringify({ status: { waiting_gens: s.waiting, loading_models: s.loading, waiting_backends: 0, live_gens: s.live } }));
    status();
    const res = await generate(s, body);
    const out = (await res.json()) as Record<string, unknown>;
    if (Array.isArray(out.images)) for (const image of out.images) ws.send(JSON.stringify({ image, batch_index: "0", metadata: "{}" }));
    else ws.send(JSON.stringify(out));
    status();
    ws.close(1000);
  }

  const server = Bun.serve<WsData>({
    hostname,
    port: opts.port ?? 0,
    idleTimeout: 0,
    websocket: {
      message(ws, message) {
        if (ws.data.started || typeof message !== "string") return;
        ws.data.started = true;
        void generateWs(ws, message).catch(() => ws.close(1011));
      },
    },
    async fetch(req, srv) {
      const url = new URL(req.url);
      const raw = await readBody(req);
      log.record(req, url, raw);
      const injected = await log.runOverrides(req, url, raw);
      if (injected) return injected;
      const lower = url.pathname.toLowerCase();
      if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
        if (lower !== "/api/generatetext2imagews") return err("bad_route", "Unknown API route");
        return srv.upgrade(req, { data: { started: false } }) ? undefined : err("basic_api", "upgrade failed");
      }
      if (lower.startsWith("/comfybackenddirect/") && req.method === "GET") return comfyDirect(req, url.pathname.slice("/comfybackenddirect/".length));
      if (!lower.startsWith("/api/")) return new Response("404 Not Found", { status: 404, headers: { "content-type": "text/html" } });
      if (req.method !== "POST") return new Response(null, { status: 302, headers: { location: "/Error/NoGetAPI" } });
      if (!(req.headers.get("content-type") ?? "").toLowerCase().startsWith("application/json")) return err("basic_api", "Wrong content type");
      if (raw.length === 0) return err("basic_api", "bad content length");
      const body = jsonObject(new TextDecoder().decode(raw));
      if (body === undefined) return err("internal_error", "An internal error occurred");
      const route = lower.slice("/api/".length);
      if (route === "getnewsession") {
        const id = randomBytes(20).toString("hex").toUpperCase();
        sessions.set(id, { id, waiting: 0, loading: 0, live: 0, interrupt: new AbortController() });
        return json({ session_id: id, user_id: "local", output_append_user: true, version: VERSION, server_id: serverId, permissions: ["*"] });
      }
      const sid = typeof body.session_id === "string" ? body.session_id : req.headers.get("x-session-id");
      if (sid === null || sid === undefined) return err("basic_api", "missing session id");
      const session = sessions.get(sid);
      if (!session) return json({ error: "Invalid session ID. You may need to refresh the page.", error_id: "invalid_session_id" }, 401);
      const handler = routes[route];
      if (!handler) return err("bad_route", "Unknown API route");
      return handler(session, body);
    },
    error: () => json({ error_id: "internal_error", error: "An internal error occurred" }, 400),
  });
  const port = server.port as number;
  let stopped: Promise<void> | undefined;
  return {
    url: baseUrl(hostname, port),
    port,
    gpu,
    calls: log.calls,
    backends,
    sessions: () => [...sessions.keys()],
    expireSessions: () => sessions.clear(),
    generations: () => generated,
    override: (m, p, h) => log.override(m, p, h),
    clearCalls: () => log.clear(),
    stop() {
      stopped ??= (async () => {
        timers.stopAll();
        await server.stop(true);
        for (const b of backends) b.drop();
      })();
      return stopped;
    },
  };
}
