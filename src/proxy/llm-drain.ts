/**
 * LLM_DRAIN_TIMEOUT: the bound on how long running LLM requests may keep the GPU from an image job
 * (or a lease) that waits for them. The lock is writer-preferring, so once an image job waits no new
 * chat is admitted; but a chat that is already streaming, and keeps streaming, never lets go:
 * LLM_IDLE_TIMEOUT only ends a stalled stream. Past this bound the running requests are cut, as a
 * force-release cuts them, and the image job (or lease) gets the card. What waited is named.
 */
import type { GpuLock } from "../lock/index.ts";

/** What waited for the card: the head of the image line when the bound was reached. */
export type DrainWaiter = { kind: "image"; client?: string } | { kind: "lease"; holder?: string };

/** The waiter in words: "an image job", or "a GPU lease for "holder"". */
export function waiterText(w: DrainWaiter, withHolder = true): string {
  if (w.kind === "image") return "an image job";
  return withHolder && w.holder !== undefined ? `a GPU lease for ${JSON.stringify(w.holder)}` : "a GPU lease";
}

/** The operator's warning for a cut: what waited (a lease with its holder), and how many requests were cut. */
export function drainCutWarning(r: { cut: number; waiter: DrainWaiter }, bound: string): [msg: string, fields: Record<string, unknown>] {
  const who = r.waiter.kind === "lease" ? { holder: r.waiter.holder ?? null } : { client: r.waiter.client ?? null };
  return [`${waiterText(r.waiter)} waited LLM_DRAIN_TIMEOUT (${bound}) for running LLM requests: ${r.cut} cut`, { llm_cut: r.cut, waiter: r.waiter.kind, ...who }];
}

/** Said to an LLM client whose stream was cut because an image job (or a lease) waited too long for it. */
export class DrainTimeout extends Error {
  constructor(readonly boundMs: number, bound: string, waiter: DrainWaiter = { kind: "image" }) {
    // The holder's name is for the operator's log; the cut client learns only what took the card.
    super(`gpu-turnstile: ${waiterText(waiter, false)} waited LLM_DRAIN_TIMEOUT (${bound}) for this request to end; it was cut`);
  }
}

export interface LlmDrainDeps {
  lock: Pick<GpuLock, "snapshot" | "imageLine">;
  /** The holder of the oldest lease waiting for the lock (Steering's queue), to name it. */
  leaseHolder?: () => string | undefined;
  /** Every LLM exchange holding a slot (the idle ticker keeps them for force-release too). */
  llm: { cutAll(err: Error): number };
  boundMs: number;
  /** The bound as the operator wrote it, for the log and the client's error. */
  bound: string;
  onCut: (r: { cut: number; waitedMs: number; waiter: DrainWaiter }) => void;
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
    const waiter = this.#waiter();
    const cut = this.d.llm.cutAll(new DrainTimeout(this.d.boundMs, this.d.bound, waiter));
    this.d.onCut({ cut, waitedMs, waiter });
  }

  /** The one whose turn is next: it is what the running LLM work keeps off the card. */
  #waiter(): DrainWaiter {
    const head = this.d.lock.imageLine()[0];
    if (head?.kind === "lease") return { kind: "lease", holder: this.d.leaseHolder?.() };
    return head?.client === undefined ? { kind: "image" } : { kind: "image", client: head.client };
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
