/**
 * Probes of the enabled upstreams: once at start, then every HEALTH_INTERVAL. Failure is
 * reported, never fatal — the turnstile keeps serving (and retrying) while an upstream is down.
 */
import type { Tenant } from "../tenants/types.ts";
import { formatDuration } from "../config/duration.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";

export type ProbeReport = (upstream: "ollama" | "comfy", up: boolean, detail: string) => void;

/** Why a probe failed; its own timeout named as the setting, so the log says which bound was reached. */
function probeError(err: unknown, timeoutMs: number): string {
  const timedOut = (err as { name?: unknown } | null)?.name === "TimeoutError";
  return timedOut ? `no answer within PROBE_TIMEOUT (${formatDuration(timeoutMs)})` : describeFetchError(err);
}

/** One side's probe: its driver's (Ollama's /api/version, ComfyUI's /system_stats, …). */
export async function probeTenant(t: Pick<Tenant, "probe">, timeoutMs: number): Promise<{ up: boolean; detail: string }> {
  try {
    return { up: true, detail: await t.probe(timeoutMs) };
  } catch (err) {
    return { up: false, detail: probeError(err, timeoutMs) };
  }
}

export interface HealthMonitor {
  /** Resolves when the first round of probes has been reported. */
  first: Promise<void>;
  /**
   * Resolves when each upstream's first probe has been reported (the start waits on it, so no
   * request meets an upstream not probed yet); each probe is bounded by `timeoutMs`.
   */
  reported: Promise<void>;
  /** One round as soon as the one running ends (a request found an upstream refusing); never more than one queued. */
  probeNow(): void;
  stop(): void;
}

export function startHealthMonitor(opts: {
  /** The LLM side (reported as "ollama") and the image side ("comfy"). */
  ollama?: Pick<Tenant, "probe">;
  comfy?: Pick<Tenant, "probe">;
  timeoutMs: number;
  intervalMs: number;
  report: ProbeReport;
  /** Also part of each round while Ollama is up (the status page's resident models); its failure is ignored. */
  whenOllamaUp?: () => Promise<unknown>;
}): HealthMonitor {
  let onReported!: () => void;
  const reported = new Promise<void>((r) => (onReported = r));
  const round = async () => {
    const probes: Promise<void>[] = [];
    let ollamaUp = false;
    if (opts.ollama) {
      probes.push(
        probeTenant(opts.ollama, opts.timeoutMs).then((r) => {
          opts.report("ollama", r.up, r.detail);
          ollamaUp = r.up;
        }),
      );
    }
    if (opts.comfy) probes.push(probeTenant(opts.comfy, opts.timeoutMs).then((r) => opts.report("comfy", r.up, r.detail)));
    await Promise.all(probes);
    onReported();
    if (ollamaUp) await opts.whenOllamaUp?.().catch(() => {});
  };
  // The first round starts with the listeners: the start's answers wait for it (`reported`).
  let running: Promise<void> = round();
  const first = running;
  let queued = false;
  const probeNow = () => {
    if (queued) return;
    queued = true;
    running = running.then(() => {
      queued = false;
      return round();
    });
  };
  // HEALTH_INTERVAL=0: probe once at start only (and when a request finds an upstream refusing).
  if (opts.intervalMs <= 0) return { first, reported, probeNow, stop: () => {} };
  const timer = setInterval(() => {
    running = running.then(round);
  }, opts.intervalMs);
  timer.unref();
  return { first, reported, probeNow, stop: () => clearInterval(timer) };
}
