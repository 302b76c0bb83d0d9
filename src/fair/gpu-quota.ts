/**
 * QUOTA_GPU_SECONDS (issue 30): how many seconds of GPU time each client may use per
 * QUOTA_GPU_WINDOW. Written as one number for every client (`1800`), per class of FAIR_CLASSES
 * (`batch:600`), or both (`1800,batch:600`: batch clients 600 s each, every other client 1800 s);
 * a client's own `gpu=N` in CLIENTS_FILE wins. Each client has its own count: a class sets the
 * amount, its clients do not share it. 0 = no limit.
 */
import type { Identity } from "./identity.ts";

export interface GpuLimits {
  /** Seconds for a client no class entry names; 0 = no limit. */
  readonly all: number;
  readonly byClass: ReadonlyMap<string, number>;
}

export type ParsedGpuLimits = { ok: true; limits: GpuLimits } | { ok: false; message: string };

export function parseGpuSeconds(text: string, classes: readonly string[]): ParsedGpuLimits {
  let all: number | undefined;
  const byClass = new Map<string, number>();
  for (const part of text.split(",").map((p) => p.trim())) {
    const m = /^(?:([a-z][a-z0-9_-]{0,31}):)?(\d{1,7})$/.exec(part);
    if (!m) return { ok: false, message: `"${part}" is not seconds or class:seconds (e.g. 1800 or batch:600)` };
    const seconds = Number(m[2]);
    const cls = m[1];
    if (cls === undefined) {
      if (all !== undefined) return { ok: false, message: "more than one number for every client" };
      all = seconds;
    } else {
      if (!classes.includes(cls)) return { ok: false, message: `"${cls}" is not a class of FAIR_CLASSES (${classes.join(", ")})` };
      if (byClass.has(cls)) return { ok: false, message: `class ${cls} is named twice` };
      byClass.set(cls, seconds);
    }
  }
  return { ok: true, limits: { all: all ?? 0, byClass } };
}

/** A client's GPU seconds per window: its own gpu=N, else its class's, else every client's; 0 = no limit. */
export function gpuLimitS(limits: GpuLimits, who: Pick<Identity, "cls" | "gpu">): number {
  return who.gpu ?? limits.byClass.get(who.cls) ?? limits.all;
}

/** Some client may be held to a GPU-seconds quota (else nothing is metered). */
export function anyGpuLimit(limits: GpuLimits, own: readonly (number | undefined)[]): boolean {
  return limits.all > 0 || [...limits.byClass.values()].some((s) => s > 0) || own.some((s) => (s ?? 0) > 0);
}
