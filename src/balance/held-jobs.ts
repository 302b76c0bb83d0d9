/**
 * The image jobs this turnstile has taken the GPU for and not yet ended, fed by job events: what
 * /readyz counts as its queue. A small set, changed a few times per image job. (The prompts not yet
 * handed to ComfyUI, which its own /queue cannot show, are jobs/held-prompts.ts.)
 */
import type { ImageJobEvent } from "../jobs/events.ts";

export class HeldJobs {
  /** Granted the GPU (in a session), not yet released. */
  readonly #active = new Set<number>();

  observe(e: ImageJobEvent): void {
    switch (e.phase) {
      case "acquired":
        this.#active.add(e.jobId);
        return;
      // A retry gives the GPU back for its backoff: the job waits at the lock again until "acquired".
      case "retrying":
      case "released":
        this.#active.delete(e.jobId);
        return;
    }
  }

  /** Jobs holding the GPU (queued or running in ComfyUI, or being prepared for it). */
  get active(): number {
    return this.#active.size;
  }
}
