/** A Steering with no upstreams and short bounds, for the routes tests. */
import type { GpuLock } from "../../src/lock/index.ts";
import type { StatusModel } from "../../src/status/model.ts";
import { Steering } from "../../src/status/steer.ts";

export function bareSteering(lock: GpuLock, model: StatusModel): Steering {
  return new Steering({
    lock,
    llm: { cutAll: () => 0 },
    jobs: { active: () => [] },
    comfy: undefined,
    ollama: undefined,
    settings: { maxTtlMs: 60_000, unloadTimeoutMs: 1000, unloadPollIntervalMs: 10, probeTimeoutMs: 100, freeTimeoutMs: 100, pollMs: 10 },
    log: { warn() {}, notice() {} },
    onLease: (e) => model.onLease(e),
  });
}
