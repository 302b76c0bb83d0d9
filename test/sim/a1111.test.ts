import { afterEach, describe, expect, test } from "bun:test";
import { type A1111Sim, type A1111SimOptions, startA1111Sim } from "../../src/sim/a1111.ts";
import { post, waitFor } from "./helpers.ts";

let sim: A1111Sim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

async function start(o: A1111SimOptions = {}): Promise<A1111Sim> {
  sim = await startA1111Sim({ jobMs: 60, loadMs: 40, reloadMs: 10, unloadMs: 10, ...o });
  return sim;
}

async function memory(s: A1111Sim) {
  return (await (await fetch(`${s.url}/sdapi/v1/memory`)).json()).cuda;
}

describe("A1111 simulator", () => {
  test("txt2img is synchronous: the answer carries the images when the job ends, the checkpoint loaded on first use", async () => {
    const s = await start();
    expect(s.gpu.holding("comfy")).toBe(false);
    const res = await post(`${s.url}/sdapi/v1/txt2img`, { prompt: "a cat", steps: 4, batch_size: 2 });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.images).toHaveLength(2);
    expect(Buffer.from(body.images[0], "base64").subarray(1, 4).toString()).toBe("PNG");
    expect(JSON.parse(body.info).steps).toBe(4);
    expect(s.gpu.holding("comfy")).toBe(true);
    expect(s.checkpoint.loads).toBe(1);
  });

  test("progress shows the running job; interrupt ends it early", async () => {
    const s = await start({ jobMs: 5000 });
    const gen = post(`${s.url}/sdapi/v1/txt2img`, { prompt: "x" });
    await waitFor(async () => (await (await fetch(`${s.url}/sdapi/v1/progress`)).json()).state.job_count === 1, "job running");
    const p = await (await fetch(`${s.url}/sdapi/v1/progress`)).json();
    expect(Object.keys(p.state)).toEqual(["skipped", "interrupted", "stopping_generation", "job", "job_count", "job_timestamp", "job_no", "sampling_step", "sampling_steps"]);
    expect(p.state.job).toBe("scripts_txt2img");
    expect(await (await post(`${s.url}/sdapi/v1/interrupt`, "")).json()).toEqual({});
    expect((await gen).status).toBe(200);
    expect((await (await fetch(`${s.url}/sdapi/v1/progress`)).json()).state.job_count).toBe(0);
  });

  test("unload-checkpoint frees the card and memory shows it; reload-checkpoint brings it back", async () => {
    const s = await start();
    await post(`${s.url}/sdapi/v1/txt2img`, { prompt: "x" });
    const before = await memory(s);
    expect(Object.keys(before)).toEqual(["system", "active", "allocated", "reserved", "inactive", "events"]);
    expect(before.reserved.current).toBeGreaterThan(2_000_000_000);
    expect((await post(`${s.url}/sdapi/v1/unload-checkpoint`, "")).status).toBe(200);
    const after = await memory(s);
    expect(after.reserved.current).toBeLessThan(64 * 1024 * 1024);
    expect(s.gpu.holding("comfy")).toBe(false);
    await post(`${s.url}/sdapi/v1/reload-checkpoint`, "");
    expect(s.gpu.holding("comfy")).toBe(true);
    expect(s.checkpoint.loads).toBe(2);
  });

  test("cuda.system counts the whole card, other processes included", async () => {
    const s = await start();
    s.gpu.acquire("ollama", "llama3.2", 3_000_000_000);
    const m = await memory(s);
    expect(m.system.used).toBe(3_000_000_000);
    expect(m.reserved.current).toBeLessThan(64 * 1024 * 1024);
  });

  test("forge mode: unload-checkpoint answers 200 {} and the memory stays (Forge #738)", async () => {
    const s = await start({ forge: true });
    await post(`${s.url}/sdapi/v1/txt2img`, { prompt: "x" });
    const res = await post(`${s.url}/sdapi/v1/unload-checkpoint`, "");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({});
    expect((await memory(s)).reserved.current).toBeGreaterThan(2_000_000_000);
    expect(s.gpu.holding("comfy")).toBe(true);
  });

  test("refuseWhileBusy: an unload during a generation is a 500 in api_middleware's shape and frees nothing", async () => {
    const s = await start({ refuseWhileBusy: true, jobMs: 2000 });
    const gen = post(`${s.url}/sdapi/v1/txt2img`, { prompt: "x" });
    await waitFor(() => s.checkpoint.running === 1 && s.checkpoint.place === "gpu", "job running");
    const res = await post(`${s.url}/sdapi/v1/unload-checkpoint`, "");
    expect(res.status).toBe(500);
    expect(Object.keys(await res.json())).toEqual(["error", "detail", "body", "errors"]);
    await post(`${s.url}/sdapi/v1/interrupt`, "");
    await gen;
    expect(s.gpu.holding("comfy")).toBe(true);
  });

  test("bad input: malformed JSON is FastAPI's 422, img2img without images a 404, unknown routes 404", async () => {
    const s = await start();
    expect((await post(`${s.url}/sdapi/v1/txt2img`, "{nope")).status).toBe(422);
    const r = await post(`${s.url}/sdapi/v1/img2img`, { prompt: "x" });
    expect(r.status).toBe(404);
    expect((await r.json()).detail).toBe("Init image not found");
    expect((await fetch(`${s.url}/sdapi/v1/nothing`)).status).toBe(404);
    expect((await fetch(`${s.url}/sdapi/v1/txt2img`)).status).toBe(405);
  });
});
