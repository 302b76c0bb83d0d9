/** Exponential backoff: initial, doubling, capped. Pure, so the schedule can be tested alone. */
export function backoffDelays(initialMs: number, maxMs: number): () => number {
  let next = initialMs;
  return () => {
    const d = Math.min(next, maxMs);
    next = Math.min(next * 2, maxMs);
    return d;
  };
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
