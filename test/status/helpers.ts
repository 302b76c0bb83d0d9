/** A Steering with no upstreams and short bounds, for the routes and steering tests. */
import type { GpuLock } from "../../src/lock/index.ts";
import type { StatusModel } from "../../src/status/model.ts";
import { Steering, type SteeringDeps } from "../../src/status/steer.ts";

/** Its leases feed `model` when one is given; `more` replaces any dependency (a clock, a store, a log). */
export function bareSteering(lock: GpuLock, model?: StatusModel, more: Partial<SteeringDeps> = {}): Steering {
  return new Steering({
    lock,
    llm: { cutAll: () => 0 },
    jobs: { active: () => [] },
    comfy: undefined,
    settings: { maxTtlMs: 60_000, unloadTimeoutMs: 1000, unloadPollIntervalMs: 10, probeTimeoutMs: 100, freeTimeoutMs: 100, pollMs: 10 },
    log: { warn() {}, notice() {} },
    onLease: (e) => model?.onLease(e),
    ...more,
  });
}
