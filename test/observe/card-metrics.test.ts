import { expect, test } from "bun:test";
import type { GpuState, LockEvent } from "../../src/lock/index.ts";
import { createCardMetrics } from "../../src/observe/card-metrics.ts";
import { Registry } from "../../src/observe/metrics.ts";
import type { LeaseView } from "../../src/status/steer.ts";
import { parseExposition, sampleValue } from "../support/prom-parse.ts";

const lease: LeaseView = { id: "l-1", holder: "game", by: "127.0.0.1", since: 0, expires_at: 1 };
const to = (from: GpuState, state: GpuState): LockEvent => ({
  type: "transition",
  from,
  to: state,
  at: 0,
  snapshot: { state, llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 },
});

test("leases granted and ended by reason, force-releases, waiters by class, seconds in each state", () => {
  let clock = 0;
  let waiting = { llm: 0, image: 0, lease: 0 };
  const registry = new Registry();
  const m = createCardMetrics(registry, { waiting: () => waiting, now: () => clock });
  const read = () => {
    m.flush();
    return parseExposition(registry.render());
  };

  clock = 2000;
  m.onLock(to("idle", "llm"));
  clock = 2500;
  waiting = { llm: 2, image: 1, lease: 0 };
  let p = read();
  expect(sampleValue(p, "gpu_turnstile_state_seconds_total", { state: "idle" })).toBe(2);
  expect(sampleValue(p, "gpu_turnstile_state_seconds_total", { state: "llm" })).toBe(0.5);
  expect(sampleValue(p, "gpu_turnstile_waiting", { class: "llm" })).toBe(2);
  expect(sampleValue(p, "gpu_turnstile_waiting", { class: "image" })).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_waiting", { class: "lease" })).toBe(0);

  m.onLock(to("llm", "lease"));
  m.onLease({ event: "grant", lease });
  clock = 4500;
  m.onForceRelease();
  m.onLease({ event: "end", lease, reason: "revoked", by: "127.0.0.1" });
  m.onLock(to("lease", "idle"));
  waiting = { llm: 0, image: 0, lease: 0 };
  p = read();
  expect(sampleValue(p, "gpu_turnstile_state_seconds_total", { state: "lease" })).toBe(2);
  expect(sampleValue(p, "gpu_turnstile_leases_granted_total")).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_leases_ended_total", { reason: "revoked" })).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_leases_ended_total", { reason: "expired" })).toBe(0);
  expect(sampleValue(p, "gpu_turnstile_force_releases_total")).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_waiting", { class: "image" })).toBe(0);
});
