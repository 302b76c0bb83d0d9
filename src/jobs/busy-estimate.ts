/**
 * BUSY_RETRY_AFTER=auto: when will the GPU be free for LLM requests again? Estimated from what the
 * turnstile sees of ComfyUI's work — the running job's elapsed time against a moving average of
 * recent run times, the jobs still queued behind it (in ComfyUI and at the lock), and the last
 * /free — instead of a fixed guess. Pure: fed job events, asked with a clock reading.
 */
import type { ImageJobEvent } from "./events.ts";

/** Retry-After is clamped to this range (seconds). */
export const RETRY_AFTER_MIN_S = 1;
export const RETRY_AFTER_MAX_S = 300;
/** Before any job has been seen run to its end: today's fixed default. */
export const RETRY_AFTER_UNKNOWN_S = 30;
/** Weight of the newest run time in the moving average. */
const ALPHA = 0.3;

export class BusyEstimator {
  /** Jobs ComfyUI accepted and that have not ended, in the order ComfyUI runs them. */
  readonly #queued: { jobId: number; at: number }[] = [];
  #avgRunMs: number | undefined;
  #lastFreeMs = 0;
  /** When the last job ended: the next queued job starts running then, if it was queued by then. */
  #lastEndAt = -Infinity;

  constructor(private readonly now: () => number = () => performance.now()) {}

  observe(e: ImageJobEvent): void {
    const at = this.now();
    switch (e.phase) {
      case "forwarded":
        if (e.status === 200 && e.promptId) this.#queued.push({ jobId: e.jobId, at });
        return;
      case "finished": {
        const i = this.#queued.findIndex((q) => q.jobId === e.jobId);
        if (i < 0) return;
        const [job] = this.#queued.splice(i, 1);
        const runMs = at - Math.max(job!.at, this.#lastEndAt);
        this.#avgRunMs = this.#avgRunMs === undefined ? runMs : ALPHA * runMs + (1 - ALPHA) * this.#avgRunMs;
        this.#lastEndAt = at;
        return;
      }
      case "freed":
        this.#lastFreeMs = e.durationMs;
        return;
      case "released": {
        // A job that ended without a "finished" (no prompt_id, rejected) leaves the queue too.
        const i = this.#queued.findIndex((q) => q.jobId === e.jobId);
        if (i >= 0) this.#queued.splice(i, 1);
        return;
      }
    }
  }

  /** Seconds until the GPU is expected back, with `imageWaiting` jobs still waiting at the lock. */
  retryAfterS(imageWaiting: number): number {
    const avg = this.#avgRunMs;
    if (avg === undefined) return RETRY_AFTER_UNKNOWN_S;
    const at = this.now();
    const running = this.#queued[0];
    const runningLeft = running ? Math.max(0, avg - (at - Math.max(running.at, this.#lastEndAt))) : 0;
    const behind = Math.max(0, this.#queued.length - 1) + imageWaiting;
    const ms = runningLeft + behind * avg + this.#lastFreeMs;
    return Math.min(RETRY_AFTER_MAX_S, Math.max(RETRY_AFTER_MIN_S, Math.round(ms / 1000)));
  }
}
