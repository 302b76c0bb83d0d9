/**
 * A simulated llama.cpp `llama-server` in router mode (tenants.md, "llama.cpp llama-server"):
 * `/models` with `status.value` in unloaded|loading|loaded|sleeping, `/models/load` and
 * `/models/unload` answering `{"success":true}`, autoload of any model a request names (on by
 * default, `?autoload=false` per request), and `--fit` (on by default), which loads a model that
 * does not fit into what is free by shrinking its context and holding only the free bytes.
 */
import { completionKind, type Instance, json, type LlmEngine, openaiCompletion, openaiError, parseObject } from "./llm-engine.ts";
import { type LlmSim, type LlmSimOptions, type RouteCtx, serveLlmSim } from "./llm-server.ts";

export interface LlamaServerSimOptions extends LlmSimOptions {
  /** `--models-autoload` (default true). */
  autoload?: boolean;
  /** `--fit on` (default true). Off, a model loads whole even when that oversubscribes the card. */
  fit?: boolean;
}

export type LlamaServerSim = LlmSim;

/** The value `/models` reports: memory is held until the model shows unloaded. */
function statusValue(inst: Instance | undefined): string {
  if (!inst) return "unloaded";
  return inst.state === "loading" ? "loading" : "loaded";
}

export function startLlamaServerSim(opts: LlamaServerSimOptions = {}): Promise<LlamaServerSim> {
  const autoloadDefault = opts.autoload ?? true;
  const fit = opts.fit ?? true;
  return serveLlmSim("llama-server", opts, (engine) => (ctx) => route(ctx, engine, autoloadDefault, fit));
}

function autoload(url: URL, byDefault: boolean): boolean {
  const q = url.searchParams.get("autoload");
  return q === null ? byDefault : q === "true";
}

async function route(ctx: RouteCtx, engine: LlmEngine, autoloadDefault: boolean, fit: boolean): Promise<Response> {
  const { req, url } = ctx;
  const path = url.pathname;
  const get = req.method === "GET";
  if (get && (path === "/health" || path === "/v1/health")) return json(200, { status: "ok" });
  if (get && (path === "/models" || path === "/v1/models")) {
    const data = engine.models.map((m) => {
      const inst = engine.instances.get(m.id);
      return {
        id: m.id,
        object: "model",
        owned_by: "llamacpp",
        created: 1764000000,
        path: `/models/${m.id}.gguf`,
        status: { value: statusValue(inst), args: ["llama-server", "--ctx-size", String(m.ctx ?? 8192), "--fit", fit ? "on" : "off"] },
      };
    });
    return json(200, { object: "list", data });
  }
  if (req.method === "POST" && (path === "/models/load" || path === "/models/unload")) {
    const b = parseObject(ctx.body);
    const id = typeof b?.model === "string" ? b.model : "";
    const model = engine.find(id);
    if (!model) return openaiError(400, `model '${id}' not found`);
    if (path === "/models/load") {
      engine.load(id, model, fit);
      return json(200, { success: true });
    }
    const outcome = engine.release(id);
    if (outcome === "unknown") return openaiError(400, `model '${id}' is not running`);
    if (outcome === "busy") return openaiError(409, `model '${id}' is processing a request`, "unavailable_error");
    return json(200, { success: true });
  }
  if (get && (path === "/props" || path === "/slots")) {
    const id = url.searchParams.get("model");
    if (id === null) {
      return path === "/props" ? json(200, { role: "router", build_info: "b7300-sim" }) : openaiError(400, "model is required");
    }
    const inst = await instanceFor(engine, id, autoload(url, autoloadDefault), fit);
    if (inst instanceof Response) return inst;
    if (path === "/slots") return json(200, [{ id: 0, n_ctx: inst.ctx, is_processing: inst.inflight > 0 }]);
    return json(200, {
      default_generation_settings: { n_ctx: inst.ctx },
      total_slots: 1,
      model_alias: id,
      model_path: `/models/${id}.gguf`,
      is_sleeping: false,
    });
  }
  const kind = completionKind(path);
  if (kind && req.method === "POST") {
    const b = parseObject(ctx.body);
    if (!b) return openaiError(400, "invalid JSON body");
    const id = typeof b.model === "string" ? b.model : "";
    const inst = await instanceFor(engine, id, autoload(url, autoloadDefault), fit);
    if (inst instanceof Response) return inst;
    return openaiCompletion(engine, inst, kind, b, req.signal, id);
  }
  return openaiError(404, "File Not Found");
}

/** The instance a routed request goes to; autoload loads it when it is not running. */
async function instanceFor(engine: LlmEngine, id: string, autoload: boolean, fit: boolean): Promise<Instance | Response> {
  const model = engine.find(id);
  if (!model) return openaiError(400, `model '${id}' not found`);
  let inst = engine.instances.get(id);
  if (inst?.state === "unloading") {
    await inst.unloaded;
    inst = undefined;
  }
  if (inst) return inst;
  if (!autoload) return openaiError(400, `model '${id}' is not loaded`);
  return engine.load(id, model, fit);
}
