/**
 * A simulated llama-swap (tenants.md, "llama-swap"): it starts a model's process on the first
 * request that names it and stops the others first (one model at a time, its default without
 * groups); `GET /running` lists the processes with their state; `POST /api/models/unload` stops
 * them all, `/api/models/unload/{model}` one, and `GET /unload` is the older form of the former.
 */
import { completionKind, json, type LlmEngine, openaiCompletion, openaiError, parseObject } from "./llm-engine.ts";
import { type LlmSim, type LlmSimOptions, type RouteCtx, serveLlmSim } from "./llm-server.ts";

export type LlamaSwapSim = LlmSim;

export function startLlamaSwapSim(opts: LlmSimOptions = {}): Promise<LlamaSwapSim> {
  return serveLlmSim("llama-swap", opts, (engine) => (ctx) => route(ctx, engine));
}

const text = (status: number, body: string): Response => new Response(body, { status, headers: { "Content-Type": "text/plain; charset=utf-8" } });

/** Releases `keys`; the lying modes answer for the whole call, as one process manager would. */
function unload(engine: LlmEngine, keys: string[]): Response {
  const outcomes = keys.map((k) => engine.release(k));
  if (outcomes.includes("busy")) return text(409, "model is busy with a request");
  return text(200, "OK");
}

async function route(ctx: RouteCtx, engine: LlmEngine): Promise<Response> {
  const { req, url } = ctx;
  const path = url.pathname;
  if (req.method === "GET" && path === "/health") return text(200, "OK");
  if (req.method === "GET" && path === "/running") {
    const running = [...engine.instances.values()].map((i) => ({
      model: i.key,
      state: i.state === "loading" ? "starting" : i.state === "loaded" ? "ready" : "stopping",
      cmd: `llama-server --port 5800 -m /models/${i.key}.gguf`,
      proxy: "http://127.0.0.1:5800",
      ttl: 0,
    }));
    return json(200, { running });
  }
  if (req.method === "GET" && path === "/v1/models") {
    return json(200, { object: "list", data: engine.models.map((m) => ({ id: m.id, object: "model", created: 1764000000, owned_by: "llama-swap" })) });
  }
  if ((req.method === "POST" && path === "/api/models/unload") || (req.method === "GET" && path === "/unload")) {
    return unload(engine, [...engine.instances.keys()]);
  }
  const one = /^\/api\/models\/unload\/(.+)$/.exec(path);
  if (req.method === "POST" && one) {
    const id = decodeURIComponent(one[1] as string);
    if (!engine.find(id)) return text(404, `model ${id} not found`);
    return unload(engine, engine.instances.has(id) ? [id] : []);
  }
  const kind = completionKind(path);
  if (kind && req.method === "POST") {
    const b = parseObject(ctx.body);
    if (!b) return openaiError(400, "invalid JSON body");
    const id = typeof b.model === "string" ? b.model : "";
    const model = engine.find(id);
    if (!model) return openaiError(404, `could not find suitable handler for ${id}`);
    let inst = engine.instances.get(id);
    if (!inst || inst.state === "unloading") {
      // Swap: every other process stops before this one starts.
      await Promise.all([...engine.instances.values()].filter((i) => i.key !== id).map((i) => engine.teardown(i)));
      if (inst) await inst.unloaded;
      inst = engine.load(id, model);
    }
    return openaiCompletion(engine, inst, kind, b, req.signal, id);
  }
  return text(404, "404 page not found");
}
