/**
 * The a1111 driver's release and verify against the simulated AUTOMATIC1111, honest and lying
 * (Forge's 200 that keeps the memory, a refusal while busy), through the core's hand-over loop.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { type A1111Sim, type A1111SimOptions, startA1111Sim } from "../../src/sim/a1111.ts";
import { A1111Tenant, a1111Driver, cudaReserved, RELEASED_MAX_BYTES } from "../../src/tenants/a1111.ts";
import { handOver } from "../../src/tenants/hand-over.ts";
import { IMAGE_DRIVERS } from "../../src/tenants/registry.ts";
import { testConfig } from "../support/turnstile.ts";
import { waitFor } from "../sim/helpers.ts";

let sim: A1111Sim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

const BOUND = { timeoutMs: 1500, pollMs: 20, callTimeoutMs: 1000 };
const call = () => ({ signal: AbortSignal.timeout(2000) });

async function setup(o: A1111SimOptions = {}): Promise<{ sim: A1111Sim; driver: A1111Tenant }> {
  sim = await startA1111Sim({ jobMs: 60, loadMs: 30, reloadMs: 10, unloadMs: 20, ...o });
  const driver = a1111Driver.create({ base: new URL(sim.url), config: testConfig({ COMFY_URL: sim.url, IMAGE_KIND: "a1111" }), local: true });
  return { sim, driver };
}

async function txt2img(s: A1111Sim, body: Record<string, unknown> = {}): Promise<Response> {
  return fetch(`${s.url}/sdapi/v1/txt2img`, { method: "POST", body: JSON.stringify({ prompt: "x", ...body }) });
}

describe("a1111 driver", () => {
  test("is the registered driver for IMAGE_KIND=a1111", () => {
    expect(IMAGE_DRIVERS.a1111).toBe(a1111Driver);
  });

  test("classify: the generation requests (and every route that loads weights) are the job; the rest passes", async () => {
    const { driver } = await setup();
    expect(driver.classify("POST", "/sdapi/v1/txt2img")).toBe("image-sync");
    expect(driver.classify("POST", "/sdapi/v1/img2img")).toBe("image-sync");
    expect(driver.classify("POST", "/sdapi/v1/options")).toBe("image-sync");
    expect(driver.classify("POST", "/sdapi/v1/reload-checkpoint")).toBe("image-sync");
    expect(driver.classify("GET", "/sdapi/v1/progress")).toBe("pass");
    expect(driver.classify("GET", "/sdapi/v1/options")).toBe("pass");
    expect(driver.classify("POST", "/sdapi/v1/interrupt")).toBe("pass");
  });

  test("hand-over: unload-checkpoint, proven by cuda.reserved falling; the ledger shows the card empty", async () => {
    const { sim, driver } = await setup();
    await txt2img(sim);
    expect((await driver.verify(call())).held).toBe(true);
    expect(await driver.resident(call())).toEqual([{ name: "v1-5-pruned-emaonly.safetensors [6ce0161689]", state: "loaded", vramBytes: expect.any(Number) }]);
    const v = await handOver(driver, BOUND);
    expect(v).toMatchObject({ released: true, tried: ["checkpoint"] });
    expect(v.lied).toBeUndefined();
    expect(sim.gpu.holding("comfy")).toBe(false);
    expect(await driver.resident(call())).toEqual([]);
  });

  test("Forge (#738): unload answered 200 keeps the memory: held to the bound, and the verdict says it lied", async () => {
    const { sim, driver } = await setup({ forge: true });
    await txt2img(sim);
    const t0 = performance.now();
    const v = await handOver(driver, { ...BOUND, timeoutMs: 300 });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
    expect(v.released).toBe(false);
    expect(v.lied).toBe(true);
    expect(v.error).toContain("answered the release as done but still reports memory held");
    expect(v.vramAfter).toBeGreaterThan(2_000_000_000);
    expect(sim.gpu.holding("comfy")).toBe(true);
  });

  test("a refusal while busy is not accepted; the hand-over first waits for the running job (busy), then releases", async () => {
    const { sim, driver } = await setup({ refuseWhileBusy: true, jobMs: 300 });
    const gen = txt2img(sim);
    await waitFor(async () => (await driver.busy(call())) === 1, "job seen as busy");
    // Straight release during the job: refused, and nothing is accepted.
    const r = await driver.release(call());
    expect(r.accepted).toBe(false);
    expect(r.error).toContain("500");
    const v = await handOver(driver, BOUND);
    expect(v.released).toBe(true);
    expect((await gen).status).toBe(200);
    expect(sim.gpu.holding("comfy")).toBe(false);
  });

  test("a generation sent around the turnstile (A1111's own page) counts as busy", async () => {
    const { sim, driver } = await setup({ jobMs: 200 });
    expect(await driver.busy(call())).toBe(0);
    const gen = txt2img(sim);
    await waitFor(async () => (await driver.busy(call())) === 1, "busy");
    await gen;
    expect(await driver.busy(call())).toBe(0);
  });

  test("restore reloads the checkpoint only after our own unload", async () => {
    const { sim, driver } = await setup();
    await driver.restore(call());
    expect(sim.calls.some((c) => c.path === "/sdapi/v1/reload-checkpoint")).toBe(false);
    await txt2img(sim);
    await handOver(driver, BOUND);
    expect(sim.gpu.holding("comfy")).toBe(false);
    await driver.restore(call());
    expect(sim.gpu.holding("comfy")).toBe(true);
    expect(sim.checkpoint.loads).toBe(2);
    await driver.restore(call());
    expect(sim.calls.filter((c) => c.path === "/sdapi/v1/reload-checkpoint")).toHaveLength(1);
  });

  test("verify: a stopped A1111 on this machine holds nothing; an unreadable report counts as held", async () => {
    const { sim, driver } = await setup();
    sim.override("GET", "/sdapi/v1/memory", () => new Response("oops", { status: 500 }));
    expect(await driver.verify(call())).toMatchObject({ held: true, unreadable: expect.stringContaining("/sdapi/v1/memory") });
    await sim.stop();
    expect(await driver.verify(call())).toMatchObject({ held: false, notRunning: expect.any(String) });
  });

  test("cudaReserved: only torch's own reserved figure proves anything; no CUDA (DirectML, CPU) is no proof", () => {
    expect(cudaReserved({ ram: {}, cuda: { error: "unavailable" } })).toContain("cannot be proven");
    expect(cudaReserved({ ram: {}, cuda: { error: "CUDA driver error" } })).toContain("CUDA driver error");
    expect(cudaReserved({ cuda: { reserved: { current: RELEASED_MAX_BYTES } } })).toBe(RELEASED_MAX_BYTES);
    expect(cudaReserved({ cuda: { system: { used: 1 } } })).toBe("/sdapi/v1/memory has no cuda.reserved figure");
  });

  test("an A1111 without CUDA figures (DirectML) is never taken as released: held to the bound, not called a lie", async () => {
    const { sim, driver } = await setup();
    sim.override("GET", "/sdapi/v1/memory", () => Response.json({ ram: { free: 1, used: 1, total: 2 }, cuda: { error: "unavailable" } }));
    const v = await handOver(driver, { ...BOUND, timeoutMs: 150 });
    expect(v.released).toBe(false);
    expect(v.lied).toBeUndefined();
    expect(v.error).toContain("cannot be proven");
  });
});

test("interrupt stops the running generation (it answers early)", async () => {
  const { sim, driver } = await setup({ jobMs: 5000 });
  const gen = txt2img(sim);
  await waitFor(async () => (await driver.busy(call())) === 1, "busy");
  await driver.interrupt(call());
  expect((await gen).status).toBe(200);
  expect(await driver.busy(call())).toBe(0);
});
