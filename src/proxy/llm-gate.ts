import type { ImageClient } from "../lock/index.ts";

/**
 * Admission of one LLM request to the GPU (SPEC "Lock semantics", LLM_BUSY_MODE).
 * `wait`: queue behind the image job for at most LLM_WAIT_TIMEOUT; `reject`: answer at once.
 */
export interface LlmLease {
  release(): void;
  readonly waitedMs: number;
}

export interface LlmLock {
  /** `who`: the request's client, for its place in line (issue 30). */
  acquireLLM(signal?: AbortSignal, who?: ImageClient): Promise<LlmLease>;
  tryAcquireLLM(): LlmLease | null;
  /** The GPU's state, for the busy answer's wording. */
  readonly state?: string;
}

export type BusyReason = "wait_timeout" | "reject";

export class GpuBusyError extends Error {
  constructor(readonly reason: BusyReason) {
    super(reason === "reject" ? "GPU busy with an image job" : "timed out waiting for the GPU");
  }
}

export interface GateSettings {
  mode: "wait" | "reject";
  waitTimeoutMs: number;
}

/**
 * Resolves with a lease; rejects with GpuBusyError, or with the client's abort reason. `who` is
 * asked only when the request must wait: who it is matters for its place in line alone.
 */
export async function admitLLM(lock: LlmLock, s: GateSettings, clientSignal: AbortSignal, who?: () => ImageClient): Promise<LlmLease> {
  // The common case — the GPU is free for LLM work — costs no timer and no composite signal.
  const now = lock.tryAcquireLLM();
  if (now) return now;
  if (s.mode === "reject") throw new GpuBusyError("reject");
  const timeout = AbortSignal.timeout(s.waitTimeoutMs);
  try {
    return await lock.acquireLLM(AbortSignal.any([clientSignal, timeout]), who?.());
  } catch (err) {
    if (clientSignal.aborted) throw clientSignal.reason;
    if (timeout.aborted) throw new GpuBusyError("wait_timeout");
    throw err;
  }
}

/** `state`: the lock's state when the answer is made; a GPU lease is named as such. */
export function busyMessage(reason: BusyReason, retryAfterS: number, state?: string): string {
  const what = state === "lease" ? "lent to another program (a GPU lease)" : "busy with an image job";
  const why = reason === "reject" ? `the GPU is ${what}` : `the GPU stayed ${what} for longer than LLM_WAIT_TIMEOUT`;
  return `gpu-turnstile: ${why}; retry in ${retryAfterS} s`;
}
