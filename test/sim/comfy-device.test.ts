/**
 * The simulated ComfyUI's `device` option (api-facts R1): on `cpu` and `mps` every memory field of
 * /system_stats is the machine's RAM, and it stays the same through a job and a /free.
 */
import { expect, test } from "bun:test";
import { startComfySim } from "../../src/sim/index.ts";
import { fixtureText } from "./helpers.ts";

const stats = async (url: string) => ((await (await fetch(`${url}/system_stats`)).json()) as { devices: Record<string, unknown>[] }).devices;

test.each(["cpu", "mps"] as const)("on %s /system_stats reports the system's RAM, before and after a job and /free", async (device) => {
  const sim = await startComfySim({ device, jobMs: 20 });
  try {
    const before = await stats(sim.url);
    // The shape seen against the real server with --cpu.
    expect(before).toEqual([{ name: device, type: device, index: null, vram_total: 25276157952, vram_free: 23143354368, torch_vram_total: 25276157952, torch_vram_free: 23143354368 }]);
    const body = JSON.parse(fixtureText("comfy-prompt-request.json")) as Record<string, unknown>;
    const res = await fetch(`${sim.url}/prompt`, { method: "POST", body: JSON.stringify(body) });
    expect(res.status).toBe(200);
    const deadline = Date.now() + 5000;
    while (!sim.jobs().every((j) => j.state === "done") && Date.now() < deadline) await Bun.sleep(5);
    expect(await stats(sim.url)).toEqual(before);
    await fetch(`${sim.url}/free`, { method: "POST", body: '{"unload_models": true, "free_memory": true}' });
    expect(await stats(sim.url)).toEqual(before);
    // Its models stay in RAM between jobs: the card is counted held only while a job ran.
    expect(sim.gpu.holding("comfy")).toBe(false);
  } finally {
    await sim.stop();
  }
});
