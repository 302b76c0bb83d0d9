/**
 * The swarmui driver's release and verify against the simulated SwarmUI, honest and lying (a
 * result:true that frees nothing, a refusal while busy), its session handling, and what it sees of
 * work sent around the turnstile, through the core's hand-over loop.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { describeConfig } from "../../src/config/load.ts";
import { startSwarmSim, type SwarmSim, type SwarmSimOptions } from "../../src/sim/swarmui.ts";
import { handOver } from "../../src/tenants/hand-over.ts";
import { IMAGE_DRIVERS } from "../../src/tenants/registry.ts";
import { swarmDriver, type SwarmTenant } from "../../src/tenants/swarmui.ts";
import { testConfig } from "../support/turnstile.ts";
import { waitFor } from "../sim/helpers.ts";

let sim: SwarmSim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

const BOUND = { timeoutMs: 1500, pollMs: 20, callTimeoutMs: 1000 };
const MODEL = "OfficialStableDiffusion/sd_xl_base_1.0";
const call = () => ({ signal: AbortSignal.timeout(2000) });

async function setup(o: SwarmSimOptions = {}, env: Record<string, string> = {}): Promise<{ sim: SwarmSim; driver: SwarmTenant }> {
  sim = await startSwarmSim({ jobMs: 60, loadMs: 30, unloadMs: 20, ...o });
  const driver = swarmDriver.create({ base: new URL(sim.url), config: testConfig({ COMFY_URL: sim.url, IMAGE_KIND: "swarmui", ...env }), local: true });
  return { sim, driver };
}

async function api(s: SwarmSim, route: string, body: Record<string, unknown>): Promise<any> {
  const res = await fetch(`${s.url}/API/${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return res.json();
}

/** A generation from another session: SwarmUI's own page, or a client that bypasses the turnstile. */
async function generateElsewhere(s: SwarmSim, extra: Record<string, unknown> = {}): Promise<any> {
  const { session_id } = await api(s, "GetNewSession", {});
  return api(s, "GenerateText2Image", { session_id, prompt: "x", model: MODEL, ...extra });
}

describe("swarmui driver", () => {
  test("is the registered driver for IMAGE_KIND=swarmui", () => {
    expect(IMAGE_DRIVERS.swarmui).toBe(swarmDriver);
  });

  test("classify: generation and model loads are the job, in any letter case (SwarmUI lowercases routes)", async () => {
    const { driver } = await setup();
    expect(driver.classify("POST", "/API/GenerateText2Image")).toBe("image-sync");
    expect(driver.classify("POST", "/api/generatetext2image")).toBe("image-sync");
    expect(driver.classify("POST", "/API/SelectModel")).toBe("image-sync");
    expect(driver.classify("GET", "/API/GenerateText2ImageWS")).toBe("image-sync");
    for (const ws of ["/API/GridGenRun", "/API/ImageBatchRun", "/API/DoLoraExtractionWS", "/API/DoTensorRTCreateWS", "/API/SelectModelWS"]) {
      expect(driver.classify("GET", ws)).toBe("image-sync");
    }
    expect(driver.classify("GET", "/API/GenerateText2Image")).toBe("pass");
    expect(driver.classify("POST", "/API/GetNewSession")).toBe("pass");
    expect(driver.classify("POST", "/API/ListModels")).toBe("pass");
    expect(driver.classify("GET", "/View/local/raw/x.png")).toBe("pass");
  });

  test("hand-over: FreeBackendMemory for all backends, proven by each backend's own /system_stats read through /ComfyBackendDirect", async () => {
    const { sim, driver } = await setup({ backends: 2 });
    await Promise.all([generateElsewhere(sim), generateElsewhere(sim)]);
    const before = await driver.verify(call());
    expect(before.held).toBe(true);
    expect(before.residents).toHaveLength(2);
    const v = await handOver(driver, BOUND);
    expect(v).toMatchObject({ released: true, tried: ["all"] });
    expect(sim.gpu.holding("comfy")).toBe(false);
    const free = sim.calls.find((c) => c.path === "/API/FreeBackendMemory");
    expect(JSON.parse(free!.bodyText)).toMatchObject({ system_ram: false, backend: "all", session_id: driver.session });
    // Each backend read on its own, chosen by the X-Swarm-Backend-ID header (ComfyUIRedirectHelper.cs).
    const read = new Set(sim.calls.filter((c) => c.path === "/ComfyBackendDirect/system_stats").map((c) => c.headers["x-swarm-backend-id"]));
    expect([...read].sort()).toEqual(["0", "1"]);
  });

  test("a backend whose memory cannot be read holds the card to the bound, saying why: never taken as released", async () => {
    const { sim, driver } = await setup();
    await generateElsewhere(sim);
    sim.override("GET", "/ComfyBackendDirect/system_stats", () => new Response("<span>No ComfyUI backend available, loading failed.</span>", { status: 400, headers: { "content-type": "text/html" } }));
    const h = await driver.verify(call());
    expect(h).toMatchObject({ held: true, unreadable: expect.stringContaining("/ComfyBackendDirect/system_stats of backend 0: HTTP 400") });
    const v = await handOver(driver, { ...BOUND, timeoutMs: 250 });
    expect(v.released).toBe(false);
    expect(sim.gpu.holding("comfy")).toBe(false); // the memory came back, but nothing proved it
  });

  test("a SwarmUI user without comfy_direct_calls: unreadable, naming the permission", async () => {
    const { sim, driver } = await setup();
    sim.override("GET", "/ComfyBackendDirect/system_stats", () => new Response('<span class="comfy-failed-to-load">Permission denied.</span>', { status: 401, headers: { "content-type": "text/html" } }));
    const h = await driver.verify(call());
    expect(h.held).toBe(true);
    expect(h.unreadable).toContain("comfy_direct_calls");
  });

  test("a SwarmUI with no running ComfyUI backend to read is unreadable, not released", async () => {
    const { sim, driver } = await setup();
    sim.override("POST", "/API/ListBackends", () => Response.json({ "0": { type: "comfyui_selfstart", status: "errored", id: 0, enabled: true, current_model: null } }));
    expect(await driver.verify(call())).toMatchObject({ held: true, unreadable: expect.stringContaining("no running ComfyUI backend") });
  });

  test("a backend on cpu/mps (the system's memory, never drops): released once the free was answered and its ComfyUI runs nothing", async () => {
    const { sim, driver } = await setup({ device: "mps", jobMs: 300 });
    const gen = generateElsewhere(sim);
    await waitFor(() => sim.backends[0]!.running === 1, "running");
    // Before any free: held, whatever the figure says.
    expect((await driver.verify(call())).held).toBe(true);
    const v = await handOver(driver, BOUND);
    expect(v.released).toBe(true);
    // Not before the other session's generation ended.
    expect(sim.backends[0]!.running).toBe(0);
    expect((await gen).images).toHaveLength(1);
  });

  test("a FreeBackendMemory that answers result:true and frees nothing: held to the bound, and it lied", async () => {
    const { sim, driver } = await setup({ releaseFreesNothing: true });
    await generateElsewhere(sim);
    const v = await handOver(driver, { ...BOUND, timeoutMs: 250 });
    expect(v.released).toBe(false);
    expect(v.lied).toBe(true);
    expect(sim.gpu.holding("comfy")).toBe(true);
  });

  // Probe 2, defect not fixed: SwarmUI never clears a backend's `current_model` when it frees its
  // memory. BackendAPI.cs FreeBackendMemory calls each backend's FreeMemory, and the ComfyUI
  // backend's (ComfyUIAPIAbstractBackend.cs) only POSTs ComfyUI's /free; CurrentModelName is
  // SwarmUI's own bookkeeping, set by a load and cleared only when the backend shuts down
  // (AbstractT2IBackend.DoShutdownNow). So against a real SwarmUI, once any model was used,
  // ListBackends names it forever: verify never proves a release, every image turn holds the card
  // for the whole FREE_TIMEOUT and ends "lied" (warned, release_kept_memory in the status). The
  // simulator clears current_model on /free, so the suite never sees it. A fix needs a memory
  // reading: each backend's own ComfyUI /system_stats (SwarmUI relays it at
  // /ComfyBackendDirect/system_stats, one backend at a time with the X-Swarm-Backend-ID header),
  // and the simulator keeping current_model as SwarmUI does.
  test("a real SwarmUI keeps naming the model after FreeBackendMemory freed it: the release is still proven", async () => {
    const { sim, driver } = await setup();
    await generateElsewhere(sim);
    // SwarmUI's answer after the free, as its source has it: the model still named.
    sim.override("POST", "/API/ListBackends", () => Response.json({ "0": { type: "comfyui_selfstart", status: "running", id: 0, enabled: true, current_model: MODEL } }));
    const v = await handOver(driver, { ...BOUND, timeoutMs: 500 });
    expect(sim.gpu.holding("comfy")).toBe(false); // the memory is back on the card
    expect(v.released).toBe(true);
    expect(v.lied).toBeUndefined();
  });

  test("a refusal while busy (a 200 with an error key) is not accepted; once the job ends the release goes through", async () => {
    const { sim, driver } = await setup({ refuseWhileBusy: true, jobMs: 300 });
    const gen = generateElsewhere(sim);
    await waitFor(() => sim.backends[0]!.running === 1, "running");
    const r = await driver.release(call());
    expect(r.accepted).toBe(false);
    expect(r.error).toContain("generation is running");
    const v = await handOver(driver, BOUND);
    expect(v.released).toBe(true);
    expect((await gen).images).toHaveLength(1);
    expect(sim.gpu.holding("comfy")).toBe(false);
  });

  test("work from another session is invisible to GetCurrentStatus but not to verify: the hand-over waits for its memory", async () => {
    const { sim, driver } = await setup({ jobMs: 300 });
    const gen = generateElsewhere(sim);
    await waitFor(() => sim.backends[0]!.running === 1, "running");
    expect(await driver.busy(call())).toBe(0);
    const v = await handOver(driver, BOUND);
    expect(v.released).toBe(true);
    // The memory came back only after the other session's generation ended.
    const hold = sim.gpu.ledger.find((h) => h.tenant === "comfy")!;
    await gen;
    expect(hold.end).not.toBeNull();
    expect(sim.generations()).toBe(1);
  });

  test("session: obtained automatically, renewed once when SwarmUI forgot it", async () => {
    const { sim, driver } = await setup();
    await driver.verify(call());
    const first = driver.session;
    expect(first).toMatch(/^[0-9A-F]{40}$/);
    sim.expireSessions();
    expect((await driver.verify(call())).unreadable).toBeUndefined();
    expect(driver.session).not.toBe(first);
    expect(sim.calls.filter((c) => c.path === "/API/GetNewSession")).toHaveLength(2);
  });

  test("session and token from the settings: SWARMUI_SESSION used as given, SWARMUI_TOKEN as the swarm_user_token cookie", async () => {
    sim = await startSwarmSim({});
    const { session_id } = await api(sim, "GetNewSession", {});
    sim.clearCalls();
    const driver = swarmDriver.create({
      base: new URL(sim.url),
      config: testConfig({ COMFY_URL: sim.url, IMAGE_KIND: "swarmui", SWARMUI_SESSION: session_id, SWARMUI_TOKEN: "tok-123456789" }),
      local: true,
    });
    expect(await driver.probe(2000)).toBe("running");
    expect(sim.calls.map((c) => c.path)).toEqual(["/API/GetCurrentStatus"]);
    expect(JSON.parse(sim.calls[0]!.bodyText).session_id).toBe(session_id);
    expect(sim.calls[0]!.headers.cookie).toBe("swarm_user_token=tok-123456789");
  });

  test("verify: an unreadable ListBackends counts as held; a stopped SwarmUI on this machine holds nothing", async () => {
    const { sim, driver } = await setup();
    sim.override("POST", "/API/ListBackends", () => Response.json({ error: "You lack permissions for this route.", error_id: "bad_permissions" }, { status: 400 }));
    expect(await driver.verify(call())).toMatchObject({ held: true, unreadable: expect.stringContaining("ListBackends") });
    await sim.stop();
    // A pooled connection the stop cut may answer one reset first (a POST is never resent); the next reading is refused.
    const gone = await waitFor(async () => {
      const h = await driver.verify(call());
      return h.notRunning ? h : undefined;
    }, "refused");
    expect(gone.held).toBe(false);
  });

  test("the session and the token are credentials: masked wherever the config is shown", () => {
    const lines = describeConfig(testConfig({ COMFY_URL: "http://127.0.0.1:7801", IMAGE_KIND: "swarmui", SWARMUI_SESSION: "9D3534E30DA38499DE782BC38211976A58555AA6", SWARMUI_TOKEN: "secret-token-1" }));
    expect(lines).toContain("SWARMUI_SESSION=***");
    expect(lines).toContain("SWARMUI_TOKEN=***");
    expect(lines.join("\n")).not.toContain("9D3534E3");
  });
});

test("interrupt stops generations of other sessions too (InterruptAll other_sessions)", async () => {
  const { sim, driver } = await setup({ jobMs: 5000 });
  const gen = generateElsewhere(sim);
  await waitFor(() => sim.backends[0]!.running === 1, "running");
  await driver.interrupt(call());
  expect((await gen).images).toEqual([]);
});

test("a SwarmUI that gives no session says what to set", async () => {
  const { sim, driver } = await setup();
  sim.override("POST", "/API/GetNewSession", () => Response.json({ error_id: "no_login", error: "Login required" }, { status: 401 }));
  const h = await driver.verify(call());
  expect(h.held).toBe(true);
  expect(h.unreadable).toContain("GetNewSession answered 401 without a session_id (a SwarmUI that requires accounts needs SWARMUI_TOKEN)");
});
