/**
 * An LLM-side tenant that put itself to sleep for the image side (vLLM's /sleep) must be woken
 * (`restore`, vLLM's /wake_up) before the first LLM request after the image turn reaches it. The
 * gate is told of the lock's turns; the proxy asks it after a request got its LLM slot (so no
 * image job can take the card while the tenant wakes) and before the request is sent. Concurrent
 * requests share one restore. A failed or timed-out restore is reported and the request is sent
 * anyway (the tenant's own answer then reaches the client); the next request tries again.
 */
import { describeFetchError } from "../upstream/upstream-errors.ts";
import type { CallOptions } from "./types.ts";

export interface RestoreReport {
  ok: boolean;
  durationMs: number;
  error?: string;
}

export class RestoreGate {
  /** Until the first restore: a tenant found asleep at start (the turnstile restarted mid-image-turn) is woken too. */
  #needed = true;
  #running: Promise<void> | undefined;

  constructor(
    /** The LLM tenant's `restore`. */
    private readonly restore: (o: CallOptions) => Promise<void>,
    private readonly timeoutMs: number,
    private readonly report: (r: RestoreReport) => void,
  ) {}

  /** The card went to the image side or to a lease: the tenant may have been released. */
  released(): void {
    this.#needed = true;
  }

  /** undefined when nothing is owed (the common case costs no promise); else resolves once restored or given up. */
  ready(): Promise<void> | undefined {
    if (!this.#needed) return undefined;
    return (this.#running ??= this.#restore().finally(() => (this.#running = undefined)));
  }

  async #restore(): Promise<void> {
    const t0 = performance.now();
    try {
      await this.restore({ signal: AbortSignal.timeout(this.timeoutMs) });
      this.#needed = false;
      this.report({ ok: true, durationMs: performance.now() - t0 });
    } catch (err) {
      this.report({ ok: false, durationMs: performance.now() - t0, error: describeFetchError(err) });
    }
  }
}
