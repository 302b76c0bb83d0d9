/**
 * LLM_IDLE_TIMEOUT: an LLM exchange in which no byte moves — none of the request body from the
 * client, none from the upstream, none taken by the client — for that long is ended, and its GPU
 * slot comes back at once. Whoever moves a byte sets `moved`; one shared ticker looks at every
 * watched exchange ten times per timeout (at most every 5 s). A busy stream thus costs a field
 * store per piece and no timer of its own (this is the hot path: CPU per request is benchmarked).
 */
import type { Activity, Stoppable } from "../upstream/h1-pool.ts";

/** Why a quiet exchange was ended; decides the answer and labels `gpu_turnstile_llm_aborted_total`. */
export type IdleReason = "request_body" | "no_answer" | "upstream_stalled" | "client_not_reading";
export const IDLE_REASONS: readonly IdleReason[] = ["request_body", "no_answer", "upstream_stalled", "client_not_reading"];

/** Thrown by forward() when the watch ended the exchange before its answer had started. */
export class IdleTimeoutError extends Error {
  constructor(readonly reason: IdleReason) {
    super(`no byte moved for LLM_IDLE_TIMEOUT (${reason})`);
  }
}

export class IdleWatch implements Activity {
  moved = false;
  clientBlocked = false;
  /** "request" while the client's body is still coming, "waiting" for the answer, "response" once it flows. */
  stage: "request" | "waiting" | "response" = "waiting";
  /** Set when the watch fired. */
  reason: IdleReason | undefined;
  quietTicks = 0;
  private hold: { release(): void } | undefined;
  private running: Stoppable | undefined;
  // Made only for the fetch path: an AbortSignal per exchange costs memory every open stream pays.
  private ac: AbortController | undefined;
  private combined: AbortSignal | undefined;

  constructor(
    private readonly ticker: IdleTicker,
    private readonly onFire: (reason: IdleReason) => void,
  ) {}

  /** The pooled exchange carrying the request (h1-pool.ts sets it); stopped when the watch fires, at once if it has. */
  set stopper(s: Stoppable | undefined) {
    this.running = s;
    if (s && this.reason) s.stop(new IdleTimeoutError(this.reason));
  }

  /** A signal that aborts when `client` does or the watch fires (for fetch, which only takes a signal). */
  signalWith(client: AbortSignal): AbortSignal {
    if (!this.combined) {
      this.ac = new AbortController();
      if (this.reason) this.ac.abort(new IdleTimeoutError(this.reason));
      this.combined = AbortSignal.any([client, this.ac.signal]);
    }
    return this.combined;
  }

  /** Watch the exchange while `hold` (its GPU slot) is held; the returned hold stops watching on release. */
  arm(hold: { release(): void }): { release(): void } {
    this.hold = hold;
    this.quietTicks = 0;
    this.moved = false;
    this.ticker.add(this);
    return { release: () => this.release() };
  }

  private release(): void {
    this.ticker.delete(this);
    const h = this.hold;
    this.hold = undefined;
    h?.release();
  }

  /** Called by the ticker: the exchange was quiet for the whole timeout. */
  fire(): void {
    const reason: IdleReason =
      this.stage === "request" ? "request_body" : this.stage === "waiting" ? "no_answer" : this.clientBlocked ? "client_not_reading" : "upstream_stalled";
    this.reason = reason;
    // The slot first: whatever the abort below sets in motion, the GPU is free now.
    this.release();
    this.onFire(reason);
    this.#stop(new IdleTimeoutError(reason));
  }

  /** Ends the exchange from outside (a force-release): the slot comes back, the stream is cut with `err`. */
  cut(err: Error): void {
    this.release();
    this.#stop(err);
  }

  #stop(err: Error): void {
    this.running?.stop(err);
    this.ac?.abort(err);
  }
}

/** One per turnstile: the coarse clock of every watched exchange. */
export class IdleTicker {
  readonly tickMs: number;
  private readonly quietLimit: number;
  private readonly watches = new Set<IdleWatch>();
  private timer: ReturnType<typeof setInterval> | undefined;

  /**
   * `autoTick: false` leaves ticking to the caller (tests), or, with LLM_IDLE_TIMEOUT 0, to no one:
   * the ticker then only keeps the armed watches, for `cutAll`.
   */
  constructor(
    readonly timeoutMs: number,
    private readonly autoTick = true,
  ) {
    this.tickMs = Math.min(5000, Math.max(10, timeoutMs / 10));
    // A byte that moved just after a tick is seen at the next one: quiet for [timeout, timeout + tick).
    this.quietLimit = Math.ceil(timeoutMs / this.tickMs);
  }

  watch(onFire: (reason: IdleReason) => void): IdleWatch {
    return new IdleWatch(this, onFire);
  }

  /** Exchanges being watched (tests, and whether the timer runs). */
  get size(): number {
    return this.watches.size;
  }

  add(w: IdleWatch): void {
    this.watches.add(w);
    if (this.autoTick && !this.timer) {
      this.timer = setInterval(() => this.tick(), this.tickMs);
      // Watched exchanges keep the process alive by their sockets; the clock alone must not.
      this.timer.unref();
    }
  }

  delete(w: IdleWatch): void {
    this.watches.delete(w);
    if (this.watches.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Cuts every armed exchange (POST /turnstile/release); returns how many. */
  cutAll(err: Error): number {
    const all = [...this.watches];
    for (const w of all) w.cut(err);
    return all.length;
  }

  tick(): void {
    for (const w of this.watches) {
      if (w.moved) {
        w.moved = false;
        w.quietTicks = 0;
      } else if (++w.quietTicks >= this.quietLimit) w.fire();
    }
  }
}
