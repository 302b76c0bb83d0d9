import { describe, expect, test } from "bun:test";
import {
  IMAGE_JOB_OUTCOMES,
  createTurnstileMetrics,
  type LockSnapshot,
} from "../../src/observe/turnstile-metrics.ts";
import { IDLE_REASONS } from "../../src/http/idle-watch.ts";
import { PROMETHEUS_CONTENT_TYPE } from "../../src/observe/metrics.ts";
import { parseExposition, sampleValue } from "../support/prom-parse.ts";

/** A stand-in with the lock's event shape: a narrower union than the metrics module declares. */
type FakeEvent =
  | { type: "acquired"; kind: "llm" | "image"; waitedMs: number }
  | { type: "transition"; from: string; to: string }
  | { type: "released"; kind: "llm" | "image" };

function fakeLock() {
  const listeners: ((e: FakeEvent) => void)[] = [];
  return {
    onEvent(fn: (e: FakeEvent) => void): () => void {
      listeners.push(fn);
      return () => listeners.splice(listeners.indexOf(fn), 1);
    },
    emit(e: FakeEvent) {
      for (const l of [...listeners]) l(e);
    },
  };
}

function setup(upstreams: ("ollama" | "comfy")[] = ["ollama", "comfy"]) {
  const snap: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false };
  const m = createTurnstileMetrics({ lockSnapshot: () => snap, upstreams, version: "v1.2.3" });
  const scrape = () => parseExposition(m.render());
  return { snap, m, scrape };
}

describe("turnstile metrics", () => {
  test("fresh exposition is valid and shows every expected family", () => {
    const { m, scrape } = setup();
    expect(m.contentType).toBe(PROMETHEUS_CONTENT_TYPE);
    const p = scrape();
    const want: Record<string, string> = {
      gpu_turnstile_state: "gauge",
      gpu_turnstile_llm_inflight: "gauge",
      gpu_turnstile_image_pending: "gauge",
      gpu_turnstile_image_jobs_total: "counter",
      gpu_turnstile_image_sessions_total: "counter",
      gpu_turnstile_image_session_jobs: "histogram",
      gpu_turnstile_lock_wait_seconds: "histogram",
      gpu_turnstile_unload_seconds: "histogram",
      gpu_turnstile_job_seconds: "histogram",
      gpu_turnstile_free_seconds: "histogram",
      gpu_turnstile_vram_reclaimed_bytes: "gauge",
      gpu_turnstile_requests_total: "counter",
      gpu_turnstile_busy_total: "counter",
      gpu_turnstile_llm_aborted_total: "counter",
      gpu_turnstile_upstream_up: "gauge",
      gpu_turnstile_upstream_retries_total: "counter",
      gpu_turnstile_build_info: "gauge",
      gpu_turnstile_llm_no_gpu_total: "counter",
      gpu_turnstile_nested_requests_total: "counter",
      gpu_turnstile_nested_cut_total: "counter",
      gpu_turnstile_ollama_partial_offload_total: "counter",
    };
    for (const [name, type] of Object.entries(want)) expect(`${name} ${p.families.get(name)?.type}`).toBe(`${name} ${type}`);
    expect(p.families.size).toBe(Object.keys(want).length);
    for (const outcome of IMAGE_JOB_OUTCOMES) expect(sampleValue(p, "gpu_turnstile_image_jobs_total", { outcome })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_busy_total", { reason: "wait_timeout" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_busy_total", { reason: "reject" })).toBe(0);
    for (const reason of IDLE_REASONS) expect(sampleValue(p, "gpu_turnstile_llm_aborted_total", { reason })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_image_sessions_total", {})).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_image_session_jobs_count", {})).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_count", { kind: "llm" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_count", { kind: "image" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_upstream_up", { upstream: "ollama" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_upstream_retries_total", { upstream: "comfy" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_build_info", { version: "v1.2.3" })).toBe(1);
    expect(p.families.get("gpu_turnstile_requests_total")?.samples).toEqual([]);
  });

  test("state gauges follow the lock snapshot at every scrape", () => {
    const { snap, scrape } = setup();
    let p = scrape();
    expect(sampleValue(p, "gpu_turnstile_state", { state: "idle" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_state", { state: "llm" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_state", { state: "image" })).toBe(0);

    snap.state = "llm";
    snap.llmInflight = 3;
    snap.imagePending = true;
    p = scrape();
    expect(sampleValue(p, "gpu_turnstile_state", { state: "idle" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_state", { state: "llm" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_llm_inflight")).toBe(3);
    expect(sampleValue(p, "gpu_turnstile_image_pending")).toBe(1);

    snap.state = "image";
    snap.llmInflight = 0;
    p = scrape();
    expect(sampleValue(p, "gpu_turnstile_state", { state: "image" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_state", { state: "llm" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_llm_inflight")).toBe(0);
  });

  test("attachLock observes acquisition waits by kind in seconds and ignores other events", () => {
    const { m, scrape } = setup();
    const lock = fakeLock();
    const off = m.attachLock(lock);
    lock.emit({ type: "acquired", kind: "llm", waitedMs: 0 });
    lock.emit({ type: "acquired", kind: "llm", waitedMs: 2500 });
    lock.emit({ type: "acquired", kind: "image", waitedMs: 120 });
    lock.emit({ type: "transition", from: "idle", to: "llm" });
    lock.emit({ type: "released", kind: "llm" });
    let p = scrape();
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_count", { kind: "llm" })).toBe(2);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_sum", { kind: "llm" })).toBe(2.5);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_bucket", { kind: "llm", le: "0.001" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_bucket", { kind: "llm", le: "1" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_bucket", { kind: "llm", le: "5" })).toBe(2);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_count", { kind: "image" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_sum", { kind: "image" })).toBe(0.12);
    // The returned unsubscribe is the lock's own: after it, nothing more is counted.
    (off as () => void)();
    lock.emit({ type: "acquired", kind: "llm", waitedMs: 1 });
    p = scrape();
    expect(sampleValue(p, "gpu_turnstile_lock_wait_seconds_count", { kind: "llm" })).toBe(2);
  });

  test("lock wait buckets reach from 1 ms to 15 min", () => {
    const { scrape } = setup();
    const les = scrape()
      .families.get("gpu_turnstile_lock_wait_seconds")
      ?.samples.filter((s) => s.name.endsWith("_bucket") && s.labels.kind === "llm")
      .map((s) => s.labels.le);
    expect(les?.[0]).toBe("0.001");
    expect(les?.at(-2)).toBe("900");
    expect(les?.at(-1)).toBe("+Inf");
  });

  test("counters and histograms fed by the handles show up as a user would scrape them", () => {
    const { m, scrape } = setup(["comfy"]);
    m.imageJobs.inc({ outcome: "completed" });
    m.imageJobs.inc({ outcome: "rejected" });
    m.imageJobs.inc({ outcome: "completed" });
    m.requests.inc({ listener: "ollama", class: "llm", status: "200" });
    m.requests.inc({ listener: "ollama", class: "llm", status: "503" });
    m.requests.inc({ listener: "comfy", class: "image", status: "200" });
    m.busy.inc({ reason: "wait_timeout" });
    m.unloadSeconds.observe({}, 1.5);
    m.jobSeconds.observe({}, 42);
    m.freeSeconds.observe({}, 0.3);
    m.vramReclaimedBytes.set({}, 8_589_934_592);
    m.upstreamUp.set({ upstream: "comfy" }, 1);
    m.upstreamRetries.inc({ upstream: "comfy" });
    const p = scrape();
    expect(sampleValue(p, "gpu_turnstile_image_jobs_total", { outcome: "completed" })).toBe(2);
    expect(sampleValue(p, "gpu_turnstile_image_jobs_total", { outcome: "rejected" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_image_jobs_total", { outcome: "timeout" })).toBe(0);
    expect(sampleValue(p, "gpu_turnstile_requests_total", { listener: "ollama", class: "llm", status: "503" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_requests_total", { listener: "comfy", class: "image", status: "200" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_busy_total", { reason: "wait_timeout" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_unload_seconds_sum")).toBe(1.5);
    expect(sampleValue(p, "gpu_turnstile_job_seconds_count")).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_free_seconds_bucket", { le: "0.5" })).toBe(1);
    expect(sampleValue(p, "gpu_turnstile_vram_reclaimed_bytes")).toBe(8_589_934_592);
    expect(sampleValue(p, "gpu_turnstile_upstream_up", { upstream: "comfy" })).toBe(1);
    // A disabled upstream has no series at all.
    expect(sampleValue(p, "gpu_turnstile_upstream_up", { upstream: "ollama" })).toBeUndefined();
    expect(sampleValue(p, "gpu_turnstile_upstream_retries_total", { upstream: "comfy" })).toBe(1);
  });
});
