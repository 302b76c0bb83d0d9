/**
 * An image job's arrival under issue 30's rules, for every image kind alike (ComfyUI's /prompt in
 * image-job.ts, the synchronous generations of tenants/sync-job.ts): who it is for, its client's
 * quotas — GPU seconds, then jobs at once — (refused on arrival, before anything is held: a job
 * once accepted is never dropped) and the name its fair turn is taken under. Pure: the identity,
 * the counters and the meter are given.
 */
import type { Identity, Seen } from "../fair/identity.ts";
import type { ClientQuota, QuotaSlot } from "../fair/quota.ts";
import type { ErrorReply } from "../http/dialect.ts";
import type { ImageClient } from "../lock/index.ts";
import type { GpuMeter } from "./gpu-meter.ts";

/** Image jobs per client: QUOTA_IMAGE_JOBS, or the client's own `images=` of CLIENTS_FILE. */
export interface ImageQuota {
  readonly slots: ClientQuota;
  readonly limit: number;
  retryAfterS(): number;
  refused(who: Identity): void;
}

/** What the composition root hands every image kind's jobs (turnstile.ts's `fairJobs`). */
export interface FairJobs {
  /** Who a job is for: for its quota, and its fair turns when `fairTurns`. */
  identify?: (seen: Seen) => Identity;
  /** FAIR_TURNS: the lock takes waiting jobs in turns across clients (else first come, first served). */
  fairTurns?: boolean;
  /** Absent = no quota. */
  quota?: ImageQuota;
  /** GPU seconds per client (QUOTA_GPU_SECONDS): refuses on arrival, meters from the job events; absent = off. */
  gpuMeter?: GpuMeter;
}

export type FairAdmission =
  | {
      readonly ok: true;
      readonly who: Identity | undefined;
      /** Given back at the job's end (idempotent); undefined when no quota counts it. */
      readonly slot: QuotaSlot | undefined;
      /** The job's name in the lock's fair turns, `tag` its job number; undefined = first come, first served. */
      turn(tag: number): ImageClient | undefined;
    }
  | { readonly ok: false; readonly reply: ErrorReply };

export function admitImageJob(f: FairJobs, seen: Seen): FairAdmission {
  const who = f.identify?.(seen);
  const overGpu = who && f.gpuMeter?.refusal(who, "image");
  if (overGpu) return { ok: false, reply: { status: 429, ...overGpu } };
  const limit = who?.images ?? f.quota?.limit ?? 0;
  const slot = who && f.quota?.slots.take(who.client, limit);
  if (who && f.quota && !slot) {
    f.quota.refused(who);
    const retryAfterS = f.quota.retryAfterS();
    return {
      ok: false,
      reply: {
        status: 429,
        type: "quota_exceeded",
        message: `gpu-turnstile: client ${who.client} already has ${limit} image jobs waiting or running (its quota); retry in ${retryAfterS} s`,
        headers: { "retry-after": String(retryAfterS) },
      },
    };
  }
  return { ok: true, who, slot, turn: (tag) => (f.fairTurns && who ? { client: who.client, cls: who.cls, tag } : undefined) };
}
