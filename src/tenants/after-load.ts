/**
 * What an LLM tenant loaded right after the image side handed the card back can show that
 * something still held memory then: llama-server's `--fit` squeezes a model into what is free,
 * silently. Like Ollama's partial-offload check (ollama/offload.ts), the check is armed by a
 * hand-off from the image side (a lock transition out of `image` or `lease`), disarmed when the
 * image side takes the card again, and run once, in the background, when the first LLM request
 * after the hand-off gives its slot back (the model it used is loaded by then). Each finding is
 * reported (a warning in the log).
 */
import type { LockEvent } from "../lock/index.ts";
import type { CallOptions } from "./types.ts";

export class AfterLoadCheck {
  #armed = false;

  constructor(
    /** The LLM tenant's `afterLoad`: one reading, its findings. */
    private readonly check: (o: CallOptions) => Promise<string[]>,
    private readonly report: (finding: string) => void,
    private readonly timeoutMs: number,
  ) {}

  get armed(): boolean {
    return this.#armed;
  }

  /**
   * Follows the lock: armed when the card comes back from the image side or a lease, run when an
   * LLM slot is given back while armed.
   */
  watch(lock: { onEvent(fn: (e: LockEvent) => void): () => void }): () => void {
    return lock.onEvent((e) => {
      if (e.type === "released" && e.kind === "llm") void this.ended();
      if (e.type !== "transition") return;
      if (e.to === "image" || e.to === "lease") this.#armed = false;
      else if (e.from === "image" || e.from === "lease") this.#armed = true;
    });
  }

  /** An LLM request ended. Resolves when the check, if one was due, is done; never rejects. */
  ended(): Promise<void> {
    if (!this.#armed) return Promise.resolve();
    this.#armed = false;
    return this.check({ signal: AbortSignal.timeout(this.timeoutMs) }).then(
      (findings) => {
        for (const f of findings) this.report(f);
      },
      () => {
        // An unreadable report says nothing about the model; the health probe reports the tenant down.
      },
    );
  }
}
