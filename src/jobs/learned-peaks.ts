/**
 * What each workflow was measured to need at its highest (issue 31, COEXIST). A workflow is known
 * by its key (workflow-key.ts). Its first run is exclusive and measured; every later run that goes
 * higher raises the peak, one that stays lower never lowers it (a peak once seen can come again).
 * A job that fails after a model was admitted beside it marks the workflow exclusive only: the
 * measurement could not be trusted, so it never shares again while the program runs.
 *
 * In memory, bounded: the least recently used workflow is forgotten first, and a forgotten
 * workflow is simply unlearned again (its next run is exclusive). No I/O, no timers.
 */

export interface LearnedPeak {
  /** The most ComfyUI was seen to use during a run of this workflow, in bytes. */
  readonly peakBytes: number;
  /** Runs measured. */
  readonly runs: number;
  /** Why the workflow may never share the card again, when it may not. */
  readonly exclusiveOnly?: string;
}

export const DEFAULT_PEAK_CAPACITY = 512;

export class LearnedPeaks {
  readonly #peaks = new Map<string, LearnedPeak>();

  constructor(private readonly capacity = DEFAULT_PEAK_CAPACITY) {}

  get(key: string): LearnedPeak | undefined {
    const p = this.#peaks.get(key);
    if (p) this.#touch(key, p);
    return p;
  }

  /**
   * A finished run's highest measured use. Returns whether the peak rose (a first run counts as
   * rising). A run with no measurement (0 samples) must not be recorded: it teaches nothing.
   */
  record(key: string, usedBytes: number): boolean {
    if (!(usedBytes >= 0) || !Number.isFinite(usedBytes)) return false;
    const was = this.#peaks.get(key);
    const rose = was === undefined || usedBytes > was.peakBytes;
    this.#touch(key, {
      peakBytes: Math.max(was?.peakBytes ?? 0, usedBytes),
      runs: (was?.runs ?? 0) + 1,
      ...(was?.exclusiveOnly ? { exclusiveOnly: was.exclusiveOnly } : {}),
    });
    return rose;
  }

  /** Never shares the card again (a job failed after an admission). */
  markExclusive(key: string, why: string): void {
    const was = this.#peaks.get(key);
    this.#touch(key, { peakBytes: was?.peakBytes ?? 0, runs: was?.runs ?? 0, exclusiveOnly: why });
  }

  get size(): number {
    return this.#peaks.size;
  }

  #touch(key: string, p: LearnedPeak): void {
    this.#peaks.delete(key);
    this.#peaks.set(key, p);
    while (this.#peaks.size > this.capacity) {
      const oldest = this.#peaks.keys().next().value as string;
      this.#peaks.delete(oldest);
    }
  }
}
