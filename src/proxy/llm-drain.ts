/**
 * LLM_DRAIN_TIMEOUT: the bound on how long running LLM requests may keep the GPU from an image job
 * (or a lease) that waits for them. The lock is writer-preferring, so once an image job waits no new
 * chat is admitted; but a chat that is already streaming, and keeps streaming, never lets go:
 * LLM_IDLE_TIMEOUT only ends a stalled stream. Past this bound the running requests are cut, as a
 * force-release cuts them, and the image job gets the card.
 */
import type { GpuLock } from "../lock/index.ts";

/** Said to an LLM client whose stream was cut because an image job waited too long for it. */
export class DrainTimeout extends Error {
  constructor(readonly boundMs: number, bound: string) {
    super(`gpu-turnstile: an image job waited LLM_DRAIN_TIMEOUT (${bound}) for this request to end; it was cut`);
  }
}

export interface LlmDrainDeps {
  lock: Pick<GpuLock, "snapshot">;
  /** Every LLM exchange holding a slot (the idle ticker keeps them for force-release too). */
  llm: { cutAll(err: Error): number };
  boundMs: number;
  /** The bound as the operator wrote it, for the log and the client's error. */
  bound: string;
  onCut: (r: { cut: number; waitedMs: number }) => void;
  now?: () => number;
}

/**
 * Decides, at each check, whether running LLM work has kept a waiting image job off the card for
 * longer than the bound. Pure but for the clock it is given; `check` is driven by a timer below.
 */
export class LlmDrainBound {
  #since: number | undefined;
  readonly #now: () => number;

  constructor(private readonly d: LlmDrainDeps) {
    this.#now = d.now ?? (() => performance.now());
  }

  check(): void {
    const s = this.d.lock.snapshot();
    if (s.state !== "llm" || !s.imagePending || s.llmInflight === 0) {
      this.#since = undefined;
      return;
    }
    const now = this.#now();
    this.#since ??= now;
    const waitedMs = now - this.#since;
    if (waitedMs < this.d.boundMs) return;
    this.#since = undefined;
    const cut = this.d.llm.cutAll(new DrainTimeout(this.d.boundMs, this.d.bound));
    this.d.onCut({ cut, waitedMs });
  }
}

/** Checks ten times per bound (at most once a second, at least every 10 ms); 0 = no bound. */
export function startLlmDrainBound(d: LlmDrainDeps): () => void {
  if (d.boundMs <= 0) return () => {};
  const bound = new LlmDrainBound(d);
  const timer = setInterval(() => bound.check(), Math.min(1000, Math.max(10, d.boundMs / 10)));
  timer.unref();
  return () => clearInterval(timer);
}
