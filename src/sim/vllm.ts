/**
 * A simulated vLLM server with sleep mode (tenants.md, "vLLM sleep mode"): one engine serving one
 * model, loaded at start; `POST /sleep?level=1|2` gives the memory back and, by default, aborts
 * the requests in flight first; `POST /wake_up` loads it again; `GET /is_sleeping` says which;
 * `/metrics` carries `vllm:num_requests_running` and `vllm:num_requests_waiting`. A completion
 * while asleep is refused with 503 (older docs' ModelSleepingError). Started without sleep mode
 * (`sleepMode: false`, no `VLLM_SERVER_DEV_MODE=1 --enable-sleep-mode`), the routes are 404.
 */
import { completionKind, type Instance, json, type LlmEngine, openaiCompletion, openaiError, parseObject } from "./llm-engine.ts";
import { type LlmSim, type LlmSimOptions, type RouteCtx, serveLlmSim } from "./llm-server.ts";

export interface VllmSimOptions extends LlmSimOptions {
  /** `VLLM_SERVER_DEV_MODE=1 … --enable-sleep-mode` (default true). */
  sleepMode?: boolean;
}

export interface VllmSim extends LlmSim {
  sleeping(): boolean;
  /** Requests cut by a sleep so far. */
  aborted(): number;
}

export async function startVllmSim(opts: VllmSimOptions = {}): Promise<VllmSim> {
  const state = { sleepingLevel: 0, aborted: 0, waking: undefined as Promise<void> | undefined };
  const sleepMode = opts.sleepMode ?? true;
  const sim = await serveLlmSim("vllm", opts, (engine) => (ctx) => route(ctx, engine, state, sleepMode));
  const model = sim.engine.models[0];
  if (!model) throw new Error("vllm simulator: no model");
  sim.engine.load(model.id, model);
  return { ...sim, sleeping: () => state.sleepingLevel > 0, aborted: () => state.aborted };
}

interface VllmState {
  /** 0 awake, else the level of the last sleep. */
  sleepingLevel: number;
  aborted: number;
  waking: Promise<void> | undefined;
}

function current(engine: LlmEngine): Instance | undefined {
  return [...engine.instances.values()].find((i) => i.state !== "unloading");
}

function metrics(engine: LlmEngine): string {
  const model = engine.models[0]?.id ?? "";
  const inst = current(engine);
  const running = inst?.state === "loaded" ? inst.inflight : 0;
  const waiting = inst?.state === "loading" ? inst.inflight : 0;
  return [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    `vllm:num_requests_running{engine="0",model_name="${model}"} ${running.toFixed(1)}`,
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    `vllm:num_requests_waiting{engine="0",model_name="${model}"} ${waiting.toFixed(1)}`,
    "",
  ].join("\n");
}

async function route(ctx: RouteCtx, engine: LlmEngine, state: VllmState, sleepMode: boolean): Promise<Response> {
  const { req, url } = ctx;
  const path = url.pathname;
  const model = engine.models[0] as NonNullable<(typeof engine.models)[0]>;
  if (req.method === "GET" && path === "/health") return new Response(null, { status: 200 });
  if (req.method === "GET" && path === "/metrics") return new Response(metrics(engine), { headers: { "Content-Type": "text/plain; version=0.0.4" } });
  if (req.method === "GET" && path === "/v1/models") {
    return json(200, { object: "list", data: [{ id: model.id, object: "model", owned_by: "vllm", root: model.id, max_model_len: model.ctx ?? 8192 }] });
  }
  if (sleepMode && req.method === "GET" && path === "/is_sleeping") return json(200, { is_sleeping: state.sleepingLevel > 0 });
  if (sleepMode && req.method === "POST" && path === "/sleep") {
    const level = Number(url.searchParams.get("level") ?? "1");
    if (![0, 1, 2].includes(level)) return openaiError(400, `invalid sleep level ${level}`);
    const inst = current(engine);
    if (level === 0 || !inst) return new Response(null, { status: 200 });
    const inflight = inst.inflight;
    const outcome = engine.release(inst.key);
    if (outcome === "busy") return openaiError(409, "requests are running", "unavailable_error");
    if (outcome === "lied") return new Response(null, { status: 200 });
    // The default mode aborts every request in flight before the memory is released.
    state.aborted += inflight;
    await inst.unloaded;
    state.sleepingLevel = level;
    return new Response(null, { status: 200 });
  }
  if (sleepMode && req.method === "POST" && path === "/wake_up") {
    if (state.sleepingLevel === 0) return new Response(null, { status: 200 });
    state.waking ??= (async () => {
      await engine.load(model.id, model).loaded.catch(() => {});
      state.sleepingLevel = 0;
      state.waking = undefined;
    })();
    await state.waking;
    return new Response(null, { status: 200 });
  }
  if (sleepMode && req.method === "POST" && path === "/collective_rpc") return json(200, { results: [null] });
  const kind = completionKind(path);
  if (kind && req.method === "POST" && path.startsWith("/v1/")) {
    const b = parseObject(ctx.body);
    if (!b) return openaiError(400, "invalid JSON body");
    if (b.model !== model.id) return openaiError(404, `The model \`${String(b.model)}\` does not exist.`, "NotFoundError");
    const inst = current(engine);
    if (state.sleepingLevel > 0 || !inst) return openaiError(503, "The engine is sleeping (ModelSleepingError)", "ModelSleepingError");
    return openaiCompletion(engine, inst, kind, b, req.signal, model.id);
  }
  return json(404, { detail: "Not Found" });
}
