/**
 * A model that lands partly on the CPU after an image→LLM hand-off (issue 19, api-facts S2): the
 * first model that loads after the hand-off is checked in /api/ps once, and a split is a warning
 * naming the model and the split, and a count on /metrics.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { sampleValue } from "../../support/prom-parse.ts";
import { postJson, scrape, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  // A card too small for llama3.2 (3.7 GB): Ollama places what fits and the rest on the CPU.
  s = await startStack({ LOGLEVEL: "warn" }, { vramBytes: 3_000_000_000 });
  await s.t.probed;
});
afterAll(async () => {
  await s.stop();
});

const chat = () => postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false });
const warnings = () => s.t.logLines.filter((l) => l.includes("on CPU: something still held VRAM at the hand-off"));

test("after a hand-off the first model that loads is checked once; a split is a warning and a count", async () => {
  // Before any image job there is no hand-off to blame: no check.
  expect((await chat()).status).toBe(200);
  expect(s.pair.ollama.loadedModels()).toEqual(["llama3.2:latest"]);

  await startImageJob(s.t, 50);
  await s.t.settled();
  expect(s.pair.ollama.loadedModels()).toEqual([]);
  expect((await chat()).status).toBe(200);
  await until(() => warnings().length === 1, "the offload warning");
  expect(warnings()[0]).toContain("llama3.2:latest loaded 80% on GPU (3.0 GB of 3.7 GB), 20% on CPU");
  expect(sampleValue(await scrape(s.t.ollamaUrl), "gpu_turnstile_ollama_partial_offload_total")).toBe(1);

  // Once per hand-off: the next answers say nothing more.
  expect((await chat()).status).toBe(200);
  expect(s.t.lock.state).toBe("idle");
  expect(warnings()).toHaveLength(1);
  expect(s.pair.gpu.overlaps()).toEqual([]);
});
