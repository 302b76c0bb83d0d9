/**
 * Issue 31: the card's invariant as a memory invariant. The simulated card has a capacity, the
 * simulated ComfyUI's use follows a curve per workflow (extra_data.sim_work_bytes), and the ledger
 * reports every moment the footprints summed past the card; without co-residency any overlap still
 * counts, as today.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { type ComfySim, startComfySim } from "../../src/sim/comfy.ts";
import { SimGpu } from "../../src/sim/gpu.ts";
import { fixtureText, post, waitFor } from "./helpers.ts";

const REQUEST = JSON.parse(fixtureText("comfy-prompt-request.json"));
const GB = 1_000_000_000;

describe("SimGpu: memory invariant", () => {
  test("a hold that grows past the card is recorded as the moment it ran out; shrinking is not", () => {
    let t = 0;
    const gpu = new SimGpu({ vramBytes: 10 * GB, now: () => t });
    const model = gpu.acquire("ollama", "nomic-embed-text", GB);
    const work = gpu.acquire("comfy", "job", 2 * GB);
    t = 5;
    gpu.resize(work, 9 * GB);
    expect(gpu.vramUsed()).toBe(10 * GB);
    expect(gpu.oversubscriptions).toEqual([]);
    t = 6;
    gpu.resize(work, 9.5 * GB);
    expect(gpu.oversubscriptions).toEqual([{ at: 6, tenant: "comfy", detail: "job", usedBytes: 10.5 * GB, totalBytes: 10 * GB }]);
    gpu.resize(work, 3 * GB);
    expect(gpu.oversubscriptions).toHaveLength(1);
    gpu.release(work);
    gpu.resize(work, 20 * GB); // a released hold does not change
    expect(work.bytes).toBe(3 * GB);
    gpu.release(model);
  });

  test("violations: overlap fails without co-residency; with it only the card's capacity counts", () => {
    let t = 0;
    const gpu = new SimGpu({ vramBytes: 10 * GB, now: () => t });
    const c = gpu.acquire("comfy", "job", 6 * GB);
    t = 1;
    const o = gpu.acquire("ollama", "nomic-embed-text", GB);
    t = 2;
    gpu.release(o);
    gpu.release(c);
    expect(gpu.violations({ coexist: true })).toEqual([]);
    expect(gpu.violations()).toEqual(["1-2: ollama nomic-embed-text overlapped comfy job"]);
    const c2 = gpu.acquire("comfy", "job2", 6 * GB);
    const o2 = gpu.acquire("ollama", "big", 3 * GB);
    gpu.resize(c2, 8 * GB);
    expect(gpu.violations({ coexist: true })).toEqual(["2: comfy job2 brought the card to 11000000000 of 10000000000 bytes"]);
    gpu.release(o2);
    gpu.release(c2);
  });
});

describe("simulated ComfyUI: memory follows the workflow's curve", () => {
  const sims: ComfySim[] = [];
  afterEach(async () => {
    await Promise.all(sims.splice(0).map((s) => s.stop()));
  });

  async function vramFree(s: ComfySim): Promise<number> {
    const stats = (await (await fetch(`${s.url}/system_stats`)).json()) as { devices: { vram_free: number }[] };
    return stats.devices[0]!.vram_free;
  }

  test("working memory grows step by step to the prompt's peak, shows in /system_stats, and goes at the job's end", async () => {
    const gpu = new SimGpu({ vramBytes: 24 * GB });
    const s = await startComfySim({ gpu, jobMs: 600, loadMs: 0, modelBytes: 3 * GB, freeDelayMs: 10 });
    sims.push(s);
    const idle = await vramFree(s);
    const id = "00000000-abcd-4000-8000-00000000000a";
    expect((await post(`${s.url}/prompt`, { ...REQUEST, prompt_id: id, extra_data: { sim_work_bytes: 5 * GB } })).status).toBe(200);
    let lowest = idle;
    await waitFor(async () => {
      lowest = Math.min(lowest, await vramFree(s));
      return lowest < idle - 5 * GB;
    }, "free memory to fall by the checkpoint and some working memory", 5000);
    await waitFor(() => s.runningJob() === undefined && gpu.vramUsed("comfy") === 3 * GB, "the job's end", 5000);
    expect(lowest).toBeLessThan(idle - 5 * GB);
    expect(gpu.active("comfy").map((h) => h.bytes)).toEqual([3 * GB]);
    expect(gpu.violations()).toEqual([]);
  });

  test("a curve that does not fit beside an Ollama model fails the job with an OOM, and the ledger shows the moment", async () => {
    const gpu = new SimGpu({ vramBytes: 10 * GB });
    const model = gpu.acquire("ollama", "qwen2.5:3b", 3 * GB);
    const s = await startComfySim({ gpu, jobMs: 100, loadMs: 0, modelBytes: 3 * GB, freeDelayMs: 10, workBytes: 6 * GB });
    sims.push(s);
    const id = "00000000-abcd-4000-8000-00000000000b";
    expect((await post(`${s.url}/prompt`, { ...REQUEST, prompt_id: id })).status).toBe(200);
    await waitFor(async () => (await (await fetch(`${s.url}/history/${id}`)).json())[id] !== undefined, "history", 5000);
    const history = (await (await fetch(`${s.url}/history/${id}`)).json())[id];
    expect(history.status.status_str).toBe("error");
    expect(JSON.stringify(history.status.messages)).toContain("torch.OutOfMemoryError");
    expect(gpu.violations({ coexist: true })).toHaveLength(1);
    expect(gpu.active("comfy").map((h) => h.bytes)).toEqual([3 * GB]);
    gpu.release(model);
  });
});
