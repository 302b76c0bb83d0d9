/**
 * Every delay a simulator takes goes through one of these, so that `stop()` can cancel all of
 * them at once and none of them keeps the process (a test run, the demo) alive: all are unref'd.
 */
export class AbortedError extends Error {
  constructor() {
    super("aborted");
    this.name = "AbortError";
  }
}

/** `p`, or AbortedError as soon as `signal` aborts (a load or unload a cancelled request stops waiting for). */
export function raceAbort(p: Promise<void>, signal?: AbortSignal): Promise<void> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(new AbortedError());
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(new AbortedError());
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** setTimeout caps at 2^31-1 ms; longer waits (keep_alive:-1) simply never fire in a sim's lifetime. */
const MAX_TIMEOUT = 2 ** 31 - 1;

export class Timers {
  private readonly pending = new Set<ReturnType<typeof setTimeout>>();
  private readonly life = new AbortController();

  /** Aborted when the owner stops: long-running loops listen to it. */
  get signal(): AbortSignal {
    return this.life.signal;
  }

  get stopped(): boolean {
    return this.life.signal.aborted;
  }

  /** Runs `fn` after `ms`; returns a cancel function. Never fires after `stopAll()`. */
  after(ms: number, fn: () => void): () => void {
    if (this.stopped || ms > MAX_TIMEOUT) return () => {};
    const t = setTimeout(() => {
      this.pending.delete(t);
      if (!this.stopped) fn();
    }, Math.max(0, ms));
    t.unref();
    this.pending.add(t);
    return () => {
      clearTimeout(t);
      this.pending.delete(t);
    };
  }

  /** Resolves after `ms`; rejects with AbortedError if `signal` (or the owner) aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.stopped || signal?.aborted) {
        reject(new AbortedError());
        return;
      }
      const onAbort = (): void => {
        cancel();
        cleanup();
        reject(new AbortedError());
      };
      const cleanup = (): void => {
        signal?.removeEventListener("abort", onAbort);
        this.life.signal.removeEventListener("abort", onAbort);
      };
      const cancel = this.after(ms, () => {
        cleanup();
        resolve();
      });
      signal?.addEventListener("abort", onAbort, { once: true });
      this.life.signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  stopAll(): void {
    this.life.abort();
    for (const t of this.pending) clearTimeout(t);
    this.pending.clear();
  }
}
