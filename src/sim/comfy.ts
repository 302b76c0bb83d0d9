/**
 * A simulated ComfyUI server on loopback: the fake behind the end-to-end tests and the image
 * tenant of the `demo` command. Routes, status codes and bodies follow ../shared/api (C1–C8,
 * v0.3.64 shapes), every route also answers under `/api`, and bodies are Python json.dumps text.
 */
import { randomUUID } from "node:crypto";
import type { ServerWebSocket } from "bun";
import { CHECKPOINTS, objectInfo, validatePrompt } from "./comfy-nodes.ts";
import { type FileType, FileStore } from "./comfy-files.ts";
import { SocketHub, type WsData } from "./comfy-ws.ts";
import { ComfyWorker, type JobInfo } from "./comfy-worker.ts";
import { SimGpu } from "./gpu.ts";
import { CallLog, isLoopbackHostname, type OverrideHandler, type RecordedCall, readBody } from "./http.ts";
import { dumpsPy, isDict, parsePy, PyFloat, type PyDict, type PyLike, type PyValue, pyNumber, pyStr } from "./pyjson.ts";
import { Timers } from "./timers.ts";

export interface ComfySimOptions {
  /** Shared GPU; the simulator makes its own when absent. */
  gpu?: SimGpu;
  /** Run time of one job (default 300; `extra_data.sim_job_ms` overrides per prompt). */
  jobMs?: number;
  /** VRAM the checkpoint occupies from a job's start until /free (default 2.5 GiB). */
  modelBytes?: number;
  /** Time between the worker acting on /free and the memory being back (default 100). */
  freeDelayMs?: number;
  /** /history never shows jobs: a ComfyUI that restarted and forgot them. */
  forgetJobs?: boolean;
  /** Jobs for which this returns true end with execution_error (also `extra_data.sim_fail`). */
  failJobs?: (promptId: string) => boolean;
  /** 403 when Host is loopback and Origin names another host (default true; C7). */
  checkOrigin?: boolean;
  /** Echo every websocket frame a client sends, unchanged (for relay tests). */
  wsEcho?: boolean;
  /** Size of each generated output image (default 64 KiB). */
  outputBytes?: number;
  /** When > 0, each sampler step also sends a binary PREVIEW_IMAGE frame of this many bytes. */
  previewBytes?: number;
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
  /** Open websocket clients. */
  sockets(): number;
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  stop(): Promise<void>;
}

// ---------------------------------------------------------------- aiohttp responses

const JSON_CT = "application/json; charset=utf-8";

function json(body: PyLike, status = 200): Response {
  return new Response(dumpsPy(body), { status, headers: { "Content-Type": JSON_CT } });
}

/** `web.Response(status=...)`: empty body, aiohttp's default content type. */
function empty(status = 200): Response {
  return new Response("", { status, headers: { "Content-Type": "application/octet-stream" } });
}

function text(status: number, body: string, contentType = "text/plain; charset=utf-8"): Response {
  return new Response(body, { status, headers: { "Content-Type": contentType } });
}

/** What aiohttp answers when a handler raises (e.g. request.json() on a malformed body). */
function serverError(): Response {
  return text(500, "500 Internal Server Error\n\nServer got itself in trouble");
}

class HandlerError extends Error {}

/** `await request.json()`: any decoding problem escapes the handler as a 500. */
function requestJson(body: Uint8Array): PyValue {
  try {
    return parsePy(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch {
    throw new HandlerError("bad json");
  }
}

function requestDict(body: Uint8Array): PyDict {
  const v = requestJson(body);
  if (!isDict(v)) throw new HandlerError("not a dict"); // json_data.get(...) on a non-dict raises
  return v;
}

// ---------------------------------------------------------------- server

interface Ctx {
  req: Request;
  url: URL;
  body: Uint8Array<ArrayBuffer>;
  params: string[];
}

type Handler = (ctx: Ctx) => Response | Promise<Response>;

export async function startComfySim(opts: ComfySimOptions = {}): Promise<ComfySim> {
  const gpu = opts.gpu ?? new SimGpu();
  const timers = new Timers();
  const log = new CallLog();
  const hub = new SocketHub();
  const files = new FileStore(opts.outputBytes ?? 64 * 1024);
  const worker = new ComfyWorker(gpu, timers, hub, files, {
    jobMs: opts.jobMs ?? 300,
    modelBytes: opts.modelBytes ?? 2_684_354_560,
    freeDelayMs: opts.freeDelayMs ?? 100,
    forgetJobs: opts.forgetJobs ?? false,
    outputBytes: opts.outputBytes ?? 64 * 1024,
    previewBytes: opts.previewBytes ?? 0,
    fail: opts.failJobs,
  });
  const hostname = opts.hostname ?? "127.0.0.1";
  const checkOrigin = opts.checkOrigin ?? true;
  const wsEcho = opts.wsEcho ?? false;
  let promptNumber = 0;
  let port = 0;

  // ------------------------------------------------------------ handlers

  const postPrompt: Handler = ({ body }) => {
    const data = requestJson(body);
    if (!isDict(data)) {
      if (Array.isArray(data)) {
        promptNumber++;
        return noPrompt();
      }
      throw new HandlerError("not a dict");
    }
    let number: number | PyFloat;
    const given = data.get("number");
    if (given !== undefined) {
      const n = pyNumber(given) ?? (typeof given === "string" ? Number(given) : NaN);
      if (Number.isNaN(n) && !(given instanceof PyFloat)) throw new HandlerError("float()");
      number = new PyFloat(n);
    } else {
      number = promptNumber;
      const front = data.get("front");
      if (front !== undefined && front !== null && front !== false && front !== 0 && front !== "") number = -number;
      promptNumber++;
    }
    if (!data.has("prompt")) return noPrompt();
    const prompt = data.get("prompt");
    if (!isDict(prompt)) throw new HandlerError("prompt is not a dict");
    const givenId = data.get("prompt_id");
    const promptId = givenId === undefined ? randomUUID() : pyStr(givenId);
    const targets = data.get("partial_execution_targets");
    const partial = Array.isArray(targets) ? targets.filter((t): t is string => typeof t === "string") : undefined;
    const valid = validatePrompt(prompt, partial);
    let extraData: PyDict = new Map();
    if (data.has("extra_data")) {
      const e = data.get("extra_data");
      if (!isDict(e)) throw new HandlerError("extra_data is not a dict");
      extraData = e;
    }
    if (data.has("client_id")) extraData.set("client_id", data.get("client_id") ?? null);
    if (!valid.ok) return json({ error: valid.error, node_errors: {} }, 400);
    worker.enqueue(number, promptId, prompt, extraData, valid.outputs);
    return json({ prompt_id: promptId, number, node_errors: {} });
  };

  const historyOne: Handler = ({ params }) => {
    const id = params[0] as string;
    const entry = worker.history.get(id);
    return json(entry ? new Map([[id, entry]]) : {});
  };

  const historyAll: Handler = ({ url }) => {
    const maxRaw = url.searchParams.get("max_items");
    const max = maxRaw === null ? undefined : Number.parseInt(maxRaw, 10);
    let offset = Number.parseInt(url.searchParams.get("offset") ?? "-1", 10);
    const entries = [...worker.history.entries()];
    if (offset < 0 && max !== undefined) offset = entries.length - max;
    const out = new Map<string, PyLike>();
    for (const [i, [k, v]] of entries.entries()) {
      if (i < offset) continue;
      out.set(k, v);
      if (max !== undefined && out.size >= max) break;
    }
    return json(out);
  };

  const postHistory: Handler = ({ body }) => {
    const data = requestDict(body);
    if (data.has("clear") && data.get("clear")) worker.history.clear();
    const del = data.get("delete");
    if (Array.isArray(del)) for (const id of del) if (typeof id === "string") worker.history.delete(id);
    return empty();
  };

  const getQueue: Handler = () => {
    const [running, pending] = worker.queueItems();
    return json({ queue_running: running, queue_pending: pending });
  };

  const postQueue: Handler = ({ body }) => {
    const data = requestDict(body);
    if (data.has("clear") && data.get("clear")) worker.clearPending();
    const del = data.get("delete");
    if (Array.isArray(del)) worker.deletePending(del.filter((x): x is string => typeof x === "string"));
    return empty();
  };

  const postFree: Handler = ({ body }) => {
    const data = requestDict(body); // a body is required: request.json() is unconditional
    const unload = data.get("unload_models") ?? false;
    const free = data.get("free_memory") ?? false;
    if (unload) worker.setFlag("unload_models", unload);
    if (free) worker.setFlag("free_memory", free);
    return empty();
  };

  const postInterrupt: Handler = ({ body }) => {
    let data: PyValue = new Map();
    try {
      data = requestJson(body);
    } catch {
      // the body is optional here: a JSONDecodeError means "interrupt whatever runs"
    }
    const id = isDict(data) ? data.get("prompt_id") : undefined;
    if (typeof id === "string" && id !== "") worker.interrupt(id);
    else worker.interrupt();
    return empty();
  };

  const systemStats: Handler = () => {
    const torch = worker.torchMemory();
    // The CUDA context and the desktop use some memory that belongs to neither tenant.
    const baseline = 1_441_775_616;
    const vramFree = Math.max(0, gpu.vramTotal - gpu.vramUsed() - baseline + torch.free);
    return json({
      system: {
        os: "posix",
        ram_total: 134_986_240_000,
        ram_free: 118_325_981_184 - (torch.total > 0 ? 5_421_404_160 : 0),
        comfyui_version: "0.3.64",
        required_frontend_version: "1.27.10",
        installed_templates_version: "0.1.95",
        required_templates_version: "0.1.95",
        python_version: "3.12.3 (main, Jun 18 2025, 17:59:45) [GCC 13.3.0]",
        pytorch_version: "2.8.0+cu128",
        embedded_python: false,
        argv: ["main.py", "--listen", hostname, "--port", String(port)],
      },
      devices: [
        {
          name: "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
          type: "cuda",
          index: 0,
          vram_total: gpu.vramTotal,
          vram_free: vramFree,
          torch_vram_total: torch.total,
          torch_vram_free: torch.free,
        },
      ],
    });
  };

  const view: Handler = ({ url }) => {
    const q = url.searchParams;
    const filename = q.get("filename");
    if (filename === null) return empty(404);
    if (filename.startsWith("/") || filename.includes("..")) return empty(400);
    const type = (q.get("type") ?? "output") as FileType;
    if (!["output", "input", "temp"].includes(type)) return empty(400);
    const subfolder = q.get("subfolder") ?? "";
    if (subfolder.includes("..") || subfolder.startsWith("/")) return empty(403);
    const bytes = files.get(type, subfolder, filename);
    if (!bytes) return empty(404);
    return new Response(bytes, {
      headers: { "Content-Type": mimeOf(filename), "Content-Disposition": `filename="${filename}"` },
    });
  };

  const upload: Handler = async ({ req, body }) => {
    let form: FormData;
    try {
      form = await new Request(req.url, { method: "POST", headers: req.headers, body }).formData();
    } catch {
      throw new HandlerError("not multipart");
    }
    const image = form.get("image");
    if (!(image instanceof File) || image.name === "") return empty(400);
    const typeField = form.get("type");
    const type: FileType = typeField === "temp" || typeField === "output" ? typeField : "input";
    const subfolderField = form.get("subfolder");
    const subfolder = typeof subfolderField === "string" ? subfolderField : "";
    if (subfolder.includes("..") || subfolder.startsWith("/")) return empty(400);
    const bytes = new Uint8Array(await image.arrayBuffer());
    const overwrite = form.get("overwrite");
    let name = image.name;
    if (overwrite !== "true" && overwrite !== "1") {
      const dot = name.lastIndexOf(".");
      const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
      for (let i = 1; files.has(type, subfolder, name); i++) {
        if (sameBytes(files.get(type, subfolder, name), bytes)) break; // same content: reuse the name
        name = `${stem} (${i})${ext}`;
      }
    }
    files.put(type, subfolder, name, bytes);
    return json({ name, subfolder, type });
  };

  const ROUTES: [RegExp, Record<string, Handler>][] = [
    [/^\/$/, { GET: () => text(200, "<!DOCTYPE html><html><head><title>ComfyUI</title></head><body></body></html>", "text/html") }],
    [/^\/prompt$/, { GET: () => json({ exec_info: { queue_remaining: worker.queueRemaining() } }), POST: postPrompt }],
    [/^\/history$/, { GET: historyAll, POST: postHistory }],
    [/^\/history\/([^/]+)$/, { GET: historyOne }],
    [/^\/queue$/, { GET: getQueue, POST: postQueue }],
    [/^\/free$/, { POST: postFree }],
    [/^\/interrupt$/, { POST: postInterrupt }],
    [/^\/system_stats$/, { GET: systemStats }],
    [/^\/view$/, { GET: view }],
    [/^\/upload\/(?:image|mask)$/, { POST: upload }],
    [/^\/object_info$/, { GET: () => json(objectInfo()) }],
    [/^\/object_info\/([^/]+)$/, { GET: ({ params }) => json(objectInfo(params[0])) }],
    [/^\/features$/, { GET: () => json(FEATURES) }],
    [/^\/embeddings$/, { GET: () => json([]) }],
    [/^\/extensions$/, { GET: () => json([]) }],
    [/^\/models$/, { GET: () => json(["checkpoints", "loras", "vae", "upscale_models", "embeddings"]) }],
    [/^\/models\/([^/]+)$/, { GET: ({ params }) => (params[0] === "checkpoints" ? json(CHECKPOINTS) : params[0] === "loras" || params[0] === "vae" ? json([]) : empty(404)) }],
  ];

  function route(path: string): { methods: Record<string, Handler>; params: string[] } | undefined {
    // add_routes registers every route a second time under /api.
    const p = path.startsWith("/api/") ? path.slice(4) : path;
    for (const [re, methods] of ROUTES) {
      const m = re.exec(p);
      if (m) return { methods, params: m.slice(1).map((s) => decodeURIComponent(s)) };
    }
    return undefined;
  }

  /** create_origin_only_middleware: a browser on another site must not reach a loopback ComfyUI. */
  function originRejected(req: Request): boolean {
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

  async function handle(req: Request, server: Bun.Server<WsData>): Promise<Response | undefined> {
    const url = new URL(req.url);
    const isUpgrade = req.headers.get("upgrade")?.toLowerCase() === "websocket";
    const body = isUpgrade ? new Uint8Array(0) : await readBody(req);
    log.record(req, url, body);
    const injected = await log.runOverrides(req, url, body);
    if (injected) return injected;
    if (originRejected(req)) return empty(403);
    if (req.method === "OPTIONS") return empty(200);

    if (url.pathname === "/ws" || url.pathname === "/api/ws") {
      if (req.method !== "GET" && req.method !== "HEAD") return methodNotAllowed("GET, HEAD");
      const sid = url.searchParams.get("clientId") || randomUUID().replace(/-/g, "");
      if (server.upgrade(req, { data: { sid, first: true } })) return undefined;
      return text(400, 'No WebSocket UPGRADE hdr: None\n Can "Upgrade" only to "WebSocket".');
    }

    const r = route(url.pathname);
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
    port: opts.port ?? 0,
    idleTimeout: 0,
    fetch: handle,
    error: () => serverError(),
    websocket: {
      idleTimeout: 0,
      sendPings: false, // aiohttp's WebSocketResponse sends no heartbeat by default
      maxPayloadLength: 64 * 1024 * 1024,
      open(ws: ServerWebSocket<WsData>) {
        hub.add(ws);
        ws.send(dumpsPy({ type: "status", data: { status: { exec_info: { queue_remaining: worker.queueRemaining() } }, sid: ws.data.sid } }));
        const node = worker.runningNodeFor(ws.data.sid);
        if (node !== undefined) ws.send(dumpsPy({ type: "executing", data: { node } }));
      },
      message(ws: ServerWebSocket<WsData>, message: string | Buffer) {
        if (wsEcho) {
          ws.send(message);
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
      close(ws: ServerWebSocket<WsData>) {
        hub.remove(ws);
      },
    },
  });
  port = server.port as number;
  const urlHost = hostname.includes(":") && !hostname.startsWith("[") ? `[${hostname}]` : hostname;

  let stopped: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${port}`,
    port,
    gpu,
    calls: log.calls,
    jobs: () => worker.jobs(),
    runningJob: () => worker.running(),
    sockets: () => hub.size,
    override: (method, path, handler) => log.override(method, path, handler),
    clearCalls: () => log.clear(),
    stop() {
      stopped ??= (async () => {
        timers.stopAll();
        hub.closeAll();
        await server.stop(true);
        await worker.shutdown();
      })();
      return stopped;
    },
  };
}

const FEATURES = { supports_preview_metadata: true, max_upload_size: new PyFloat(104_857_600) };

function noPrompt(): Response {
  const error = { type: "no_prompt", message: "No prompt provided", details: "No prompt provided", extra_info: {} };
  return json({ error, node_errors: {} }, 400);
}

function methodNotAllowed(allow: string): Response {
  return new Response("405: Method Not Allowed", { status: 405, headers: { "Content-Type": "text/plain; charset=utf-8", Allow: allow } });
}

function mimeOf(name: string): string {
  const ext = name.slice(name.lastIndexOf(".") + 1).toLowerCase();
  return { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", webp: "image/webp", gif: "image/gif" }[ext] ?? "application/octet-stream";
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array): boolean {
  if (!a || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
