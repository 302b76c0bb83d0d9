/**
 * What the simulated llama-server, llama-swap, LM Studio and vLLM share: model instances that
 * load and unload on the simulated GPU (recorded on the LLM side of its ledger, so any overlap
 * with an image tenant fails a test), requests in flight, an OpenAI-compatible answer streamed as
 * SSE, and the two lying modes every tenant can be put in: a release answered with success that
 * frees nothing, and a release refused while requests are in flight.
 */
import type { Hold, SimGpu, Tenant } from "./gpu.ts";
import { countTokens, tokenAt } from "./ollama-models.ts";
import { AbortedError, type Timers } from "./timers.ts";

/** The ledger side every LLM simulator records on (the GPU ledger calls the LLM side "ollama"). */
export const LLM_SIDE: Tenant = "ollama";

export interface LlmModelSpec {
  /** Model id as the server names it (e.g. "qwen2.5-7b-instruct-q4_k_m", "google/gemma-3-1b"). */
  id: string;
  /** VRAM while fully loaded. */
  vramBytes: number;
  /** Context the model is configured to load with (default 8192). */
  ctx?: number;
}

export const DEFAULT_LLM_MODELS: LlmModelSpec[] = [
  { id: "qwen2.5-7b-instruct", vramBytes: 6_188_000_000, ctx: 32_768 },
  { id: "llama-3.2-3b-instruct", vramBytes: 3_735_225_344, ctx: 8192 },
];

/** How a simulator lies about releasing (tenants.md: "a 200 from a release call proves nothing"). */
export interface LyingModes {
  /** A release is answered with success and frees nothing: the model stays loaded. */
  releaseFreesNothing?: boolean;
  /** A release while a request is in flight is refused (an error status) and frees nothing. */
  refuseWhileBusy?: boolean;
}

export interface LlmEngineTiming {
  loadMs: number;
  unloadMs: number;
  tokenDelayMs: number;
  tokens: number;
}

export type InstanceState = "loading" | "loaded" | "unloading";

export interface Instance {
  /** Instance id (LM Studio's `google/gemma-3-1b:2`; the model id elsewhere). */
  readonly key: string;
  readonly model: LlmModelSpec;
  state: InstanceState;
  /** Context the instance actually runs with (less than the model's when squeezed to fit). */
  readonly ctx: number;
  readonly hold: Hold;
  inflight: number;
  readonly loaded: Promise<void>;
  unloaded?: Promise<void>;
  /** Aborted when the instance is torn down (vLLM's sleep aborts requests in flight). */
  readonly life: AbortController;
}

export type ReleaseOutcome = "released" | "lied" | "busy" | "unknown";

export class LlmEngine {
  readonly instances = new Map<string, Instance>();
  loadCount = 0;
  /** Told when an instance is loaded and has no request in flight (llama-server's idle sleep). */
  onIdle: ((inst: Instance) => void) | undefined;

  constructor(
    readonly server: string,
    readonly gpu: SimGpu,
    readonly timers: Timers,
    readonly timing: LlmEngineTiming,
    readonly models: LlmModelSpec[],
    readonly lying: LyingModes,
  ) {}

  find(id: string): LlmModelSpec | undefined {
    return this.models.find((m) => m.id === id);
  }

  /** Requests in flight on every instance. */
  inflight(): number {
    let n = 0;
    for (const i of this.instances.values()) n += i.inflight;
    return n;
  }

  /**
   * Starts loading `model` as instance `key` (memory is held from the first moment). With `fit`,
   * a model that does not fit in what is free loads anyway, smaller: its context shrinks in
   * proportion and only the free bytes are held (llama-server's `--fit`, on by default).
   */
  load(key: string, model: LlmModelSpec, fit = false): Instance {
    const existing = this.instances.get(key);
    if (existing && existing.state !== "unloading") return existing;
    const free = Math.max(0, this.gpu.vramTotal - this.gpu.vramUsed());
    const bytes = fit ? Math.min(model.vramBytes, free) : model.vramBytes;
    const wantCtx = model.ctx ?? 8192;
    const ctx = bytes < model.vramBytes ? Math.max(512, Math.floor((wantCtx * bytes) / model.vramBytes / 256) * 256) : wantCtx;
    const detail = `${this.server}:${key}`;
    const hold = this.gpu.acquire(LLM_SIDE, detail, bytes);
    this.gpu.note("load-start", LLM_SIDE, detail);
    this.loadCount++;
    const inst: Instance = {
      key,
      model,
      state: "loading",
      ctx,
      hold,
      inflight: 0,
      life: new AbortController(),
      loaded: this.timers.sleep(this.timing.loadMs).then(() => {
        if (inst.state === "loading") inst.state = "loaded";
        this.gpu.note("loaded", LLM_SIDE, detail);
        if (inst.inflight === 0) this.onIdle?.(inst);
      }),
    };
    inst.loaded.catch(() => {}); // rejected only when the simulator stops or the load is cancelled
    this.instances.set(key, inst);
    return inst;
  }

  /**
   * A release call as the server sees it. The lying modes answer here: "lied" is a success reply
   * that changed nothing, "busy" a refusal. Otherwise the instance leaves the listing and gives
   * its memory back `unloadMs` later (in the same instant, so a listing without it means free).
   */
  release(key: string): ReleaseOutcome {
    const inst = this.instances.get(key);
    if (!inst) return "unknown";
    if (this.lying.refuseWhileBusy && inst.inflight > 0) return "busy";
    if (this.lying.releaseFreesNothing) return "lied";
    this.teardown(inst);
    return "released";
  }

  /** Ends an instance now (requests in flight are aborted), freeing its memory after unloadMs. */
  teardown(inst: Instance): Promise<void> {
    if (inst.state === "unloading") return inst.unloaded ?? Promise.resolve();
    inst.state = "unloading";
    inst.life.abort();
    const detail = `${this.server}:${inst.key}`;
    this.gpu.note("unload-start", LLM_SIDE, detail);
    inst.unloaded = this.timers.sleep(this.timing.unloadMs).then(
      () => {
        if (this.instances.get(inst.key) === inst) this.instances.delete(inst.key);
        this.gpu.release(inst.hold);
        this.gpu.note("unloaded", LLM_SIDE, detail);
      },
      () => {},
    );
    return inst.unloaded;
  }

  /** Takes `inst` for one request, waiting for its load; counted in flight until `done`. */
  async use(inst: Instance, signal: AbortSignal): Promise<{ signal: AbortSignal; done: () => void }> {
    inst.inflight++;
    let finished = false;
    const done = (): void => {
      if (finished) return;
      finished = true;
      inst.inflight--;
      if (inst.inflight === 0 && inst.state === "loaded") this.onIdle?.(inst);
    };
    const both = AbortSignal.any([signal, inst.life.signal]);
    try {
      await raceAbort(inst.loaded, both);
    } catch (e) {
      done();
      throw e;
    }
    return { signal: both, done };
  }

  /** Generates the fixed answer token by token; throws AbortedError when `signal` aborts. */
  async answer(signal: AbortSignal, onToken: (t: string) => void): Promise<string> {
    let text = "";
    for (let i = 0; i < this.timing.tokens; i++) {
      await this.timers.sleep(this.timing.tokenDelayMs, signal);
      const t = tokenAt(i);
      text += t;
      onToken(t);
    }
    await this.timers.sleep(this.timing.tokenDelayMs, signal);
    return text;
  }

  /** Forgets everything and gives the memory back, as a killed server would. */
  shutdown(): void {
    for (const i of this.instances.values()) {
      i.life.abort();
      this.gpu.release(i.hold);
    }
    this.instances.clear();
  }
}

export function raceAbort(p: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(new AbortedError());
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(new AbortedError());
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

// ---------------------------------------------------------------- OpenAI wire (shared by all four)

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json; charset=utf-8", ...headers } });
}

export function openaiError(status: number, message: string, type = status === 404 ? "not_found_error" : "invalid_request_error"): Response {
  return json(status, { error: { code: status, message, type } });
}

/** The request body as a JSON object, or undefined (the caller answers 400). */
export function parseObject(body: Uint8Array): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(new TextDecoder().decode(body));
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

export type CompletionKind = "chat" | "completion";

/**
 * Answers one OpenAI completion on `inst`: whole, or as SSE chunks in the shape the servers share
 * (role in the first delta, a finish chunk, `data: [DONE]`). A stream cut by a torn-down instance
 * (vLLM's sleep) simply ends without [DONE], as a dropped connection would look to the client.
 */
export async function openaiCompletion(
  engine: LlmEngine,
  inst: Instance,
  kind: CompletionKind,
  req: Record<string, unknown>,
  reqSignal: AbortSignal,
  modelName = inst.key,
): Promise<Response> {
  let lease: { signal: AbortSignal; done: () => void };
  try {
    lease = await engine.use(inst, reqSignal);
  } catch {
    return openaiError(503, "model unloaded while the request waited", "unavailable_error");
  }
  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${Math.random().toString(36).slice(2, 10)}`;
  const created = Math.floor(engine.gpu.now() / 1000);
  const prompt = Array.isArray(req.messages)
    ? (req.messages as unknown[]).map((m) => (m && typeof m === "object" ? String((m as Record<string, unknown>).content ?? "") : "")).join("\n")
    : String(req.prompt ?? "");
  const usage = (n: number): Record<string, number> => {
    const p = countTokens(prompt) + 10;
    return { prompt_tokens: p, completion_tokens: n, total_tokens: p + n };
  };
  if (req.stream !== true) {
    try {
      const text = await engine.answer(lease.signal, () => {});
      const choice =
        kind === "chat"
          ? { index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }
          : { index: 0, text, finish_reason: "stop" };
      return json(200, {
        id,
        object: kind === "chat" ? "chat.completion" : "text_completion",
        created,
        model: modelName,
        choices: [choice],
        usage: usage(engine.timing.tokens),
      });
    } catch {
      return openaiError(500, "request aborted", "server_error");
    } finally {
      lease.done();
    }
  }
  const enc = new TextEncoder();
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      const write = (data: unknown): void => controller.enqueue(enc.encode(`data: ${JSON.stringify(data)}\n\n`));
      const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
      const chunk = (choice: Record<string, unknown>): unknown => ({ id, object, created, model: modelName, choices: [choice] });
      let first = true;
      try {
        await engine.answer(lease.signal, (t) => {
          const delta = first ? { role: "assistant", content: t } : { content: t };
          first = false;
          write(chunk(kind === "chat" ? { index: 0, delta, finish_reason: null } : { index: 0, text: t, finish_reason: null }));
        });
        write(chunk(kind === "chat" ? { index: 0, delta: {}, finish_reason: "stop" } : { index: 0, text: "", finish_reason: "stop" }));
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
      } catch {
        // the client left, the instance was torn down, or the simulator stopped
      } finally {
        lease.done();
        try {
          controller.close();
        } catch {
          // already cancelled by the client
        }
      }
    },
    cancel() {
      lease.done();
    },
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" } });
}

/** Is this path one of the OpenAI completion routes, and which kind. */
export function completionKind(path: string): CompletionKind | undefined {
  if (path === "/v1/chat/completions" || path === "/chat/completions") return "chat";
  if (path === "/v1/completions" || path === "/completions" || path === "/completion") return "completion";
  return undefined;
}
