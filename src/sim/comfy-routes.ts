/**
 * The simulated ComfyUI's HTTP routes (server.py's PromptServer routes, v0.3.64 behaviour) and
 * aiohttp's response conventions: Python json.dumps bodies, empty `web.Response()` replies with
 * aiohttp's default content type, and a 500 whenever `request.json()` fails.
 */
import { randomUUID } from "node:crypto";
import { cancelJob, cancelJobs, getJob, listJobs } from "./comfy-jobs.ts";
import { CHECKPOINTS, objectInfo, validatePrompt } from "./comfy-nodes.ts";
import type { FileStore, FileType } from "./comfy-files.ts";
import type { ComfyWorker } from "./comfy-worker.ts";
import type { SimGpu } from "./gpu.ts";
import { dumpsPy, isDict, parsePy, PyFloat, type PyDict, type PyLike, type PyValue, pyNumber, pyStr } from "./pyjson.ts";

// ---------------------------------------------------------------- aiohttp responses

export const JSON_CT = "application/json; charset=utf-8";

export function json(body: PyLike, status = 200): Response {
  return new Response(dumpsPy(body), { status, headers: { "Content-Type": JSON_CT } });
}

/** `web.Response(status=...)`: empty body, aiohttp's default content type. */
export function empty(status = 200): Response {
  return new Response("", { status, headers: { "Content-Type": "application/octet-stream" } });
}

export function text(status: number, body: string, contentType = "text/plain; charset=utf-8"): Response {
  return new Response(body, { status, headers: { "Content-Type": contentType } });
}

/** What aiohttp answers when a handler raises (e.g. request.json() on a malformed body). */
export function serverError(): Response {
  return text(500, "500 Internal Server Error\n\nServer got itself in trouble");
}

export class HandlerError extends Error {}

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

export interface Ctx {
  req: Request;
  url: URL;
  body: Uint8Array<ArrayBuffer>;
  params: string[];
}

export type Handler = (ctx: Ctx) => Response | Promise<Response>;

export interface RouteDeps {
  gpu: SimGpu;
  worker: ComfyWorker;
  files: FileStore;
  /** For /system_stats' argv. */
  hostname: string;
  port: () => number;
  /** v0.3.64: any string is a prompt_id, no jobs API. Otherwise today's ComfyUI (S3). */
  legacy: boolean;
  /** Started with `--enable-cors-header` (shown in /system_stats argv). */
  cors?: boolean;
  /** The torch device /system_stats lists (default cuda). */
  device?: SimDevice;
}

/**
 * ComfyUI's torch device. On `cpu` (`--cpu`) and `mps` (Apple Silicon) every memory field is the
 * machine's RAM, and it never drops after /free (api-facts R1).
 */
export type SimDevice = "cuda" | "cpu" | "mps";
/** The RAM a `cpu`/`mps` ComfyUI reports, as seen against the real server (R1). */
const SYSTEM_RAM = { total: 25_276_157_952, free: 23_143_354_368 };
const sharedDevice = (type: string) => ({
  name: type,
  type,
  index: null,
  vram_total: SYSTEM_RAM.total,
  vram_free: SYSTEM_RAM.free,
  torch_vram_total: SYSTEM_RAM.total,
  torch_vram_free: SYSTEM_RAM.free,
});

export interface Route {
  methods: Record<string, Handler>;
  params: string[];
}

/** The route table as a lookup function; every path also answers under /api. */
export function comfyRoutes({ gpu, worker, files, hostname, port, legacy, cors, device = "cuda" }: RouteDeps): (path: string) => Route | undefined {
  // The server's prompt counter: it advances for every POST /prompt without a `number`.
  let promptNumber = 0;

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
    if (!legacy && givenId !== undefined && !CANONICAL_UUID.test(promptId)) return invalidPromptId(promptId);
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
    worker.requestFree(unload, free);
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
    const cudaDevice = {
      name: "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
      type: "cuda",
      index: 0,
      vram_total: gpu.vramTotal,
      vram_free: vramFree,
      torch_vram_total: torch.total,
      torch_vram_free: torch.free,
    };
    return json({
      system: {
        os: "posix",
        ram_total: 134_986_240_000,
        ram_free: 118_325_981_184 - (torch.total > 0 ? 5_421_404_160 : 0),
        comfyui_version: legacy ? "0.3.64" : "0.26.0",
        required_frontend_version: "1.27.10",
        installed_templates_version: "0.1.95",
        required_templates_version: "0.1.95",
        python_version: "3.12.3 (main, Jun 18 2025, 17:59:45) [GCC 13.3.0]",
        pytorch_version: "2.8.0+cu128",
        embedded_python: false,
        argv: ["main.py", "--listen", hostname, "--port", String(port()), ...(cors ? ["--enable-cors-header", "*"] : [])],
      },
      devices: [device === "cuda" ? cudaDevice : sharedDevice(device)],
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

  const reply = ({ status, body }: { status: number; body: PyLike }): Response => json(body, status);
  const JOB_ROUTES: [RegExp, Record<string, Handler>][] = [
    [/^\/api\/jobs$/, { GET: ({ url }) => reply(listJobs(worker, url.searchParams)) }],
    [/^\/api\/jobs\/cancel$/, { POST: ({ body }) => reply(cancelJobs(worker, body)) }],
    [/^\/api\/jobs\/([^/]+)$/, { GET: ({ params }) => reply(getJob(worker, params[0] as string)) }],
    [/^\/api\/jobs\/([^/]+)\/cancel$/, { POST: ({ params }) => reply(cancelJob(worker, params[0] as string)) }],
  ];

  function route(path: string): Route | undefined {
    // The jobs routes exist only as /api/jobs… (C8), and only in versions that have them.
    const job = !legacy && path.startsWith("/api/jobs") ? match(JOB_ROUTES, path) : undefined;
    // add_routes registers every route a second time under /api.
    return job ?? match(ROUTES, path.startsWith("/api/") ? path.slice(4) : path);
  }

  return route;
}

function match(table: readonly [RegExp, Record<string, Handler>][], path: string): Route | undefined {
  for (const [re, methods] of table) {
    const m = re.exec(path);
    if (m) return { methods, params: m.slice(1).map((s) => decodeURIComponent(s)) };
  }
  return undefined;
}

export const FEATURES = { supports_preview_metadata: true, max_upload_size: new PyFloat(104_857_600) };

/** What today's ComfyUI accepts as a client-chosen prompt_id (#13998): a canonical lowercase UUID. */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function invalidPromptId(id: string): Response {
  const message = "Invalid prompt_id";
  const error = { type: "invalid_prompt_id", message, details: `prompt_id must be a canonical UUID, got ${JSON.stringify(id.slice(0, 100))}`, extra_info: {} };
  return json({ error, node_errors: {} }, 400);
}

function noPrompt(): Response {
  const error = { type: "no_prompt", message: "No prompt provided", details: "No prompt provided", extra_info: {} };
  return json({ error, node_errors: {} }, 400);
}

export function methodNotAllowed(allow: string): Response {
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

