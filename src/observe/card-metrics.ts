/**
 * Metrics of who had the card and who waited for it: leases granted and ended (by reason),
 * force-releases, the waiters by class, and the seconds spent in each GPU state. Nothing here runs
 * per request: the waiters are counted and the state clock is brought up to date at scrape time.
 */
import type { GpuState, LockEvent } from "../lock/index.ts";
import type { LeaseEnd, LeaseEvent } from "../status/steer.ts";
import type { Registry } from "./metrics.ts";
import { GPU_STATES } from "./turnstile-metrics.ts";

const LEASE_ENDS: readonly LeaseEnd[] = ["returned", "expired", "revoked", "stopped"];
const WAITER_CLASSES = ["llm", "image", "lease"] as const;
type WaiterClass = (typeof WAITER_CLASSES)[number];

export interface CardMetrics {
  onLease(e: LeaseEvent): void;
  onForceRelease(): void;
  onLock(e: LockEvent): void;
  /** Adds the current state's time so far: call before rendering. */
  flush(): void;
}

export function createCardMetrics(registry: Registry, opts: { waiting: () => Record<WaiterClass, number>; now?: () => number }): CardMetrics {
  const now = opts.now ?? (() => performance.now());
  const granted = registry.counter({ name: "gpu_turnstile_leases_granted_total", help: "GPU leases granted to programs outside the turnstile." });
  const ended = registry.counter<{ reason: LeaseEnd }>({
    name: "gpu_turnstile_leases_ended_total",
    help: "GPU leases ended, by reason: returned by the holder, expired (not renewed), revoked (force-release), stopped (shutdown).",
    labelNames: ["reason"],
    initLabels: LEASE_ENDS.map((reason) => ({ reason })),
  });
  const forced = registry.counter({ name: "gpu_turnstile_force_releases_total", help: "Force-releases of the GPU (POST /turnstile/release)." });
  registry.gauge<{ class: WaiterClass }>({
    name: "gpu_turnstile_waiting",
    help: "Requests waiting for the GPU now, by class: LLM requests, image jobs, leases.",
    labelNames: ["class"],
    collect: (g) => {
      const n = opts.waiting();
      for (const c of WAITER_CLASSES) g.set({ class: c }, n[c]);
    },
  });
  const seconds = registry.counter<{ state: GpuState }>({
    name: "gpu_turnstile_state_seconds_total",
    help: "Seconds the GPU spent in each state.",
    labelNames: ["state"],
    initLabels: GPU_STATES.map((state) => ({ state })),
  });
  let state: GpuState = "idle";
  let since = now();
  const flush = () => {
    const t = now();
    seconds.inc({ state }, Math.max(0, t - since) / 1000);
    since = t;
  };
  return {
    onLease(e) {
      if (e.event === "grant") granted.inc({});
      else if (e.event === "end") ended.inc({ reason: e.reason });
    },
    onForceRelease: () => forced.inc({}),
    onLock(e) {
      if (e.type !== "transition") return;
      flush();
      state = e.to;
    },
    flush,
  };
}
