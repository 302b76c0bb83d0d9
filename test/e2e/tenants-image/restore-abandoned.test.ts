/**
 * A1111's checkpoint is reloaded (restore) when an image session opens after the turnstile
 * unloaded it. If that opening job's client goes while the reload runs, the job is never sent,
 * and the session must still release what the reload put on the card; otherwise the next LLM
 * turn loads beside it (found by the chaos run: the checkpoint stayed on the card for good).
 */
import { afterEach, expect, test } from "bun:test";
import { type A1111Sim, startA1111Sim } from "../../../src/sim/a1111.ts";
import { SimGpu } from "../../../src/sim/gpu.ts";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/ollama.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";

let rig: { ollama: OllamaSim; a1111: A1111Sim; t: TestTurnstile } | undefined;
afterEach(async () => {
  const r = rig;
  rig = undefined;
  if (!r) return;
  await r.t.close();
  await Promise.all([r.ollama.stop(), r.a1111.stop()]);
});

const chat = (t: TestTurnstile) =>
  fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) });
const txt2img = (t: TestTurnstile, signal?: AbortSignal) => fetch(`${t.comfyUrl}/sdapi/v1/txt2img`, { method: "POST", body: JSON.stringify({ prompt: "x", steps: 2 }), signal });

test("a client that leaves while the checkpoint is restored leaves nothing on the card", async () => {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ gpu, loadMs: 5, unloadMs: 5, tokenDelayMs: 1, tokens: 2 });
  const a1111 = await startA1111Sim({ gpu, jobMs: 20, loadMs: 10, reloadMs: 50, unloadMs: 5 });
  const t = startTestTurnstile({ OLLAMA_URL: ollama.url, COMFY_URL: a1111.url, IMAGE_KIND: "a1111" });
  rig = { ollama, a1111, t };
  // One image turn (the turnstile unloads the checkpoint after it), then an LLM turn.
  expect((await txt2img(t)).status).toBe(200);
  expect((await chat(t)).status).toBe(200);
  await t.settled();
  expect(gpu.holding("comfy")).toBe(false);
  // The next image job's client gives up while the checkpoint is being reloaded.
  const client = new AbortController();
  a1111.override("POST", "/sdapi/v1/reload-checkpoint", () => {
    client.abort();
    return undefined;
  });
  await txt2img(t, client.signal).catch(() => undefined);
  await t.settled();
  expect(a1111.generations()).toBe(1);
  expect((await chat(t)).status).toBe(200);
  await t.settled();
  expect(gpu.overlaps()).toEqual([]);
});
