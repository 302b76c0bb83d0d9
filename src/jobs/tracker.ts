/** Background work the turnstile still owes (tracked image jobs, warm-ups), for shutdown and tests. */
export interface TrackedJob {
  jobId: number;
  promptId?: string;
  since: number;
}

export class JobTracker {
  private readonly jobs = new Map<number, { info: TrackedJob; done: Promise<void> }>();
  /** Prompts a force-release interrupted: their jobs end as `interrupted`, not as ComfyUI's error. */
  readonly interrupted = new Set<string>();
  private nextKey = 0;

  run(info: TrackedJob, work: () => Promise<void>): Promise<void> {
    const key = this.nextKey++;
    const done = work().finally(() => this.jobs.delete(key));
    this.jobs.set(key, { info, done });
    return done;
  }

  active(): TrackedJob[] {
    return [...this.jobs.values()].map((j) => ({ ...j.info }));
  }

  /** Resolves when nothing is tracked any more (including work started while waiting). */
  async settled(): Promise<void> {
    while (this.jobs.size > 0) await Promise.allSettled([...this.jobs.values()].map((j) => j.done));
  }
}
