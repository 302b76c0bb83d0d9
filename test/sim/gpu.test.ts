import { describe, expect, test } from "bun:test";
import { type GpuEvent, SimGpu } from "../../src/sim/gpu.ts";

function clockedGpu(vramBytes = 1000): { gpu: SimGpu; at: (t: number) => void } {
  let t = 0;
  return { gpu: new SimGpu({ vramBytes, now: () => t }), at: (v) => (t = v) };
}

describe("SimGpu ledger", () => {
  test("sequential tenants never overlap, even when one starts the instant the other ends", () => {
    const { gpu, at } = clockedGpu();
    at(0);
    const o = gpu.acquire("ollama", "llama3.2:latest", 100);
    at(10);
    gpu.release(o);
    const c = gpu.acquire("comfy", "job-1", 200);
    at(20);
    gpu.release(c);
    expect(gpu.overlaps()).toEqual([]);
    expect(gpu.ledger.map((h) => [h.tenant, h.start, h.end])).toEqual([
      ["ollama", 0, 10],
      ["comfy", 10, 20],
    ]);
  });

  test("reports the exact interval both tenants held memory", () => {
    const { gpu, at } = clockedGpu();
    at(0);
    const c = gpu.acquire("comfy", "job-1", 200);
    at(5);
    const o = gpu.acquire("ollama", "llama3.2:latest", 100);
    at(8);
    gpu.release(c);
    at(12);
    gpu.release(o);
    expect(gpu.overlaps()).toEqual([{ ollama: "llama3.2:latest", comfy: "job-1", from: 5, to: 8 }]);
  });

  test("an overlap still in progress has no end", () => {
    const { gpu, at } = clockedGpu();
    gpu.acquire("ollama", "m", 1);
    at(3);
    gpu.acquire("comfy", "j", 1);
    expect(gpu.overlaps()).toEqual([{ ollama: "m", comfy: "j", from: 3, to: null }]);
  });

  test("tracks VRAM in use and records oversubscription", () => {
    const { gpu, at } = clockedGpu(1000);
    const a = gpu.acquire("ollama", "a", 600);
    expect(gpu.vramUsed()).toBe(600);
    at(4);
    gpu.acquire("comfy", "j", 500);
    expect(gpu.vramUsed()).toBe(1100);
    expect(gpu.vramUsed("comfy")).toBe(500);
    expect(gpu.oversubscriptions).toEqual([{ at: 4, tenant: "comfy", detail: "j", usedBytes: 1100, totalBytes: 1000 }]);
    gpu.release(a);
    gpu.release(a); // idempotent
    expect(gpu.vramUsed()).toBe(500);
  });

  test("listeners see holds, frees, overlap edges and simulator notes", () => {
    const { gpu, at } = clockedGpu();
    const events: GpuEvent[] = [];
    const off = gpu.on((e) => events.push(e));
    const o = gpu.acquire("ollama", "m", 10);
    at(1);
    const c = gpu.acquire("comfy", "j", 10);
    at(2);
    gpu.release(o);
    gpu.note("job-end", "comfy", "j");
    off();
    gpu.release(c);
    expect(events.map((e) => `${e.kind}:${e.tenant}:${e.at}`)).toEqual([
      "hold:ollama:0",
      "hold:comfy:1",
      "overlap-start:comfy:1",
      "free:ollama:2",
      "overlap-end:ollama:2",
      "job-end:comfy:2",
    ]);
  });

  test("a throwing listener does not break the simulation", () => {
    const gpu = new SimGpu();
    gpu.on(() => {
      throw new Error("boom");
    });
    expect(() => gpu.release(gpu.acquire("ollama", "m", 1))).not.toThrow();
  });
});
