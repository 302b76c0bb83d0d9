/**
 * State shared by the native (/api) and OpenAI-compatible (/v1) routes of the simulated Ollama:
 * the model catalog, the scheduler, the in-flight count and the token clock.
 */
import { formatGoTime } from "./clock.ts";
import type { SimGpu } from "./gpu.ts";
import { countTokens, findModel, type Model, normalizeName, tokenAt } from "./ollama-models.ts";
import { type Lease, Scheduler } from "./ollama-scheduler.ts";
import { cloudModel, isCloudName, remoteModelName } from "./ollama-cloud.ts";
import type { Timers } from "./timers.ts";

export interface OllamaConfig {
  loadMs: number;
  unloadMs: number;
  tokenDelayMs: number;
  tokens: number;
  defaultKeepAliveMs: number;
  /** Ollama before v0.3.11: the unload shortcut comes after the capability check. */
  legacyUnload: boolean;
}

/** The counters of a finished answer, in Ollama's units (nanoseconds). */
export interface AnswerStats {
  text: string;
  doneReason: "stop" | "length";
  promptEvalCount: number;
  evalCount: number;
  totalDurationNs: number;
  loadDurationNs: number;
  promptEvalDurationNs: number;
  evalDurationNs: number;
}

export class OllamaCore {
  readonly sched: Scheduler;
  private inflightCount = 0;

  constructor(
    readonly gpu: SimGpu,
    readonly timers: Timers,
    readonly timing: OllamaConfig,
    readonly models: Model[],
    readonly version: string,
  ) {
    this.sched = new Scheduler(gpu, timers, timing);
  }

  /**
   * A model of the catalog first (a local model copied to a `-cloud` name is local, and loads), then a
   * cloud name not pulled (v0.17.6: no stub needed), which goes to ollama.com.
   */
  find(name: string): Model | undefined {
    return findModel(this.models, name) ?? (isCloudName(name) ? cloudModel(name, this.gpu.now()) : undefined);
  }

  /** `ollama cp`: the destination becomes that model under a new name (replacing any it had). */
  copy(source: string, destination: string): boolean {
    const m = this.find(source);
    if (!m) return false;
    this.remove(destination);
    const remoteModel = m.cloud ? (m.remoteModel ?? remoteModelName(m.name)) : undefined;
    this.models.push({ ...m, name: normalizeName(destination), modifiedAt: this.gpu.now(), remoteModel });
    return true;
  }

  /** `ollama rm`. */
  remove(name: string): boolean {
    const m = findModel(this.models, name);
    if (!m) return false;
    this.models.splice(this.models.indexOf(m), 1);
    return true;
  }

  inflight(): number {
    return this.inflightCount;
  }

  /** Takes the model for one request (loading it if needed); counted in `inflight()` until released. */
  async lease(model: Model, keepAliveMs: number | undefined, req: Request): Promise<Lease> {
    // ollama.com answers a cloud model: no runner, no VRAM, not counted as local inference.
    if (model.cloud) return { waitedMs: 0, release() {} };
    this.inflightCount++;
    try {
      // The turnstile's mark on a request it served during an image job (its nested listener).
      const nested = req.headers.get("x-gpu-turnstile-nested") !== null;
      const lease = await this.sched.acquire(model, keepAliveMs, req.signal, nested);
      let done = false;
      return {
        waitedMs: lease.waitedMs,
        release: () => {
          if (done) return;
          done = true;
          this.inflightCount--;
          lease.release();
        },
      };
    } catch (e) {
      this.inflightCount--;
      throw e;
    }
  }

  createdAt(): string {
    return formatGoTime(this.gpu.now(), true);
  }

  /**
   * Generates an answer token by token at the configured rate; `onToken` runs for each. Throws
   * AbortedError when `signal` aborts (client gone), so the caller's finally releases the model.
   */
  async answer(
    prompt: string,
    maxTokens: number | undefined,
    lease: Lease,
    startedAt: number,
    signal: AbortSignal,
    onToken: (token: string) => void,
  ): Promise<AnswerStats> {
    const limit = maxTokens !== undefined && maxTokens >= 0 ? maxTokens : Infinity;
    const n = Math.min(this.timing.tokens, limit);
    const promptEvalCount = countTokens(prompt) + 20; // + chat template tokens
    const evalStart = this.gpu.now();
    let text = "";
    for (let i = 0; i < n; i++) {
      await this.timers.sleep(this.timing.tokenDelayMs, signal);
      const tok = tokenAt(i);
      text += tok;
      onToken(tok);
    }
    // The end-of-sequence token takes one more step before the final chunk.
    await this.timers.sleep(this.timing.tokenDelayMs, signal);
    const end = this.gpu.now();
    const ns = (ms: number): number => Math.max(1, Math.round(ms * 1e6));
    return {
      text,
      doneReason: n < this.timing.tokens ? "length" : "stop",
      promptEvalCount,
      evalCount: n + 1,
      totalDurationNs: ns(end - startedAt),
      loadDurationNs: ns(lease.waitedMs),
      promptEvalDurationNs: ns(promptEvalCount * 0.05),
      evalDurationNs: ns(end - evalStart),
    };
  }
}

/** The metrics fields of a final chunk, in Go's struct order. */
export function metrics(s: AnswerStats): Record<string, number> {
  return {
    total_duration: s.totalDurationNs,
    load_duration: s.loadDurationNs,
    prompt_eval_count: s.promptEvalCount,
    prompt_eval_duration: s.promptEvalDurationNs,
    eval_count: s.evalCount,
    eval_duration: s.evalDurationNs,
  };
}
