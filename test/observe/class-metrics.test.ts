import { expect, test } from "bun:test";
import { createClassMetrics } from "../../src/observe/class-metrics.ts";
import { Registry } from "../../src/observe/metrics.ts";
import { parseExposition, sampleValue } from "../support/prom-parse.ts";

test("waits, jobs served and quota refusals by client class; every class from the start, nothing else ever", () => {
  const registry = new Registry();
  const m = createClassMetrics(registry, ["interactive", "normal", "batch"]);
  m.onJob({ phase: "acquired", jobId: 1, waitedMs: 1500, joined: false, cls: "batch" });
  m.onJob({ phase: "acquired", jobId: 2, waitedMs: 200, joined: true, cls: "interactive" });
  m.onJob({ phase: "acquired", jobId: 3, waitedMs: 200, joined: true });
  m.onJob({ phase: "acquired", jobId: 4, waitedMs: 200, joined: true, cls: "made-up" });
  m.onQuotaRefused("batch", "image");
  m.onQuotaRefused("batch", "image");
  m.onQuotaRefused("interactive", "llm");
  const p = parseExposition(registry.render());
  expect(sampleValue(p, "gpu_turnstile_image_jobs_by_class_total", { client_class: "batch" })).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_image_jobs_by_class_total", { client_class: "interactive" })).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_image_jobs_by_class_total", { client_class: "normal" })).toBe(0);
  expect(sampleValue(p, "gpu_turnstile_image_wait_by_class_seconds_sum", { client_class: "batch" })).toBe(1.5);
  expect(sampleValue(p, "gpu_turnstile_quota_refusals_total", { client_class: "batch", kind: "image" })).toBe(2);
  expect(sampleValue(p, "gpu_turnstile_quota_refusals_total", { client_class: "interactive", kind: "llm" })).toBe(1);
  expect(sampleValue(p, "gpu_turnstile_quota_refusals_total", { client_class: "normal", kind: "image" })).toBe(0);
  expect(registry.render()).not.toContain("made-up");
});
