import { afterEach, describe, expect, test } from "bun:test";
import { startSwarmSim, type SwarmSim, type SwarmSimOptions } from "../../src/sim/swarmui.ts";
import { waitFor } from "./helpers.ts";

let sim: SwarmSim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

async function start(o: SwarmSimOptions = {}): Promise<SwarmSim> {
  sim = await startSwarmSim({ jobMs: 60, loadMs: 40, unloadMs: 10, ...o });
  return sim;
}

async function call(s: SwarmSim, route: string, body: Record<string, unknown> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${s.url}/API/${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

/** A GET through SwarmUI's relay to one ComfyUI backend. */
async function direct(s: SwarmSim, path: string, backend?: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${s.url}/ComfyBackendDirect/${path}`, { headers: backend === undefined ? {} : { "x-swarm-backend-id": backend } });
  return { status: res.status, body: await res.json() };
}

async function session(s: SwarmSim): Promise<string> {
  return (await call(s, "GetNewSession")).body.session_id;
}

const MODEL = "OfficialStableDiffusion/sd_xl_base_1.0";

describe("SwarmUI simulator", () => {
  test("a session is needed on every call; an unknown one is SwarmUI's 401 invalid_session_id", async () => {
    const s = await start();
    expect(await call(s, "GetCurrentStatus")).toEqual({ status: 400, body: { error_id: "basic_api", error: "missing session id" } });
    expect(await call(s, "GetCurrentStatus", { session_id: "0000" })).toEqual({
      status: 401,
      body: { error: "Invalid session ID. You may need to refresh the page.", error_id: "invalid_session_id" },
    });
    const id = await session(s);
    expect(id).toMatch(/^[0-9A-F]{40}$/);
    expect((await call(s, "GetCurrentStatus", { session_id: id })).status).toBe(200);
    s.expireSessions();
    expect((await call(s, "GetCurrentStatus", { session_id: id })).body.error_id).toBe("invalid_session_id");
    // Route names are case-insensitive, a GET is redirected.
    const id2 = await session(s);
    expect((await call(s, "getcurrentstatus", { session_id: id2 })).status).toBe(200);
    const get = await fetch(`${s.url}/API/GetCurrentStatus`, { redirect: "manual" });
    expect(get.status).toBe(302);
  });

  test("GenerateText2Image is synchronous; GetCurrentStatus counts the calling session's gens only", async () => {
    const s = await start({ jobMs: 400 });
    const a = await session(s);
    const b = await session(s);
    const gen = call(s, "GenerateText2Image", { session_id: a, images: 1, prompt: "a cat", model: MODEL });
    await waitFor(async () => (await call(s, "GetCurrentStatus", { session_id: a })).body.status.live_gens === 1, "live gen");
    const st = (await call(s, "GetCurrentStatus", { session_id: a })).body;
    expect(Object.keys(st.status)).toEqual(["waiting_gens", "loading_models", "waiting_backends", "live_gens"]);
    expect((await call(s, "GetCurrentStatus", { session_id: b })).body.status.live_gens).toBe(0);
    const done = await gen;
    expect(done.status).toBe(200);
    expect(done.body.images[0]).toMatch(/^View\/local\/raw\/.*\.png$/);
    expect((await call(s, "ListBackends", { session_id: b, full_data: true })).body["0"].current_model).toBe(MODEL);
  });

  test("FreeBackendMemory answers at once; the memory is back after the backend's job, and ListBackends still names the model (as a real SwarmUI does)", async () => {
    const s = await start({ jobMs: 300 });
    const id = await session(s);
    const gen = call(s, "GenerateText2Image", { session_id: id, prompt: "x", model: MODEL });
    await waitFor(() => s.backends[0]!.running === 1 && s.backends[0]!.place === "gpu", "running");
    expect((await direct(s, "system_stats", "0")).body.devices[0].torch_vram_total).toBeGreaterThan(0);
    expect((await direct(s, "queue", "0")).body.queue_running).toHaveLength(1);
    expect((await call(s, "FreeBackendMemory", { session_id: id, system_ram: false, backend: "all" })).body).toEqual({ result: true, count: 1 });
    expect(s.gpu.holding("comfy")).toBe(true);
    await gen;
    await waitFor(() => !s.gpu.holding("comfy"), "freed");
    // current_model is SwarmUI's bookkeeping, cleared only at backend shutdown (probe 2): only the
    // backend's own /system_stats shows the release.
    expect((await call(s, "ListBackends", { session_id: id, full_data: true })).body["0"].current_model).toBe(MODEL);
    expect((await direct(s, "system_stats", "0")).body.devices[0].torch_vram_total).toBe(0);
  });

  test("/ComfyBackendDirect relays to the backend named by X-Swarm-Backend-ID (else the first); an unknown id is SwarmUI's 400 page", async () => {
    const s = await start({ backends: 2, jobMs: 300 });
    const id = await session(s);
    const gen = call(s, "GenerateText2Image", { session_id: id, prompt: "x", model: MODEL });
    await waitFor(() => s.backends[0]!.running === 1 && s.backends[0]!.place === "gpu", "running");
    expect((await direct(s, "system_stats", "0")).body.devices[0].torch_vram_total).toBeGreaterThan(0);
    expect((await direct(s, "system_stats")).body.devices[0].torch_vram_total).toBeGreaterThan(0);
    expect((await direct(s, "system_stats", "1")).body.devices[0].torch_vram_total).toBe(0);
    const none = await fetch(`${s.url}/ComfyBackendDirect/system_stats`, { headers: { "x-swarm-backend-id": "7" } });
    expect(none.status).toBe(400);
    expect(await none.text()).toContain("No ComfyUI backend available");
    await gen;
  });

  test("a backend on mps reports the system's RAM as its torch memory, which never drops", async () => {
    const s = await start({ device: "mps" });
    const dev = (await direct(s, "system_stats", "0")).body.devices[0];
    expect(dev.type).toBe("mps");
    expect(dev.torch_vram_total).toBeGreaterThan(0);
  });

  test("lying modes: a result:true that frees nothing, and a refusal while busy (200 with an error key)", async () => {
    const liar = await start({ releaseFreesNothing: true });
    const id = await session(liar);
    await call(liar, "GenerateText2Image", { session_id: id, prompt: "x", model: MODEL });
    expect((await call(liar, "FreeBackendMemory", { session_id: id, backend: "all" })).body).toEqual({ result: true, count: 1 });
    expect(liar.gpu.holding("comfy")).toBe(true);
    await liar.stop();
    const busy = await start({ refuseWhileBusy: true, jobMs: 2000 });
    const id2 = await session(busy);
    const gen = call(busy, "GenerateText2Image", { session_id: id2, prompt: "x", model: MODEL });
    await waitFor(() => busy.backends[0]!.running === 1, "running");
    const r = await call(busy, "FreeBackendMemory", { session_id: id2, backend: "all" });
    expect(r.status).toBe(200);
    expect(r.body.error).toContain("generation is running");
    expect((await call(busy, "InterruptAll", { session_id: id2, other_sessions: true })).body).toEqual({ success: true });
    expect((await gen).body.images).toEqual([]);
  });
});

test("GenerateText2ImageWS (SwarmUI's own page): input frame, status frames, the image, a normal close", async () => {
  const s = await start({ jobMs: 50 });
  const id = await session(s);
  const ws = new WebSocket(`${s.url.replace("http", "ws")}/API/GenerateText2ImageWS`);
  const frames: any[] = [];
  const closed = new Promise<number>((resolve) => {
    ws.onclose = (e) => resolve(e.code);
  });
  ws.onmessage = (e) => frames.push(JSON.parse(String(e.data)));
  await new Promise((r) => (ws.onopen = r));
  ws.send(JSON.stringify({ session_id: id, prompt: "x", model: MODEL, images: 1 }));
  expect(await closed).toBe(1000);
  expect(Object.keys(frames[0].status)).toEqual(["waiting_gens", "loading_models", "waiting_backends", "live_gens"]);
  expect(frames.some((f) => typeof f.image === "string")).toBe(true);
  expect(s.gpu.holding("comfy")).toBe(true);
});
