/**
 * SwarmUI's own page generates over a websocket (GET /API/GenerateText2ImageWS): the socket's
 * life is the job. The turnstile cannot hold the card for a relayed socket, so it refuses that
 * upgrade (403, saying why) rather than let the generation run beside a loaded LLM; the HTTP
 * route (/API/GenerateText2Image) is the way through it.
 */
import { afterEach, expect, test } from "bun:test";
import { SimGpu } from "../../../src/sim/gpu.ts";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/ollama.ts";
import { startSwarmSim, type SwarmSim } from "../../../src/sim/swarmui.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";

let rig: { ollama: OllamaSim; swarm: SwarmSim; t: TestTurnstile } | undefined;
afterEach(async () => {
  const r = rig;
  rig = undefined;
  if (!r) return;
  await r.t.close();
  await Promise.all([r.ollama.stop(), r.swarm.stop()]);
});

test("a generation over GenerateText2ImageWS through the turnstile is refused, never run beside a loaded LLM", async () => {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ gpu, loadMs: 10, unloadMs: 10, tokenDelayMs: 1, tokens: 2 });
  const swarm = await startSwarmSim({ gpu, jobMs: 50, loadMs: 10, unloadMs: 10 });
  const t = startTestTurnstile({ OLLAMA_URL: ollama.url, COMFY_URL: swarm.url, IMAGE_KIND: "swarmui" });
  rig = { ollama, swarm, t };
  await fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) });
  expect(gpu.holding("ollama")).toBe(true);
  // The upgrade as a browser sends it, in SwarmUI's own letter case and another.
  for (const path of ["/API/GenerateText2ImageWS", "/api/generatetext2imagews"]) {
    const res = await fetch(`${t.comfyUrl}${path}`, { headers: { upgrade: "websocket", connection: "Upgrade", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("websocket");
  }
  expect(swarm.calls.filter((c) => c.path.toLowerCase() === "/api/generatetext2imagews")).toEqual([]);
  expect(swarm.generations()).toBe(0);
  expect(gpu.overlaps()).toEqual([]);
});
