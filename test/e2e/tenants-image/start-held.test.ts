/**
 * A1111 loads its default checkpoint when it starts, and SwarmUI's backends keep the model of their
 * last picture: when the turnstile starts, the image side may already hold the card. The first LLM
 * turn must not load beside it: the image side is handed over (released, proven) first.
 */
import { afterEach, expect, test } from "bun:test";
import { SimGpu } from "../../../src/sim/gpu.ts";
import { IMAGE_KIND_SIMS, type ImageSimHandle } from "../../../src/sim/image-kinds.ts";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/ollama.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";

let rig: { ollama: OllamaSim; image: ImageSimHandle; t: TestTurnstile } | undefined;
afterEach(async () => {
  const r = rig;
  rig = undefined;
  if (!r) return;
  await r.t.close();
  await Promise.all([r.ollama.stop(), r.image.stop()]);
});

for (const kind of ["a1111", "swarmui"] as const) {
  test(`IMAGE_KIND=${kind}: memory the image side held before the turnstile started is released before the first chat loads`, async () => {
    const gpu = new SimGpu();
    const ollama = await startOllamaSim({ gpu, loadMs: 5, unloadMs: 5, tokenDelayMs: 1, tokens: 2 });
    const image = await IMAGE_KIND_SIMS[kind].start(gpu, { jobMs: 20, loadMs: 10, unloadMs: 5 });
    // Generated before the turnstile existed (or loaded at the program's start).
    expect((await IMAGE_KIND_SIMS[kind].generate(image.url)).status).toBe(200);
    expect(gpu.holding("comfy")).toBe(true);
    const t = startTestTurnstile({ OLLAMA_URL: ollama.url, COMFY_URL: image.url, IMAGE_KIND: kind });
    rig = { ollama, image, t };
    await t.probed;
    const res = await fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) });
    expect(res.status).toBe(200);
    await t.settled();
    expect(gpu.overlaps()).toEqual([]);
  });
}
