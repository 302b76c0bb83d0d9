/**
 * The few calls the turnstile makes to Ollama itself: what is loaded, unload a model, and load one
 * back (emptying Ollama for an image job is unload.ts). Ollama answers an unload at once and frees
 * the model afterwards (api-facts O6), so "unloaded" is only ever decided by /api/ps being empty.
 */
import { callJson, isRecord, parseJson, UpstreamHttpError } from "../upstream/http.ts";
import { ModelMemory } from "./model-memory.ts";
import { abilitiesOf, type OllamaAbilities } from "./gpu-free.ts";

/** One model as /api/ps lists it. */
export interface LoadedModel {
  name: string;
  /** Bytes the model takes in all (VRAM and system memory). */
  size: number;
  /** Bytes of it in VRAM: less than `size` when part of it sits on the CPU. */
  sizeVram: number;
}

export type UnloadVia = "generate" | "embed";

export class OllamaClient {
  /** What may be loaded: every good /api/ps answer and every warm-up here, LLM requests from the proxy. */
  readonly memory = new ModelMemory();
  /** What the Ollama last seen by /api/version does without a GPU (none until it answered). */
  abilities: OllamaAbilities = abilitiesOf(undefined);
  /** Shown every good /api/ps answer's `models` as Ollama sent them (the status page's resident models). */
  onPs: ((models: unknown[]) => void) | undefined;
  /**
   * OLLAMA_URL names this machine, so a refused connection proves no Ollama runs to hold memory
   * (unload.ts moves on at once). Set by the wiring; false: a refusal proves nothing.
   */
  refusalMeansGone = false;

  constructor(
    readonly base: URL,
    private readonly callTimeoutMs: number,
  ) {}

  async version(timeoutMs = this.callTimeoutMs): Promise<string> {
    const { status, text } = await callJson(this.base, "/api/version", { timeoutMs });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /api/version");
    const v = parseJson(text);
    const version = isRecord(v) && typeof v.version === "string" ? v.version : "unknown";
    this.abilities = abilitiesOf(version);
    return version;
  }

  async ps(signal?: AbortSignal, timeoutMs = this.callTimeoutMs): Promise<LoadedModel[]> {
    const raw = await this.look(timeoutMs, signal);
    const models = raw.filter(isRecord).map((m) => ({
      name: String(m.name ?? m.model ?? ""),
      size: typeof m.size === "number" ? m.size : 0,
      sizeVram: typeof m.size_vram === "number" ? m.size_vram : 0,
    }));
    this.memory.listed(models.map((m) => m.name));
    return models;
  }

  /**
   * /api/ps for the status page only: `onPs` hears it, the model memory does not. Read while chats
   * run, an answer can be older than a chat that has just loaded its model, and the memory must not
   * forget that model on its word (the blind unload relies on it).
   */
  async look(timeoutMs = this.callTimeoutMs, signal?: AbortSignal): Promise<unknown[]> {
    const { status, text } = await callJson(this.base, "/api/ps", { timeoutMs, signal });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /api/ps");
    const body = parseJson(text);
    if (!isRecord(body) || !Array.isArray(body.models)) throw new UpstreamHttpError(status, text, "GET /api/ps answered without a models list");
    try {
      this.onPs?.(body.models);
    } catch {
      // A listener's failure (the status page's) must not fail an unload's /api/ps read.
    }
    return body.models;
  }

  /**
   * Ask Ollama to unload `model`. `keep_alive:0` on /api/generate works for every model since
   * Ollama 0.3.11; older versions refuse it for embedding-only models, which /api/embed with
   * `keep_alive:0` unloads instead (it loads the model if needed, then drops it).
   */
  async unload(model: string, signal?: AbortSignal): Promise<UnloadVia> {
    const gen = await callJson(this.base, "/api/generate", {
      timeoutMs: this.callTimeoutMs,
      signal,
      body: { model, keep_alive: 0 },
    });
    if (gen.status >= 200 && gen.status < 300) return "generate";
    const emb = await callJson(this.base, "/api/embed", {
      timeoutMs: this.callTimeoutMs,
      signal,
      body: { model, input: "x", keep_alive: 0 },
    });
    if (emb.status >= 200 && emb.status < 300) return "embed";
    throw new UpstreamHttpError(emb.status, emb.text, `unload ${model}`);
  }

  /** Load `model` and keep it resident (`keep_alive:-1`), so the next chat skips the load time. */
  async warm(model: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    this.memory.routed(model);
    const { status, text } = await callJson(this.base, "/api/generate", {
      timeoutMs,
      signal,
      body: { model, prompt: "", keep_alive: -1 },
    });
    if (status < 200 || status >= 300) throw new UpstreamHttpError(status, text, `warm ${model}`);
  }
}
