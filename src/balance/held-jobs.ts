/**
 * The image jobs this turnstile has taken the GPU for and not yet ended, fed by job events: what
 * /readyz counts as its queue, and — those not yet handed to ComfyUI (Ollama still being emptied) —
 * what ComfyUI's own /queue cannot show yet. Two small sets, changed a few times per image job.
 */
import type { ImageJobEvent } from "../jobs/events.ts";

export class HeldJobs {
  /** Granted the GPU (in a session), not yet released. */
  readonly #active = new Set<number>();
  /** Of those, not yet answered by ComfyUI's /prompt. */
  readonly #unsent = new Set<number>();

  observe(e: ImageJobEvent): void {
    switch (e.phase) {
      case "acquired":
        this.#active.add(e.jobId);
        this.#unsent.add(e.jobId);
        return;
      // A job picked up at start is in ComfyUI's queue already: its /queue shows it.
      case "forwarded":
      case "adopted":
        this.#unsent.delete(e.jobId);
        return;
      // A retry gives the GPU back for its backoff: the job waits at the lock again until "acquired".
      case "retrying":
      case "released":
        this.#active.delete(e.jobId);
        this.#unsent.delete(e.jobId);
        return;
    }
  }

  /** Jobs holding the GPU (queued or running in ComfyUI, or being prepared for it). */
  get active(): number {
    return this.#active.size;
  }

  /** Jobs holding the GPU that ComfyUI has not been sent yet. */
  get unsent(): number {
    return this.#unsent.size;
  }
}
