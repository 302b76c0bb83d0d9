/**
 * Waking followers early (issue 19): when a client cancels, interrupts or deletes jobs through the
 * turnstile, the followers of those jobs look again at once instead of at their next poll, so the
 * card does not sit held and idle for up to HISTORY_POLL_INTERVAL.
 */

/**
 * After a nudge the follower looks at once, then again after these delays (ms) before going back
 * to its usual interval: an interrupt takes effect at the job's next step, not when ComfyUI answers.
 */
export const BURST_MS = [50, 150, 400, 1000] as const;

/** The prompt ids a client named, or `all` (an interrupt without an id, a queue clear). */
export type NudgeTarget = readonly string[] | "all";

export class Nudges {
  readonly #followed = new Map<string, Set<() => void>>();
  readonly #bursts = new Map<string, number>();
  readonly #named = new Set<string>();
  /** When ComfyUI last announced news of each followed job (comfy/live-socket.ts). */
  readonly #announced = new Map<string, number>();
  /** Announced while its follower was not asleep: its next wait returns at once. */
  readonly #unheard = new Set<string>();

  /** Wake the followers of these prompt ids (or all of them). */
  nudge(target: NudgeTarget): void {
    const ids = target === "all" ? [...this.#followed.keys()] : target.filter((id) => this.#followed.has(id));
    for (const id of ids) {
      this.#named.add(id);
      this.#bursts.set(id, 0);
      for (const wake of this.#followed.get(id) ?? []) wake();
    }
  }

  /**
   * Whether a client's cancel, delete, clear or interrupt touched this id since the follower last
   * asked: a job then missing from ComfyUI was removed, and need not be missed twice to be gone.
   */
  takeNamed(id: string): boolean {
    return this.#named.delete(id);
  }

  /**
   * ComfyUI announced a change (issue 27): its queue changed (`all`), or a job it names ended.
   * Those followers look again at once, with reads made after this moment; the jobs are not
   * named as removed (history stays the proof of how they ended).
   */
  announce(target: NudgeTarget, at = performance.now()): void {
    const ids = target === "all" ? [...this.#followed.keys()] : target.filter((id) => this.#followed.has(id));
    for (const id of ids) {
      this.#announced.set(id, at);
      const waiters = this.#followed.get(id)!;
      if (waiters.size === 0) this.#unheard.add(id);
      for (const wake of waiters) wake();
    }
  }

  /** When ComfyUI last announced news of `id`: a /queue read started before then may not show it. */
  announcedAt(id: string): number {
    return this.#announced.get(id) ?? 0;
  }

  /** Starts following `id`; call `end` when done. */
  follow(id: string): void {
    if (!this.#followed.has(id)) this.#followed.set(id, new Set());
  }

  end(id: string): void {
    this.#followed.delete(id);
    this.#bursts.delete(id);
    this.#named.delete(id);
    this.#announced.delete(id);
    this.#unheard.delete(id);
  }

  /** Sleep up to `ms` (less while a nudge's burst lasts); a nudge ends the sleep at once. */
  wait(id: string, ms: number): Promise<void> {
    const step = this.#bursts.get(id);
    let delay = ms;
    if (step !== undefined) {
      const burst = BURST_MS[step];
      if (burst === undefined) this.#bursts.delete(id);
      else {
        this.#bursts.set(id, step + 1);
        delay = Math.min(ms, burst);
      }
    }
    const waiters = this.#followed.get(id);
    if (!waiters) return new Promise((resolve) => setTimeout(resolve, delay));
    if (this.#unheard.delete(id)) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, delay);
      waiters.add(done);
    });
  }
}
