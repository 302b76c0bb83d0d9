/**
 * A simulated LM Studio server, REST v1 (tenants.md, "LM Studio"): `/api/v1/models` lists each
 * model with its `loaded_instances`; a model may be loaded more than once, the instances named
 * `key`, `key:2`, `key:3`…; `/api/v1/models/unload {"instance_id"}` unloads one instance, so the
 * base key unloads the first only; `Authorization: Bearer` when a token is set; a completion for a
 * model that is not loaded loads it (JIT loading).
 */
import { completionKind, type Instance, json, type LlmEngine, openaiCompletion, parseObject } from "./llm-engine.ts";
import { type LlmSim, type LlmSimOptions, type RouteCtx, serveLlmSim } from "./llm-server.ts";

export interface LmStudioSimOptions extends LlmSimOptions {
  /** Require `Authorization: Bearer <token>` on every API route (default: none required). */
  token?: string;
  /** JIT loading of a model a completion names (default true). */
  jit?: boolean;
}

export type LmStudioSim = LlmSim;

export function startLmStudioSim(opts: LmStudioSimOptions = {}): Promise<LmStudioSim> {
  return serveLlmSim("lmstudio", opts, (engine) => (ctx) => route(ctx, engine, opts.token, opts.jit ?? true));
}

function lmError(status: number, message: string, type = "invalid_request"): Response {
  return json(status, { error: { message, type } });
}

function instancesOf(engine: LlmEngine, key: string): Instance[] {
  return [...engine.instances.values()].filter((i) => i.model.id === key);
}

/** `key` for the first instance, then `key:2`, `key:3`… (the first free one). */
function nextInstanceId(engine: LlmEngine, key: string): string {
  if (!engine.instances.has(key)) return key;
  for (let n = 2; ; n++) if (!engine.instances.has(`${key}:${n}`)) return `${key}:${n}`;
}

async function route(ctx: RouteCtx, engine: LlmEngine, token: string | undefined, jit: boolean): Promise<Response> {
  const { req, url } = ctx;
  const path = url.pathname;
  if (token !== undefined && (path.startsWith("/api/") || path.startsWith("/v1/"))) {
    if (req.headers.get("authorization") !== `Bearer ${token}`) return lmError(401, "Invalid or missing API token", "authentication_error");
  }
  if (req.method === "GET" && path === "/api/v1/models") {
    const models = engine.models.map((m) => ({
      type: "llm",
      key: m.id,
      display_name: m.id,
      size_bytes: Math.round(m.vramBytes * 0.7),
      loaded_instances: instancesOf(engine, m.id).map((i) => ({ id: i.key, config: { context_length: i.ctx } })),
    }));
    return json(200, { models });
  }
  if (req.method === "GET" && path === "/api/v0/models") {
    const data = engine.models.map((m) => ({ id: m.id, object: "model", type: "llm", state: instancesOf(engine, m.id).length > 0 ? "loaded" : "not-loaded" }));
    return json(200, { object: "list", data });
  }
  if (req.method === "POST" && path === "/api/v1/models/load") {
    const b = parseObject(ctx.body);
    const key = typeof b?.model === "string" ? b.model : "";
    const model = engine.find(key);
    if (!model) return lmError(404, `Model '${key}' not found`);
    const t0 = engine.gpu.now();
    const inst = engine.load(nextInstanceId(engine, key), model);
    await inst.loaded.catch(() => {});
    return json(200, { type: "llm", instance_id: inst.key, load_time_seconds: (engine.gpu.now() - t0) / 1000, status: "loaded" });
  }
  if (req.method === "POST" && path === "/api/v1/models/unload") {
    const b = parseObject(ctx.body);
    const id = typeof b?.instance_id === "string" ? b.instance_id : "";
    const outcome = engine.release(id);
    if (outcome === "unknown") return lmError(404, `No loaded model instance with id '${id}'`);
    if (outcome === "busy") return lmError(409, `Instance '${id}' is processing a request`);
    return json(200, { instance_id: id });
  }
  if (req.method === "GET" && path === "/v1/models") {
    return json(200, { object: "list", data: engine.models.map((m) => ({ id: m.id, object: "model", owned_by: "organization_owner" })) });
  }
  const kind = completionKind(path);
  if (kind && req.method === "POST" && path.startsWith("/v1/")) {
    const b = parseObject(ctx.body);
    if (!b) return lmError(400, "Invalid JSON body");
    const name = typeof b.model === "string" ? b.model : "";
    let inst = engine.instances.get(name);
    if (!inst || inst.state === "unloading") {
      const model = engine.find(name);
      if (!model) return lmError(404, `Model '${name}' not found`);
      inst = instancesOf(engine, name).find((i) => i.state !== "unloading");
      if (!inst) {
        if (!jit) return lmError(400, `Model '${name}' is not loaded`);
        inst = engine.load(nextInstanceId(engine, name), model);
      }
    }
    return openaiCompletion(engine, inst, kind, b, req.signal, name);
  }
  return lmError(404, `Unexpected endpoint or method. (${req.method} ${path})`);
}
