/**
 * A simulated llama.cpp `llama-server` in router mode (tenants.md, "llama.cpp llama-server"):
 * `/models` with `status.value` in unloaded|loading|loaded|sleeping, `/models/load` and
 * `/models/unload` answering `{"success":true}`, autoload of any model a request names (on by
 * default, `?autoload=false` per request), and `--fit` (on by default), which loads a model that
 * does not fit into what is free by shrinking its context and holding only the free bytes. With
 * `sleepIdleMs` (`--sleep-idle-seconds`) an idle model gives its memory back and shows `sleeping`.
 */
import { completionKind, type Instance, json, type LlmEngine, openaiCompletion, openaiError, parseObject } from "./llm-engine.ts";
import { type LlmSim, type LlmSimOptions, type RouteCtx, serveLlmSim } from "./llm-server.ts";

export interface LlamaServerSimOptions extends LlmSimOptions {
  /** `--models-autoload` (default true). */
  autoload?: boolean;
  /** `--fit on` (default true). Off, a model loads whole even when that oversubscribes the card. */
  fit?: boolean;
  /**
   * `--sleep-idle-seconds`, in ms (default: off): a model idle this long gives its memory back and
   * shows `sleeping`; the next request that names it loads it again.
   */
  sleepIdleMs?: number;
}

export type LlamaServerSim = LlmSim;

/** Models put to sleep by `--sleep-idle-seconds` (their memory is back). */
type Sleeping = Set<string>;

/** The value `/models` reports: memory is held until the model shows unloaded (or sleeping). */
function statusValue(inst: Instance | undefined, asleep: boolean): string {
  if (!inst) return asleep ? "sleeping" : "unloaded";
  return inst.state === "loading" ? "loading" : "loaded";
}

export function startLlamaServerSim(opts: LlamaServerSimOptions = {}): Promise<LlamaServerSim> {
  const autoloadDefault = opts.autoload ?? true;
  const fit = opts.fit ?? true;
  const sleeping: Sleeping = new Set();
  return serveLlmSim("llama-server", opts, (engine) => {
    const idleMs = opts.sleepIdleMs;
    if (idleMs !== undefined) {
      engine.onIdle = (inst) =>
        engine.timers.after(idleMs, () => {
          if (inst.state !== "loaded" || inst.inflight > 0 || engine.instances.get(inst.key) !== inst) return;
          void engine.teardown(inst).then(() => sleeping.add(inst.key));
        });
    }
    return (ctx) => route(ctx, engine, autoloadDefault, fit, sleeping);
  });
}

function autoload(url: URL, byDefault: boolean): boolean {
  const q = url.searchParams.get("autoload");
  return q === null ? byDefault : q === "true";
}

async function route(ctx: RouteCtx, engine: LlmEngine, autoloadDefault: boolean, fit: boolean, sleeping: Sleeping): Promise<Response> {
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
        status: { value: statusValue(inst, sleeping.has(m.id)), args: ["llama-server", "--ctx-size", String(m.ctx ?? 8192), "--fit", fit ? "on" : "off"] },
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
      sleeping.delete(id);
      engine.load(id, model, fit);
      return json(200, { success: true });
    }
    const outcome = engine.release(id);
    if (outcome === "unknown") return openaiError(400, `model '${id}' is not running`);
    sleeping.delete(id);
    if (outcome === "busy") return openaiError(409, `model '${id}' is processing a request`, "unavailable_error");
    return json(200, { success: true });
  }
  if (get && (path === "/props" || path === "/slots")) {
    const id = url.searchParams.get("model");
    if (id === null) {
      return path === "/props" ? json(200, { role: "router", build_info: "b7300-sim" }) : openaiError(400, "model is required");
    }
    // /props and /slots do not wake a sleeping model (tenants.md).
    if (sleeping.has(id) && !engine.instances.has(id)) return openaiError(503, `model '${id}' is sleeping`, "unavailable_error");
    const inst = await instanceFor(engine, id, autoload(url, autoloadDefault), fit, sleeping);
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
    const inst = await instanceFor(engine, id, autoload(url, autoloadDefault) || sleeping.has(id), fit, sleeping);
    if (inst instanceof Response) return inst;
    return openaiCompletion(engine, inst, kind, b, req.signal, id);
  }
  return openaiError(404, "File Not Found");
}

/** The instance a routed request goes to; autoload loads it when it is not running. */
async function instanceFor(engine: LlmEngine, id: string, autoload: boolean, fit: boolean, sleeping: Sleeping): Promise<Instance | Response> {
  const model = engine.find(id);
  if (!model) return openaiError(400, `model '${id}' not found`);
  let inst = engine.instances.get(id);
  if (inst?.state === "unloading") {
    await inst.unloaded;
    inst = undefined;
  }
  if (inst) return inst;
  if (!autoload) return openaiError(400, `model '${id}' is not loaded`);
  sleeping.delete(id);
  return engine.load(id, model, fit);
}
