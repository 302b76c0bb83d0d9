/**
 * A consumer whose URL is empty is not there at all: no listener, no probe, no part in the lock.
 */
import { describe, expect, test } from "bun:test";
import { startComfySim, startOllamaSim } from "../../../src/sim/index.ts";
import { sampleValue } from "../../support/prom-parse.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { FAST_SIMS, health, postJson, scrape, startImageJob } from "./helpers.ts";

describe("a disabled consumer", () => {
  test("only OLLAMA_URL: no ComfyUI listener, and LLM requests never wait", async () => {
    const ollama = await startOllamaSim(FAST_SIMS.ollama);
    const t = startTestTurnstile({ OLLAMA_URL: ollama.url });
    try {
      expect(t.listener("comfy")).toBeUndefined();
      expect(t.listeners.map((l) => l.name)).toEqual(["ollama"]);
      const chats = await Promise.all(
        [1, 2, 3].map(() => postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false })),
      );
      expect(chats.map((r) => r.status)).toEqual([200, 200, 200]);
      await Promise.all(chats.map((r) => r.arrayBuffer()));
      expect(await health(t.ollamaUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
      const m = await scrape(t.ollamaUrl);
      expect(sampleValue(m, "gpu_turnstile_lock_wait_seconds_count", { kind: "llm" })).toBe(3);
      expect(sampleValue(m, "gpu_turnstile_upstream_up", { upstream: "comfy" })).toBeUndefined();
      expect(sampleValue(m, "gpu_turnstile_upstream_retries_total", { upstream: "ollama" })).toBe(0);
    } finally {
      await t.close();
      await ollama.stop();
    }
  });

  test("only COMFY_URL: no Ollama listener, and an image job makes no call to any Ollama", async () => {
    const comfy = await startComfySim(FAST_SIMS.comfy);
    const t = startTestTurnstile({ COMFY_URL: comfy.url });
    try {
      expect(t.listener("ollama")).toBeUndefined();
      expect(t.listeners.map((l) => l.name)).toEqual(["comfy"]);
      await t.probed;
      await startImageJob(t, 100);
      await t.settled();
      expect(comfy.calls.map((c) => c.path)).toContain("/free");
      // No unload phase at all: nothing was asked of an Ollama, nothing was logged about one.
      expect(t.logLines.filter((l) => /ollama/i.test(l))).toEqual([]);
      expect(t.logLines.some((l) => l.includes("completed; GPU released"))).toBe(true);
      const m = await scrape(t.comfyUrl);
      expect(sampleValue(m, "gpu_turnstile_image_jobs_total", { outcome: "completed" })).toBe(1);
      expect(sampleValue(m, "gpu_turnstile_unload_seconds_count")).toBe(0);
      expect(sampleValue(m, "gpu_turnstile_upstream_up", { upstream: "ollama" })).toBeUndefined();
    } finally {
      await t.close();
      await comfy.stop();
    }
  });
});
