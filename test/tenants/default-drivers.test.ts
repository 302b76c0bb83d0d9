/**
 * The contract of the two default drivers against their simulators: the release is proven from the
 * tenant's own report (Ollama's /api/ps, ComfyUI's /system_stats), including when the tenant
 * answers the release with 200 and keeps the memory.
 */
import { afterEach, expect, test } from "bun:test";
import { SimGpu, startComfySim, startOllamaSim, type ComfySim, type OllamaSim } from "../../src/sim/index.ts";
import { handOver } from "../../src/tenants/hand-over.ts";
import { ComfyTenant } from "../../src/tenants/comfyui.ts";
import { OllamaTenant } from "../../src/tenants/ollama.ts";
import { promptBody, newPromptId } from "../e2e/jobs/helpers.ts";
import { until } from "../support/turnstile.ts";

let ollama: OllamaSim | undefined;
let comfy: ComfySim | undefined;
afterEach(async () => {
  await ollama?.stop();
  await comfy?.stop();
  ollama = comfy = undefined;
});

const o = () => ({ signal: AbortSignal.timeout(2000) });
const BOUND = { timeoutMs: 1000, pollMs: 10, callTimeoutMs: 500 };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

test("Ollama: every loaded model unloaded, proven by /api/ps; a 200 that unloads nothing is not believed", async () => {
  const gpu = new SimGpu();
  ollama = await startOllamaSim({ gpu, loadMs: 5, unloadMs: 20 });
  const t = new OllamaTenant(new URL(ollama.url), 1000, true);
  expect(t.classify("POST", "/api/chat")).toBe("llm");
  expect(t.classify("GET", "/api/tags")).toBe("pass");
  expect(await t.probe(1000)).toBeString();
  await (await fetch(`${ollama.url}/api/generate`, { method: "POST", body: JSON.stringify({ model: "llama3.2:latest", prompt: "" }) })).text();
  expect((await t.resident(o())).map((r) => r.name)).toEqual(["llama3.2:latest"]);

  // Lying: the unload is answered as done and the model stays.
  const off = ollama.override("POST", "/api/generate", () => json(200, { done: true, done_reason: "unload" }));
  expect((await t.release(o())).accepted).toBe(true);
  expect(await t.verify(o())).toMatchObject({ held: true });
  const kept = await handOver(t, { ...BOUND, timeoutMs: 200 });
  expect(kept.released).toBe(false);
  expect(gpu.holding("ollama")).toBe(true);
  off();

  const r = await handOver(t, BOUND);
  expect(r).toMatchObject({ released: true, tried: ["llama3.2:latest"] });
  expect(gpu.holding("ollama")).toBe(false);
  expect(await t.verify(o())).toMatchObject({ held: false });
});

test("ComfyUI: /free proven by /system_stats; a /free that frees nothing is a lie", async () => {
  const gpu = new SimGpu();
  comfy = await startComfySim({ gpu, jobMs: 20, freeDelayMs: 20 });
  const t = new ComfyTenant(new URL(comfy.url), 1000);
  expect(t.classify("POST", "/prompt")).toBe("image-async");
  expect(t.classify("GET", "/queue")).toBe("pass");
  const ran = async () => {
    await (await fetch(`${comfy!.url}/prompt`, { method: "POST", body: promptBody(newPromptId()) })).text();
    await until(async () => (await t.client.work()).running.length + (await t.client.work()).pending.length === 0 && gpu.holding("comfy"), "the job ran and left its checkpoint loaded");
  };
  await ran();
  expect((await t.resident(o())).length).toBe(1);

  const off = comfy.override("POST", "/free", () => json(200, {}));
  const lied = await handOver(t, { ...BOUND, timeoutMs: 200 });
  expect(lied).toMatchObject({ released: false, lied: true });
  expect(gpu.holding("comfy")).toBe(true);
  off();

  const r = await handOver(t, BOUND);
  expect(r.released).toBe(true);
  expect(gpu.holding("comfy")).toBe(false);
});
