/**
 * Refusing a prompt_id that is already taken (issue 18): one this turnstile is following or
 * followed recently, or one ComfyUI already knows. A reused id would make the new job look done
 * at the first check, from the old job's history entry.
 */
import type { ComfyClient } from "../comfy/client.ts";

/** Ids followed recently, oldest evicted first. ComfyUI keeps 10,000 history entries; so do we. */
export const RECENT_IDS = 10_000;

export class PromptIds {
  readonly #ids = new Set<string>();

  constructor(private readonly cap = RECENT_IDS) {}

  /** Claims `id` for a new job; false when it is taken (in flight or recent). */
  claim(id: string): boolean {
    if (this.#ids.has(id)) return false;
    this.#ids.add(id);
    if (this.#ids.size > this.cap) this.#ids.delete(this.#ids.values().next().value as string);
    return true;
  }

  /** `id` is a job of this turnstile's, in flight or recent. */
  has(id: string): boolean {
    return this.#ids.has(id);
  }

  /** Gives `id` back: ComfyUI refused the job, so nothing of it exists to confuse a later one. */
  forget(id: string): void {
    this.#ids.delete(id);
  }
}

/**
 * Whether ComfyUI knows the id: `known`, `unknown`, or `unchecked` (no usable answer within
 * PROBE_TIMEOUT: down, refusing, or broken). Through the jobs API where ComfyUI has it, else its
 * queue and that id's history.
 */
export async function comfyKnows(comfy: ComfyClient, id: string): Promise<"known" | "unknown" | "unchecked"> {
  try {
    const job = await comfy.job(id);
    if (job === "unknown") return "unknown";
    if (job !== "unsupported") return "known";
    const q = await comfy.queue();
    if (q.running.includes(id) || q.pending.includes(id)) return "known";
    return (await comfy.history(id)) === undefined ? "unknown" : "known";
  } catch {
    return "unchecked";
  }
}
