/**
 * What a load balancer in front of several cards asks one turnstile (SPEC "Several cards"): would a
 * request of this class be admitted now? A view of the lock's state, never a second lock: the
 * answer is read from the lock's snapshot and the last health probes, and a request that then
 * arrives still goes through the lock like any other. Pure: no I/O, no clock.
 */
import type { LockSnapshot } from "../lock/types.ts";

export type WorkClass = "llm" | "image";

/** Why a class is not ready: a busy card (429) or one that cannot serve it at all (503). */
export type NotReadyReason = "image_job" | "image_waiting" | "lease" | "upstream_down" | "disabled";

export type Readiness = { ready: true } | { ready: false; reason: NotReadyReason };

/** The last probe's view of the upstream that serves the class. */
export type UpstreamState = "up" | "down" | "disabled";

/**
 * `llm`: admitted at once in `idle` and `llm` while no image job waits (the lock's own rule for
 * tryAcquireLLM). `image`: started at once only when no image job runs or waits and no lease is
 * held — the same states; an image job that would join a running session is not "ready", since it
 * would queue in ComfyUI behind the session's jobs while another card may be free.
 */
export function readiness(lock: Pick<LockSnapshot, "state" | "imageWaiting">, upstream: UpstreamState): Readiness {
  if (upstream === "disabled") return { ready: false, reason: "disabled" };
  if (upstream === "down") return { ready: false, reason: "upstream_down" };
  if (lock.state === "lease") return { ready: false, reason: "lease" };
  if (lock.state === "image") return { ready: false, reason: "image_job" };
  if (lock.imageWaiting > 0) return { ready: false, reason: "image_waiting" };
  return { ready: true };
}

/** 429 for a busy card (Olla: "rate limited, retry after"), 503 for one that cannot serve the class. */
export function readyzStatus(r: Readiness): 200 | 429 | 503 {
  if (r.ready) return 200;
  return r.reason === "upstream_down" || r.reason === "disabled" ? 503 : 429;
}

/**
 * HAProxy's agent-check answer (one line per connection): `up ready` while chats are admitted at
 * once, `drain` while an image job or a lease holds the card or an image job waits for it — new
 * traffic goes elsewhere, while sticky traffic (a client's /history and /view) still reaches it.
 */
export function agentLine(lock: Pick<LockSnapshot, "state" | "imageWaiting">): string {
  return lock.state === "image" || lock.state === "lease" || lock.imageWaiting > 0 ? "drain\n" : "up ready\n";
}

/** The class a `/readyz` query names; without one, the listener's own. undefined for anything else. */
export function readyzClass(query: string | null, listenerDefault: WorkClass): WorkClass | undefined {
  if (query === null || query === "") return listenerDefault;
  return query === "llm" || query === "image" ? query : undefined;
}
