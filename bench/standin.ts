/**
 * Stand-in upstreams for when src/sim is not usable: just enough of Ollama and ComfyUI for the
 * benchmark's scenarios, on the wire as the real servers answer (see ../shared/api): model list,
 * NDJSON chat streams stamped with `created_at`, asynchronous unload visible in /api/ps,
 * /prompt → /history → /free → /system_stats, and an 8 MiB /view. Every call is recorded with
 * its arrival time on the shared clock (lib/clock.ts), like the simulators' `calls[].at`.
 */
import { now } from "./lib/clock.ts";

export interface StandinCall {
  method: string;
  path: string;
  at: number;
}

export interface Standin {
  readonly url: string;
  readonly port: number;
  readonly calls: StandinCall[];
  clearCalls(): void;
  stop(): Promise<void>;
}

export interface OllamaStandinOptions {
  loadMs?: number;
  unloadMs?: number;
  tokenDelayMs?: number;
  tokens?: number;
}

const MODELS = [
  { name: "llama3.2:latest", size: 2019393189, family: "llama", parameter_size: "3.2B", quantization_level: "Q4_K_M" },
  { name: "qwen2.5:7b", size: 4683087332, family: "qwen2", parameter_size: "7.6B", quantization_level: "Q4_K_M" },
  { name: "nomic-embed-text:latest", size: 274302450, family: "nomic-bert", parameter_size: "137M", quantization_level: "F16" },
];

const WORDS = ["The", " sky", " appears", " blue", " because", " of", " Rayleigh", " scattering", "."];

/** RFC3339Nano in UTC, as Go writes `created_at`. */
export function goTime(epochMs: number): string {
  const whole = Math.floor(epochMs);
  const iso = new Date(whole).toISOString(); // …ss.mmmZ
  const nanos = String(Math.round((epochMs - whole) * 1e6)).padStart(6, "0");
  return `${iso.slice(0, -1)}${nanos}Z`;
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json; charset=utf-8" } });
}

export function startOllamaStandin(opts: OllamaStandinOptions = {}): Standin {
  const loadMs = opts.loadMs ?? 20;
  const unloadMs = opts.unloadMs ?? 50;
  const tokenDelayMs = opts.tokenDelayMs ?? 15;
  const tokens = opts.tokens ?? 9;
  const calls: StandinCall[] = [];
  /** model → state; a model being unloaded is still listed, as Ollama does. */
  const loaded = new Map<string, { ready: Promise<void>; unloading: boolean }>();
  const sleep = (ms: number) => (ms > 0 ? Bun.sleep(ms) : Promise.resolve());

  const ensureLoaded = async (model: string) => {
    const cur = loaded.get(model);
    if (cur && !cur.unloading) return cur.ready;
    const entry = { ready: sleep(loadMs), unloading: false };
    loaded.set(model, entry);
    return entry.ready;
  };

  const tags = json(200, {
    models: MODELS.map((m) => ({
      name: m.name,
      model: m.name,
      modified_at: "2025-08-01T10:00:00.000000000Z",
      size: m.size,
      digest: "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
      details: { parent_model: "", format: "gguf", family: m.family, families: [m.family], parameter_size: m.parameter_size, quantization_level: m.quantization_level },
    })),
  });
  const tagsBody = tags.body ? Bun.readableStreamToText(tags.body) : Promise.resolve("");

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      calls.push({ method: req.method, path: url.pathname, at: now() });
      const p = url.pathname;
      if (p === "/api/tags") return new Response(await tagsBody, { headers: { "content-type": "application/json; charset=utf-8" } });
      if (p === "/api/version") return json(200, { version: "0.32.15" });
      if (p === "/api/ps") {
        return json(200, {
          models: [...loaded.keys()].map((name) => ({ name, model: name, size: 1e9, size_vram: 1e9, expires_at: goTime(now() + 3e5) })),
        });
      }
      if (req.method === "POST" && (p === "/api/chat" || p === "/api/generate")) {
        const body = (await req.json()) as Record<string, unknown>;
        const model = String(body.model ?? "");
        const empty = p === "/api/chat" ? !Array.isArray(body.messages) || body.messages.length === 0 : !body.prompt;
        const shape = (content: string, done: boolean) =>
          p === "/api/chat"
            ? { model, created_at: goTime(now()), message: { role: "assistant", content }, done }
            : { model, created_at: goTime(now()), response: content, done };
        if (empty && body.keep_alive === 0) {
          const entry = loaded.get(model);
          if (entry && !entry.unloading) {
            entry.unloading = true;
            setTimeout(() => {
              if (loaded.get(model) === entry) loaded.delete(model);
            }, unloadMs);
          }
          return json(200, { ...shape("", true), done_reason: "unload" });
        }
        await ensureLoaded(model);
        const opt = body.options as Record<string, unknown> | undefined;
        const n = Math.min(tokens, typeof opt?.num_predict === "number" ? opt.num_predict : Infinity);
        if (body.stream === false) {
          await sleep(tokenDelayMs * (n + 1));
          return json(200, { ...shape(WORDS.slice(0, n).join(""), true), done_reason: "stop" });
        }
        const signal = req.signal;
        const enc = new TextEncoder();
        return new Response(
          new ReadableStream<Uint8Array>({
            async start(c) {
              try {
                for (let i = 0; i < n; i++) {
                  await sleep(tokenDelayMs);
                  if (signal.aborted) return;
                  c.enqueue(enc.encode(`${JSON.stringify(shape(WORDS[i % WORDS.length]!, false))}\n`));
                }
                await sleep(tokenDelayMs);
                if (signal.aborted) return;
                c.enqueue(enc.encode(`${JSON.stringify({ ...shape("", true), done_reason: "stop", eval_count: n + 1 })}\n`));
                c.close();
              } catch {
                // client went away
              }
            },
          }),
          { headers: { "content-type": "application/x-ndjson" } },
        );
      }
      return json(404, { error: "not found" });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    calls,
    clearCalls: () => void (calls.length = 0),
    stop: async () => void server.stop(true),
  };
}

export interface ComfyStandinOptions {
  /** How long a queued prompt runs (default 50). */
  jobMs?: number;
  /** Time between /free and the memory showing as released in /system_stats (default 30). */
  freeMs?: number;
  /** Size of /view?filename=big.png (default 8 MiB). */
  viewBytes?: number;
}

export function startComfyStandin(opts: ComfyStandinOptions = {}): Standin {
  const jobMs = opts.jobMs ?? 50;
  const freeMs = opts.freeMs ?? 30;
  const big = new Uint8Array(opts.viewBytes ?? 8 * 1024 * 1024);
  for (let i = 0; i < big.length; i += 4096) big[i] = i & 0xff;
  const calls: StandinCall[] = [];
  const history = new Map<string, boolean>();
  let torch = 0;
  let seq = 0;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      calls.push({ method: req.method, path: url.pathname, at: now() });
      const p = url.pathname.startsWith("/api/") ? url.pathname.slice(4) : url.pathname;
      if (req.method === "POST" && p === "/prompt") {
        await req.arrayBuffer();
        const id = crypto.randomUUID();
        history.set(id, false);
        torch = 6 * 1024 ** 3;
        setTimeout(() => history.set(id, true), jobMs);
        return json(200, { prompt_id: id, number: seq++, node_errors: {} });
      }
      if (p.startsWith("/history/")) {
        const id = decodeURIComponent(p.slice("/history/".length));
        if (!history.get(id)) return json(200, {});
        return json(200, { [id]: { prompt: [0, id, {}, {}, ["9"]], outputs: {}, status: { status_str: "success", completed: true, messages: [] }, meta: {} } });
      }
      if (req.method === "POST" && p === "/free") {
        await req.arrayBuffer();
        setTimeout(() => (torch = 0), freeMs);
        return new Response(null, { status: 200 });
      }
      if (p === "/system_stats") {
        return json(200, {
          system: { os: "posix", comfyui_version: "0.3.64" },
          devices: [{ name: "cuda:0 stand-in", type: "cuda", index: 0, vram_total: 25386352640, vram_free: 25386352640 - torch, torch_vram_total: torch, torch_vram_free: 0 }],
        });
      }
      if (p === "/view") return new Response(big, { headers: { "content-type": "image/png" } });
      return json(404, { error: "not found" });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    calls,
    clearCalls: () => void (calls.length = 0),
    stop: async () => void server.stop(true),
  };
}
