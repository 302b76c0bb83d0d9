/**
 * A simulated Ollama server on loopback: the fake behind the end-to-end tests and the tenant the
 * `demo` command drives. Routes, status codes and bodies follow ../shared/api (O1–O8); models
 * load and unload on a simulated GPU that records when Ollama holds memory.
 */
import { hostname as osHostname, networkInterfaces } from "node:os";
import { SimGpu } from "./gpu.ts";
import { baseUrl, CallLog, loopbackOnly, type OverrideHandler, type RecordedCall, readBody, routedPath } from "./http.ts";
import { OllamaCore } from "./ollama-core.ts";
import { DEFAULT_MODELS, type ModelSpec, resolveModels } from "./ollama-models.ts";
import * as native from "./ollama-native.ts";
import * as openai from "./ollama-openai.ts";
import { jsonRes, textRes } from "./ollama-wire.ts";
import { inflateRequest, webFetch, webSearch } from "./ollama-cloud.ts";
import { Timers } from "./timers.ts";

export interface OllamaSimOptions {
  /** Shared GPU; the simulator makes its own when absent. */
  gpu?: SimGpu;
  /** Model catalog (default: llama3.2:latest, qwen2.5:7b, nomic-embed-text:latest). */
  models?: ModelSpec[];
  /** Time to load a model before the first token (default 200). */
  loadMs?: number;
  /** Time between the unload reply and the model leaving /api/ps and the GPU (default 100). */
  unloadMs?: number;
  /** Delay before each streamed token (default 15). */
  tokenDelayMs?: number;
  /** Tokens per answer (default 9: "The sky appears blue because of Rayleigh scattering."). */
  tokens?: number;
  /** OLLAMA_KEEP_ALIVE (default 5 minutes). */
  defaultKeepAliveMs?: number;
  /**
   * Behave like Ollama before v0.3.11: `keep_alive:0` on /api/generate or /api/chat is checked
   * for the completion capability first, so an embedding-only model answers 400 and can only be
   * unloaded through /api/embed (default false).
   */
  legacyUnload?: boolean;
  /** Reject Host headers Ollama would reject with 403 (default true; O5). */
  checkHost?: boolean;
  /** Reject cross-origin requests from origins outside Ollama's default OLLAMA_ORIGINS (default true). */
  checkOrigin?: boolean;
  /** Reported by /api/version (default "0.32.15"). */
  version?: string;
  /** Keep `calls` (default true); benchmarks turn it off. */
  recordCalls?: boolean;
  /** Listen address; loopback only (default 127.0.0.1). */
  hostname?: string;
  /** Listen port (default 0: any free port). */
  port?: number;
}

export interface OllamaSim {
  /** Base URL without trailing slash, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  readonly port: number;
  readonly gpu: SimGpu;
  readonly calls: RecordedCall[];
  /** Names of models listed by /api/ps (loading, loaded or still unloading). */
  loadedModels(): string[];
  /** Inference requests holding or waiting for a model. */
  inflight(): number;
  /** Failure injection; see OverrideHandler. Returns a remover. */
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  /** Closes every connection, cancels every timer and frees the GPU memory it held. */
  stop(): Promise<void>;
}

type Handler = (ctx: native.Ctx) => Response | Promise<Response>;

const notImplemented: Handler = () => jsonRes(500, { error: "not implemented by the simulator" });

/** Route table of server/routes.go: path → method → handler. */
const ROUTES: Record<string, Record<string, Handler>> = {
  "/": { GET: () => textRes(200, "Ollama is running", "text/plain; charset=utf-8"), HEAD: () => textRes(200, "Ollama is running", "text/plain; charset=utf-8") },
  "/api/version": { GET: (c) => jsonRes(200, { version: c.core.version }), HEAD: (c) => jsonRes(200, { version: c.core.version }) },
  "/api/status": { GET: () => jsonRes(200, { status: "ok" }) },
  "/api/tags": { GET: native.tags, HEAD: native.tags },
  "/api/ps": { GET: native.ps },
  "/api/generate": { POST: (c) => native.inference(c, "generate") },
  "/api/chat": { POST: (c) => native.inference(c, "chat") },
  "/api/embed": { POST: native.embed },
  "/api/embeddings": { POST: native.embeddings },
  "/api/show": { POST: native.show },
  "/api/pull": { POST: native.pull },
  "/api/push": { POST: notImplemented },
  "/api/create": { POST: notImplemented },
  "/api/copy": { POST: native.copy },
  "/api/delete": { DELETE: native.remove },
  "/api/me": { POST: notImplemented },
  "/api/signout": { POST: notImplemented },
  "/api/experimental/web_search": { POST: (c) => webSearch(c.body) },
  "/api/experimental/web_fetch": { POST: (c) => webFetch(c.body) },
  "/api/experimental/model-recommendations": { GET: notImplemented },
  "/v1/chat/completions": { POST: (c) => openai.completions(c, "chat") },
  "/v1/completions": { POST: (c) => openai.completions(c, "completion") },
  "/v1/embeddings": { POST: openai.embeddings },
  "/v1/models": { GET: openai.models },
  "/v1/responses": { POST: openai.responses },
  "/v1/audio/transcriptions": { POST: notImplemented },
  "/v1/messages": { POST: notImplemented },
};

function route(path: string): Record<string, Handler> | undefined {
  const exact = ROUTES[path];
  if (exact) return exact;
  const model = /^\/v1\/models\/([^/]+)$/.exec(path);
  if (model) {
    const name = decodeURIComponent(model[1] as string);
    return { GET: (c) => openai.model(c, name) };
  }
  if (/^\/api\/blobs\/[^/]+$/.test(path)) return { POST: notImplemented, HEAD: notImplemented };
  return undefined;
}

// ---------------------------------------------------------------- middleware (O5)

function isPrivateOrLocalIp(ip: string): boolean {
  const v4 = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    if (a === 127 || a === 10 || ip === "0.0.0.0") return true;
    if (a === 172 && b >= 16 && b <= 31) return true;
    if (a === 192 && b === 168) return true;
  } else if (ip.includes(":")) {
    const l = ip.toLowerCase();
    if (l === "::1" || l === "::" || /^f[cd]/.test(l)) return true;
  } else {
    return false;
  }
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.address === ip) return true;
  }
  return false;
}

function isIp(h: string): boolean {
  return /^\d+\.\d+\.\d+\.\d+$/.test(h) || (h.includes(":") && /^[0-9a-fA-F:.]+$/.test(h));
}

/** allowedHostsMiddleware: which Host headers a loopback-bound Ollama accepts. */
export function ollamaHostAllowed(hostHeader: string): boolean {
  // net.SplitHostPort, falling back to the whole value when there is no port.
  let host = hostHeader;
  const bracketed = /^\[([^\]]*)\]:\d*$/.exec(hostHeader);
  const plain = /^([^:]*):\d*$/.exec(hostHeader);
  if (bracketed) host = bracketed[1] as string;
  else if (plain) host = plain[1] as string;
  if (isIp(host) && isPrivateOrLocalIp(host)) return true;
  const h = host.toLowerCase();
  if (h === "" || h === "localhost" || h === osHostname().toLowerCase()) return true;
  return [".localhost", ".local", ".internal"].some((tld) => h.endsWith(tld));
}

const DEFAULT_ORIGINS = [
  "app://*",
  "file://*",
  "tauri://*",
  "vscode-webview://*",
  "vscode-file://*",
  ...["localhost", "127.0.0.1", "0.0.0.0"].flatMap((o) => [`http://${o}`, `https://${o}`, `http://${o}:*`, `https://${o}:*`]),
];

function originAllowed(origin: string): boolean {
  return DEFAULT_ORIGINS.some((p) => (p.endsWith("*") ? origin.startsWith(p.slice(0, -1)) : origin === p));
}

// ---------------------------------------------------------------- server

export async function startOllamaSim(opts: OllamaSimOptions = {}): Promise<OllamaSim> {
  const hostname = loopbackOnly(opts.hostname);
  const gpu = opts.gpu ?? new SimGpu();
  const timers = new Timers();
  const log = new CallLog(opts.recordCalls ?? true);
  const core = new OllamaCore(
    gpu,
    timers,
    {
      loadMs: opts.loadMs ?? 200,
      unloadMs: opts.unloadMs ?? 100,
      tokenDelayMs: opts.tokenDelayMs ?? 15,
      tokens: opts.tokens ?? 9,
      defaultKeepAliveMs: opts.defaultKeepAliveMs ?? 5 * 60_000,
      legacyUnload: opts.legacyUnload ?? false,
    },
    resolveModels(opts.models ?? DEFAULT_MODELS, gpu.now()),
    opts.version ?? "0.32.15",
  );
  // Ollama applies the Host allow-list only when it listens on loopback, which the simulator always does.
  const checkHost = opts.checkHost ?? true;
  const checkOrigin = opts.checkOrigin ?? true;

  async function handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const body = await readBody(req);
    log.record(req, url, body);
    const injected = await log.runOverrides(req, url, body);
    if (injected) return injected;

    // gin-contrib/cors runs first: a cross-origin request from an unknown origin is refused.
    const origin = req.headers.get("origin");
    const host = req.headers.get("host") ?? "";
    const cors: Record<string, string> = {};
    if (origin && origin !== `http://${host}` && origin !== `https://${host}`) {
      if (checkOrigin && !originAllowed(origin)) return new Response(null, { status: 403 });
      cors["Access-Control-Allow-Origin"] = origin;
      if (req.method === "OPTIONS") return new Response(null, { status: 204, headers: cors });
    }
    if (checkHost && !ollamaHostAllowed(host)) return new Response(null, { status: 403 });

    const path = routedPath(url.pathname);
    if (path === undefined) return textRes(400, "400 Bad Request");
    const methods = route(path);
    if (!methods) return textRes(404, "404 page not found");
    const handler = methods[req.method];
    if (!handler) return textRes(405, "405 method not allowed");
    const inflated = inflateRequest(path, req.headers.get("content-encoding"), body);
    if (inflated instanceof Response) return inflated;
    const res = await handler({ req, url, body: inflated, core });
    for (const [k, v] of Object.entries(cors)) res.headers.set(k, v);
    return res;
  }

  const server = Bun.serve({
    hostname,
    port: opts.port ?? 0,
    idleTimeout: 0, // streams may wait for model loads longer than Bun's 10 s default
    fetch: handle,
    error: (err) => jsonRes(500, { error: String(err) }),
  });
  const port = server.port as number;

  let stopped: Promise<void> | undefined;
  return {
    url: baseUrl(hostname, port),
    port,
    gpu,
    calls: log.calls,
    loadedModels: () => core.sched.list().map((r) => r.model.name),
    inflight: () => core.inflight(),
    override: (method, path, handler) => log.override(method, path, handler),
    clearCalls: () => log.clear(),
    stop() {
      stopped ??= (async () => {
        timers.stopAll();
        await server.stop(true);
        core.sched.shutdown();
      })();
      return stopped;
    },
  };
}
