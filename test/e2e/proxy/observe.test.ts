/**
 * /healthz and /metrics on both listeners, in each GPU state: idle, llm (a stream is running),
 * image (a job holds the GPU), and the counters a job and requests leave behind. Every scrape goes
 * through the strict exposition-format parser, so each one also proves the text is valid.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type Exposition, sampleValue } from "../../support/prom-parse.ts";
import { healthz, postJson, scrape, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  s = await startStack({}, { ollama: { tokenDelayMs: 30, tokens: 8 } });
  await s.t.probed;
});
afterAll(async () => {
  await s.stop();
});

const both = () => [s.t.ollamaUrl, s.t.comfyUrl];

function stateGauge(m: Exposition): Record<string, number | undefined> {
  const out: Record<string, number | undefined> = {};
  for (const st of ["idle", "llm", "image"]) out[st] = sampleValue(m, "gpu_turnstile_state", { state: st });
  return out;
}

async function expectState(state: "idle" | "llm" | "image", inflight: number, pending = false): Promise<void> {
  for (const base of both()) {
    expect({ base, h: await healthz(base) }).toEqual({ base, h: { state, llm_inflight: inflight, image_pending: pending, upstreams: { ollama: "up", comfy: "up" } } });
    const m = await scrape(base);
    expect({ base, states: stateGauge(m) }).toEqual({
      base,
      states: { idle: state === "idle" ? 1 : 0, llm: state === "llm" ? 1 : 0, image: state === "image" ? 1 : 0 },
    });
    expect(sampleValue(m, "gpu_turnstile_llm_inflight")).toBe(inflight);
    expect(sampleValue(m, "gpu_turnstile_image_pending")).toBe(pending ? 1 : 0);
  }
}

describe("/healthz and /metrics on both listeners", () => {
  test("idle at start: every series present, counters at 0", async () => {
    await expectState("idle", 0);
    const m = await scrape(s.t.ollamaUrl);
    for (const outcome of ["completed", "failed", "timeout", "rejected", "no_prompt_id", "upstream_error", "client_gone"]) {
      expect({ outcome, v: sampleValue(m, "gpu_turnstile_image_jobs_total", { outcome }) }).toEqual({ outcome, v: 0 });
    }
    expect(sampleValue(m, "gpu_turnstile_lock_wait_seconds_count", { kind: "llm" })).toBe(0);
    expect(sampleValue(m, "gpu_turnstile_lock_wait_seconds_count", { kind: "image" })).toBe(0);
    expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "wait_timeout" })).toBe(0);
    expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "reject" })).toBe(0);
    expect(sampleValue(m, "gpu_turnstile_build_info", { version: "v0.0.0-test" })).toBe(1);
    expect(m.families.get("gpu_turnstile_lock_wait_seconds")?.type).toBe("histogram");
    expect(m.families.get("gpu_turnstile_unload_seconds")?.type).toBe("histogram");
    const res = await fetch(`${s.t.comfyUrl}/metrics`);
    expect(res.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
    await res.arrayBuffer();
  });

  test("llm during a stream, image during a job (pending with a second queued), and the counters afterwards", async () => {
    // llm: a chat stream is open.
    const res = await postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    expect((await reader.read()).done).toBe(false);
    await expectState("llm", 1);
    while (!(await reader.read()).done) {
      // drain: the slot is released once the whole answer was written
    }
    await s.t.settled();
    await expectState("idle", 0);

    // image: a job holds the GPU…
    await startImageJob(s.t, 400);
    await expectState("image", 0);
    // …and a second one queued behind it shows as pending.
    const second = startImageJob(s.t, 50);
    await until(() => s.t.lock.snapshot().imageWaiting === 1, "second job waiting");
    await expectState("image", 0, true);
    await second;
    await s.t.settled();
    await expectState("idle", 0);

    await (await fetch(`${s.t.ollamaUrl}/api/tags`)).arrayBuffer();
    for (const base of both()) {
      const m = await scrape(base);
      // Each expectation names its series, so a failure says which one.
      const expectSample = (name: string, labels: Record<string, string>, value: number | undefined) =>
        expect({ base, name, labels, value: sampleValue(m, name, labels) }).toEqual({ base, name, labels, value });
      expectSample("gpu_turnstile_image_jobs_total", { outcome: "completed" }, 2);
      expectSample("gpu_turnstile_image_jobs_total", { outcome: "failed" }, 0);
      expectSample("gpu_turnstile_lock_wait_seconds_count", { kind: "llm" }, 1);
      expectSample("gpu_turnstile_lock_wait_seconds_count", { kind: "image" }, 2);
      expectSample("gpu_turnstile_unload_seconds_count", {}, 2);
      expectSample("gpu_turnstile_requests_total", { listener: "ollama", class: "llm", status: "200" }, 1);
      expectSample("gpu_turnstile_requests_total", { listener: "comfy", class: "image", status: "200" }, 2);
      expectSample("gpu_turnstile_requests_total", { listener: "ollama", class: "pass", status: "200" }, 1);
      expectSample("gpu_turnstile_requests_total", { listener: "ollama", class: "llm", status: "503" }, undefined);
      expectSample("gpu_turnstile_busy_total", { reason: "wait_timeout" }, 0);
    }
  });
});
