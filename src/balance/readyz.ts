/**
 * GET /readyz?class=llm|image, on both listeners and for any Host (like /healthz): 200 when a
 * request of that class would be admitted now; 429 with Retry-After while the card is busy (Olla
 * reads 429 as "rate limited, retry after", not as "unhealthy"); 503 when the class cannot be
 * served here at all (its upstream is down or disabled).
 */
import type { LockSnapshot } from "../lock/types.ts";
import { readiness, readyzClass, readyzStatus, type UpstreamState, type WorkClass } from "./readiness.ts";

export interface ReadyzDeps {
  lock: () => LockSnapshot;
  upstream: (cls: WorkClass) => UpstreamState;
  /** The busy answers' Retry-After (BUSY_RETRY_AFTER, estimated when `auto`). */
  retryAfterS: () => number;
  /** Image jobs holding the GPU (not counting those waiting at the lock). */
  activeImageJobs: () => number;
  card: string;
}

export interface ReadyzBody {
  state: string;
  class: WorkClass;
  /** "ready", or why not (readiness.ts). */
  reason: string;
  /** Image work ahead of a new request: jobs holding the GPU plus image jobs and leases waiting for it. */
  queue: number;
  retry_after_s: number;
  card: string;
}

/** The answer to `/readyz` with this query string's `class` (the listener's own class when absent). */
export function readyzAnswer(deps: ReadyzDeps, classParam: string | null, listenerDefault: WorkClass): Response {
  const cls = readyzClass(classParam, listenerDefault);
  if (cls === undefined) {
    return Response.json({ error: `gpu-turnstile: /readyz?class= takes llm or image, not ${JSON.stringify(classParam)}` }, { status: 400 });
  }
  const lock = deps.lock();
  const r = readiness(lock, deps.upstream(cls));
  const status = readyzStatus(r);
  const retryAfterS = status === 429 ? deps.retryAfterS() : 0;
  const body: ReadyzBody = {
    state: lock.state,
    class: cls,
    reason: r.ready ? "ready" : r.reason,
    queue: lock.imageWaiting + deps.activeImageJobs(),
    retry_after_s: retryAfterS,
    card: deps.card,
  };
  return Response.json(body, { status, headers: status === 429 ? { "retry-after": String(retryAfterS) } : undefined });
}
