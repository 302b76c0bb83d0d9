import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { type GpuEvent, type SimPair, startComfySim, startOllamaSim, startSimPair } from "../../src/sim/index.ts";
import { fixtureText, post, waitFor } from "./helpers.ts";

const REQUEST = fixtureText("comfy-prompt-request.json");
const PROMPT_ID = "5b0a1e3c-8d4f-4f7e-9a51-2c6b9e7d3f10";
let pair: SimPair;

beforeEach(async () => {
  pair = await startSimPair({
    ollama: { loadMs: 10, unloadMs: 30, tokenDelayMs: 5 },
    comfy: { jobMs: 120, freeDelayMs: 30 },
  });
});
afterEach(async () => {
  await pair.stop();
});

async function chat(): Promise<string> {
  const res = await post(`${pair.ollama.url}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
  return res.text();
}

async function psEmpty(): Promise<boolean> {
  return (await (await fetch(`${pair.ollama.url}/api/ps`)).json()).models.length === 0;
}

async function historyDone(): Promise<boolean> {
  return (await (await fetch(`${pair.comfy.url}/history/${PROMPT_ID}`)).text()) !== "{}";
}

async function torchReserved(): Promise<number> {
  return (await (await fetch(`${pair.comfy.url}/system_stats`)).json()).devices[0].torch_vram_total;
}

describe("shared GPU ledger across both simulators", () => {
  test("a chat during an image job is reported as an overlap", async () => {
    await post(`${pair.comfy.url}/prompt`, REQUEST);
    await waitFor(() => pair.comfy.runningJob(), "job running");
    await chat();
    const overlaps = pair.gpu.overlaps();
    expect(overlaps.length).toBeGreaterThan(0);
    expect(overlaps[0]).toMatchObject({ ollama: "llama3.2:latest", comfy: PROMPT_ID });
    // Both tenants' memory is counted in ComfyUI's view of free VRAM.
    const stats = (await (await fetch(`${pair.comfy.url}/system_stats`)).json()).devices[0];
    expect(stats.vram_free).toBeLessThan(pair.gpu.vramTotal - stats.torch_vram_total - 3_000_000_000);
  });

  test("ComfyUI's cached models still count after the job: a chat before /free overlaps", async () => {
    await post(`${pair.comfy.url}/prompt`, REQUEST);
    await waitFor(historyDone, "job done");
    await chat();
    expect(pair.gpu.overlaps()).toHaveLength(1);
  });

  test("the turnstile's sequence (unload, poll ps, job, history, free, poll stats) never overlaps", async () => {
    const events: GpuEvent[] = [];
    pair.gpu.on((e) => events.push(e));
    await chat();
    await post(`${pair.ollama.url}/api/generate`, { model: "llama3.2", keep_alive: 0 });
    await waitFor(psEmpty, "ollama unloaded");
    await post(`${pair.comfy.url}/prompt`, REQUEST);
    await waitFor(historyDone, "job done");
    await post(`${pair.comfy.url}/free`, { unload_models: true, free_memory: true });
    await waitFor(async () => (await torchReserved()) === 0, "comfy freed");
    await chat();
    expect(pair.gpu.overlaps()).toEqual([]);
    expect(pair.gpu.ledger.map((h) => h.tenant)).toEqual(["ollama", "comfy", "ollama"]);
    expect(events.map((e) => e.kind)).not.toContain("overlap-start");
    expect(events.map((e) => `${e.tenant}:${e.kind}`)).toEqual(
      expect.arrayContaining(["ollama:unload-start", "ollama:unloaded", "comfy:job-start", "comfy:job-end", "comfy:free-requested", "comfy:freed"]),
    );
  });

  test("stopping both mid-stream and mid-job frees all GPU memory", async () => {
    await post(`${pair.comfy.url}/prompt`, REQUEST);
    await waitFor(() => pair.comfy.runningJob(), "job running");
    const res = await post(`${pair.ollama.url}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    await (res.body as ReadableStream<Uint8Array>).getReader().read();
    await pair.stop();
    expect(pair.gpu.vramUsed()).toBe(0);
  });
});

test("the simulators refuse to listen beyond loopback", async () => {
  await expect(startOllamaSim({ hostname: "0.0.0.0" })).rejects.toThrow(/loopback only/);
  await expect(startComfySim({ hostname: "0.0.0.0" })).rejects.toThrow(/loopback only/);
});

test("stopped simulators leave nothing that keeps the process alive", async () => {
  const script = `
    import { startSimPair } from ${JSON.stringify(new URL("../../src/sim/index.ts", import.meta.url).pathname)};
    const p = await startSimPair({ ollama: { loadMs: 5, unloadMs: 5, tokenDelayMs: 1 }, comfy: { jobMs: 10_000 } });
    await fetch(p.ollama.url + "/api/generate", { method: "POST", body: JSON.stringify({ model: "llama3.2", keep_alive: "1h" }) });
    await fetch(p.comfy.url + "/prompt", { method: "POST", body: JSON.stringify({ prompt: { "9": { class_type: "SaveImage", inputs: {} } } }) });
    await p.stop();
    console.log("stopped");
  `;
  const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
  const killer = setTimeout(() => proc.kill(), 10_000);
  const code = await proc.exited;
  clearTimeout(killer);
  expect(await new Response(proc.stdout).text()).toBe("stopped\n");
  expect(code).toBe(0);
});
