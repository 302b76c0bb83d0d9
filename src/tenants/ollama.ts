/**
 * Ollama as an LLM-side tenant. Its hand-over is ollama/unload.ts's `emptyOllama` (keep_alive:0
 * to each model, /api/ps polled until empty, blind when /api/ps cannot be read), unchanged; the
 * client stays reachable (`client`) for what only Ollama has: the model memory, partial-offload
 * checks, cloud models, WARM_MODEL.
 */
import { OllamaClient } from "../ollama/client.ts";
import { emptyOllama } from "../ollama/unload.ts";
import { UpstreamHttpError } from "../upstream/http.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, Released, Resident, TenantContext, TenantDriver, WorkClass, HandOverBound } from "./types.ts";

/** POST routes of Ollama that run inference (load a model onto the GPU). */
export const OLLAMA_LLM_PATHS: ReadonlySet<string> = new Set([
  "/api/generate",
  "/api/chat",
  "/api/embed",
  "/api/embeddings",
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/embeddings",
  "/v1/responses",
  "/v1/messages",
  "/v1/audio/transcriptions",
  // Image generation, Ollama v0.14.3 to v0.32.5 on macOS (api-facts S1); a 404 on the others.
  "/v1/images/generations",
  "/v1/images/edits",
]);

export class OllamaTenant implements LlmTenant {
  readonly kind = "ollama";
  readonly side = "llm";
  readonly label = "Ollama";
  readonly client: OllamaClient;

  constructor(readonly base: URL, callTimeoutMs: number, local: boolean) {
    this.client = new OllamaClient(base, callTimeoutMs);
    // An Ollama on this machine that refuses connections holds no memory: an unload need not wait for it.
    this.client.refusalMeansGone = local;
  }

  classify(method: string, path: string): WorkClass {
    return method === "POST" && OLLAMA_LLM_PATHS.has(path) ? "llm" : "pass";
  }

  async release({ signal }: CallOptions): Promise<ReleaseCall> {
    const models = (await this.client.ps(signal)).map((m) => m.name);
    let error: string | undefined;
    for (const m of models) {
      try {
        await this.client.unload(m, signal);
      } catch (err) {
        if (signal.aborted) throw err;
        if (!(err instanceof UpstreamHttpError && err.status === 404)) error = `unload ${m}: ${describeFetchError(err)}`;
      }
    }
    return { tried: models, accepted: error === undefined, error };
  }

  async verify({ signal }: CallOptions): Promise<Holding> {
    try {
      const residents = toResidents(await this.client.ps(signal));
      return { held: residents.length > 0, residents, vramBytes: residents.reduce((n, r) => n + (r.vramBytes ?? 0), 0) };
    } catch (err) {
      if (signal.aborted) throw err;
      if (this.client.refusalMeansGone && isConnectionRefused(err)) return { held: false, notRunning: describeFetchError(err) };
      return { held: true, unreadable: `/api/ps unreadable: ${describeFetchError(err)}` };
    }
  }

  async resident({ signal }: CallOptions): Promise<Resident[]> {
    return toResidents(await this.client.ps(signal));
  }

  probe(timeoutMs: number): Promise<string> {
    return this.client.version(timeoutMs);
  }

  /** emptyOllama, as before the tenant contract: its blind unload when /api/ps cannot be read. */
  async handOver(b: HandOverBound): Promise<Released> {
    const t0 = performance.now();
    const r = await emptyOllama(this.client, {
      timeoutMs: b.timeoutMs,
      pollMs: b.pollMs,
      // A hanging /api/ps is given up on with time left to unload blind and poll again.
      psTimeoutMs: Math.min(b.callTimeoutMs, b.timeoutMs / 2),
      keep: b.keep,
    }).catch((err: unknown) => ({ tried: [], complete: false, error: describeFetchError(err), notRunning: undefined }));
    return { released: r.complete, tried: r.tried, error: r.error, notRunning: r.notRunning, durationMs: performance.now() - t0 };
  }
}

function toResidents(models: { name: string; sizeVram: number }[]): Resident[] {
  return models.map((m) => ({ name: m.name, state: "loaded", vramBytes: m.sizeVram }));
}

export const ollamaDriver: TenantDriver<OllamaTenant> = {
  kind: "ollama",
  label: "Ollama",
  create: (ctx: TenantContext) => new OllamaTenant(ctx.base, ctx.config.unloadTimeoutMs, ctx.local),
};
