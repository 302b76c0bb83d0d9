import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { type ComfySim, type ComfySimOptions, startComfySim } from "../../src/sim/comfy.ts";
import { dumpsPy, isDict, parsePy, type PyDict, type PyValue } from "../../src/sim/pyjson.ts";
import { expectSameShape, fixture, fixtureText, post, waitFor } from "./helpers.ts";

const JSON_CT = "application/json; charset=utf-8";
const PROMPT_ID = "5b0a1e3c-8d4f-4f7e-9a51-2c6b9e7d3f10";
const CLIENT_ID = "a3f1c2d4e5b64789a0b1c2d3e4f5a6b7";
const REQUEST = fixtureText("comfy-prompt-request.json");

let sim: ComfySim;
const extra: ComfySim[] = [];

async function start(opts: ComfySimOptions = {}): Promise<ComfySim> {
  const s = await startComfySim({ jobMs: 40, freeDelayMs: 30, ...opts });
  extra.push(s);
  return s;
}

beforeEach(async () => {
  sim = await startComfySim({ jobMs: 40, freeDelayMs: 30 });
});
afterEach(async () => {
  await sim.stop();
  await Promise.all(extra.splice(0).map((s) => s.stop()));
});

/** Body text checked to be Python json.dumps output, parsed with order and floats kept. */
async function pyBody(res: Response): Promise<PyValue> {
  expect(res.headers.get("content-type")).toBe(JSON_CT);
  const text = await res.text();
  const v = parsePy(text);
  expect(dumpsPy(v)).toBe(text);
  return v;
}

function promptBody(changes: Record<string, unknown> = {}): string {
  return JSON.stringify({ ...JSON.parse(REQUEST), ...changes });
}

async function history(s: ComfySim, id: string): Promise<PyDict> {
  return (await pyBody(await fetch(`${s.url}/history/${id}`))) as PyDict;
}

async function waitHistory(s: ComfySim, id: string): Promise<PyDict> {
  return waitFor(async () => {
    const h = await history(s, id);
    return h.size > 0 ? h : undefined;
  }, `history of ${id}`);
}

async function torch(s: ComfySim): Promise<{ torch_vram_total: number; vram_free: number }> {
  const stats = JSON.parse(await (await fetch(`${s.url}/system_stats`)).text());
  return stats.devices[0];
}

describe("simulated ComfyUI: POST /prompt (C1)", () => {
  test("accepts the fixture request with its prompt_id and answers the fixture", async () => {
    const res = await post(`${sim.url}/prompt`, REQUEST);
    expect(res.status).toBe(200);
    const body = await pyBody(res);
    expect(dumpsPy(body)).toBe(dumpsPy(fixture("comfy-prompt-200.json")));
  });

  test("generates a uuid4 prompt_id when absent and counts numbers from 0", async () => {
    const a = JSON.parse(await (await post(`${sim.url}/prompt`, promptBody({ prompt_id: undefined }))).text());
    const b = JSON.parse(await (await post(`${sim.url}/api/prompt`, promptBody({ prompt_id: undefined }))).text());
    expect(a.prompt_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect([a.number, b.number]).toEqual([0, 1]);
    expect(a.prompt_id).not.toBe(b.prompt_id);
  });

  test("validation errors match the fixtures exactly", async () => {
    const cases: [unknown, string][] = [
      [{ client_id: CLIENT_ID }, "comfy-prompt-400-no-prompt.json"],
      [{ prompt: { ...JSON.parse(REQUEST).prompt, "10": { class_type: "FooBarNode", inputs: {} } } }, "comfy-prompt-400-unknown-node.json"],
      [{ prompt: { "5": { class_type: "EmptyLatentImage", inputs: { width: 512, height: 512, batch_size: 1 } } } }, "comfy-prompt-400-no-outputs.json"],
    ];
    for (const [body, file] of cases) {
      const res = await post(`${sim.url}/prompt`, body);
      expect({ file, status: res.status }).toEqual({ file, status: 400 });
      expect(dumpsPy(await pyBody(res))).toBe(dumpsPy(fixture(file)));
    }
    expect(sim.jobs()).toEqual([]);
  });

  test("a malformed JSON body is aiohttp's 500", async () => {
    const res = await post(`${sim.url}/prompt`, "{not json");
    expect(res.status).toBe(500);
    expect(await res.text()).toBe("500 Internal Server Error\n\nServer got itself in trouble");
  });
});

describe("simulated ComfyUI: job lifecycle (C2, C5)", () => {
  test("history is {} while queued/running, then the success entry of the fixture", async () => {
    await post(`${sim.url}/prompt`, REQUEST);
    expect(dumpsPy(await history(sim, PROMPT_ID))).toBe(dumpsPy(fixture("comfy-history-running.json")));
    expect(sim.jobs()[0]?.state).toMatch(/queued|running/);
    const h = await waitHistory(sim, PROMPT_ID);
    const expected = fixture("comfy-history-success.json");
    expectSameShape(h, expected);
    // The stored prompt (with cfg 8 converted to 8.0 in place) is the fixture's exactly.
    const entry = h.get(PROMPT_ID) as PyDict;
    const fxEntry = (expected as PyDict).get(PROMPT_ID) as PyDict;
    expect(dumpsPy(entry.get("prompt") ?? null)).toBe(dumpsPy(fxEntry.get("prompt") ?? null));
    expect(dumpsPy(entry.get("outputs") ?? null)).toBe(dumpsPy(fxEntry.get("outputs") ?? null));
    const job = sim.jobs()[0];
    expect(job?.state).toBe("done");
    expect(job!.endedAt! - job!.startedAt!).toBeGreaterThan(0);
  });

  test("jobs queue FIFO and run one at a time; /queue and GET /prompt show them", async () => {
    const ids = ["a", "b", "c"].map((x) => `00000000-0000-4000-8000-00000000000${x}`);
    for (const id of ids) await post(`${sim.url}/prompt`, promptBody({ prompt_id: id }));
    const q = await pyBody(await fetch(`${sim.url}/queue`));
    expectSameShape(q, fixture("comfy-queue.json"));
    expect(JSON.parse(await (await fetch(`${sim.url}/prompt`)).text())).toEqual({ exec_info: { queue_remaining: 3 } });
    let maxRunning = 0;
    await waitFor(() => {
      maxRunning = Math.max(maxRunning, sim.jobs().filter((j) => j.state === "running").length);
      return sim.jobs().every((j) => j.state === "done");
    }, "all jobs done");
    expect(maxRunning).toBe(1);
    const jobs = sim.jobs();
    expect(jobs.map((j) => j.id)).toEqual(ids);
    for (let i = 1; i < jobs.length; i++) expect(jobs[i]!.startedAt!).toBeGreaterThanOrEqual(jobs[i - 1]!.endedAt!);
    expect(await (await fetch(`${sim.url}/queue`)).text()).toBe(dumpsPy(fixture("comfy-queue-empty.json")));
  });

  test("POST /queue delete removes a pending job before it runs (legacy: any string is an id)", async () => {
    const s = await start({ legacy: true });
    await post(`${s.url}/prompt`, promptBody({ prompt_id: "first" }));
    await post(`${s.url}/prompt`, promptBody({ prompt_id: "second" }));
    const res = await post(`${s.url}/queue`, { delete: ["second"] });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("");
    await waitHistory(s, "first");
    expect(s.jobs().map((j) => j.id)).toEqual(["first"]);
  });

  test.each([
    ["/queue", { delete: ["second"] }],
    ["/api/queue", { clear: true }],
  ] as const)("POST %s %j: the pending job is gone and writes no history, as on the real server (api-facts R5)", async (path, body) => {
    const s = await start({ legacy: true, jobMs: 300 });
    await post(`${s.url}/prompt`, promptBody({ prompt_id: "first" }));
    await waitFor(() => s.runningJob(), "the first job running");
    await post(`${s.url}/prompt`, promptBody({ prompt_id: "second" }));
    expect((await post(`${s.url}${path}`, body)).status).toBe(200);
    const q = (await (await fetch(`${s.url}/queue`)).json()) as { queue_running: unknown[][]; queue_pending: unknown[][] };
    expect([q.queue_running.map((i) => i[1]), q.queue_pending]).toEqual([["first"], []]);
    await waitHistory(s, "first");
    expect(await (await fetch(`${s.url}/history/second`)).json()).toEqual({});
  });

  test("a failing job ends with status error and an execution_error message", async () => {
    const s = await start({ failJobs: (id) => id === PROMPT_ID });
    await post(`${s.url}/prompt`, REQUEST);
    const h = await waitHistory(s, PROMPT_ID);
    expectSameShape(h, fixture("comfy-history-error.json"));
    expect(s.jobs()[0]?.state).toBe("error");
  });

  test("extra_data.sim_fail makes one prompt fail", async () => {
    await post(`${sim.url}/prompt`, promptBody({ extra_data: { sim_fail: true } }));
    const status = (await waitHistory(sim, PROMPT_ID)).get(PROMPT_ID) as PyDict;
    const st = status.get("status") as PyDict;
    expect([st.get("status_str"), st.get("completed")]).toEqual(["error", false]);
  });

  test("/interrupt ends the running job with execution_interrupted, status error", async () => {
    const s = await start({ jobMs: 2000 });
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => s.runningJob(), "job to start");
    // Another prompt_id does nothing.
    await post(`${s.url}/interrupt`, { prompt_id: "not-running" });
    expect(s.runningJob()?.id).toBe(PROMPT_ID);
    const res = await fetch(`${s.url}/api/interrupt`, { method: "POST" }); // no body: interrupt whatever runs
    expect(res.status).toBe(200);
    const h = await waitHistory(s, PROMPT_ID);
    expectSameShape(h, fixture("comfy-history-interrupted.json"));
    expect(s.jobs()[0]?.state).toBe("error");
  });

  test("forgetJobs: the job runs but history never shows it", async () => {
    const s = await start({ forgetJobs: true });
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => s.jobs()[0]?.state === "done", "job done");
    expect(dumpsPy(await history(s, PROMPT_ID))).toBe("{}");
  });

  test("GET /history lists entries; POST /history clear empties it", async () => {
    await post(`${sim.url}/prompt`, REQUEST);
    await waitHistory(sim, PROMPT_ID);
    const all = (await pyBody(await fetch(`${sim.url}/history?max_items=5`))) as PyDict;
    expect([...all.keys()]).toEqual([PROMPT_ID]);
    await post(`${sim.url}/history`, { clear: true });
    expect(dumpsPy(await history(sim, PROMPT_ID))).toBe("{}");
  });
});

describe("simulated ComfyUI: GPU memory, /free and /system_stats (C3, C4)", () => {
  test("models stay loaded after a job; /free answers empty at once and the memory returns later", async () => {
    // A long unload, so that "still reserved right after the reply" holds on a loaded machine.
    await sim.stop();
    sim = await startComfySim({ jobMs: 40, freeDelayMs: 400 });
    const idle = await pyBody(await fetch(`${sim.url}/system_stats`));
    expectSameShape(idle, fixture("comfy-system-stats.json"));
    expect((await torch(sim)).torch_vram_total).toBe(0);
    await post(`${sim.url}/prompt`, REQUEST);
    await waitHistory(sim, PROMPT_ID);
    const loaded = await pyBody(await fetch(`${sim.url}/system_stats`));
    expectSameShape(loaded, fixture("comfy-system-stats-loaded.json"));
    const before = await torch(sim);
    expect(before.torch_vram_total).toBe(2684354560);
    expect(sim.gpu.vramUsed("comfy")).toBe(2684354560);

    const res = await post(`${sim.url}/free`, { unload_models: true, free_memory: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    expect(await res.text()).toBe("");
    // Asynchronous: right after the reply the memory is still reserved.
    expect((await torch(sim)).torch_vram_total).toBe(2684354560);
    await waitFor(async () => (await torch(sim)).torch_vram_total === 0, "torch memory released");
    const after = await torch(sim);
    expect(after.vram_free).toBeGreaterThan(before.vram_free);
    expect(sim.gpu.vramUsed("comfy")).toBe(0);
    expect(sim.gpu.ledger.map((h) => [h.tenant, h.detail, h.end !== null])).toEqual([["comfy", PROMPT_ID, true]]);
  });

  test("/free during a job acts only after that job has finished", async () => {
    const s = await start({ jobMs: 150 });
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => s.runningJob(), "job running");
    await post(`${s.url}/free`, { unload_models: true });
    await waitFor(() => s.gpu.ledger[0]?.end !== null, "memory freed");
    const job = s.jobs()[0];
    expect(s.gpu.ledger[0]!.end!).toBeGreaterThanOrEqual(job!.endedAt!);
  });

  test("/free needs a JSON body", async () => {
    const res = await fetch(`${sim.url}/free`, { method: "POST" });
    expect(res.status).toBe(500);
  });
});

describe("simulated ComfyUI: websocket (C6)", () => {
  function connect(s: ComfySim, query = `clientId=${CLIENT_ID}`, path = "/ws"): Promise<{ ws: WebSocket; messages: (string | ArrayBuffer)[] }> {
    const ws = new WebSocket(`${s.url.replace("http", "ws")}${path}?${query}`);
    ws.binaryType = "arraybuffer";
    const messages: (string | ArrayBuffer)[] = [];
    ws.onmessage = (e) => messages.push(e.data as string | ArrayBuffer);
    return new Promise((resolve, reject) => {
      ws.onopen = () => resolve({ ws, messages });
      ws.onerror = () => reject(new Error("ws error"));
    });
  }

  const parsed = (m: (string | ArrayBuffer)[]): PyDict[] => m.filter((x): x is string => typeof x === "string").map((x) => parsePy(x) as PyDict);
  const types = (m: PyDict[]): string[] => m.map((x) => x.get("type") as string);

  test("a job's messages reach its client in the fixture's order and shapes", async () => {
    const { ws, messages } = await connect(sim);
    await waitFor(() => messages.length >= 1, "status on connect");
    await post(`${sim.url}/prompt`, REQUEST);
    await waitFor(() => parsed(messages).some((m) => m.get("type") === "executing" && (m.get("data") as PyDict).get("node") === null), "executing:null");
    ws.close();
    const got = parsed(messages);
    const want = fixture("comfy-ws-messages.json") as PyDict[];
    const skipProgress = (l: PyDict[]): PyDict[] => l.filter((m) => m.get("type") !== "progress" && m.get("type") !== "progress_state");
    expect(types(skipProgress(got))).toEqual(types(skipProgress(want)));
    // Every message type has the fixture's shape (first occurrence of each).
    for (const t of new Set(types(want))) {
      expectSameShape(got.find((m) => m.get("type") === t) as PyValue, want.find((m) => m.get("type") === t) as PyValue);
    }
    const executing = got.filter((m) => m.get("type") === "executing").map((m) => (m.get("data") as PyDict).get("node"));
    expect(executing).toEqual(["4", "5", "6", "7", "3", "8", "9", null]);
    const steps = got.filter((m) => m.get("type") === "progress").map((m) => (m.get("data") as PyDict).get("value"));
    expect(steps).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
  });

  test("the first message carries the sid; without clientId the server picks one", async () => {
    const { ws, messages } = await connect(sim, "", "/api/ws");
    await waitFor(() => messages.length >= 1, "status");
    ws.close();
    const first = parsed(messages)[0] as PyDict;
    expectSameShape(first, (fixture("comfy-ws-messages.json") as PyDict[])[0] as PyValue);
    expect((first.get("data") as PyDict).get("sid")).toMatch(/^[0-9a-f]{32}$/);
  });

  test("another client receives only status broadcasts and progress, not the job's private messages", async () => {
    const other = await connect(sim, "clientId=someone-else");
    await post(`${sim.url}/prompt`, REQUEST);
    // The status broadcast after task_done is the last message any client gets for this job, and
    // one socket's messages arrive in order: once it is here, nothing else is on its way.
    const idleStatuses = (): number =>
      parsed(other.messages).filter((m) => m.get("type") === "status" && dumpsPy(m.get("data") ?? null).includes('"queue_remaining": 0')).length;
    await waitFor(() => idleStatuses() === 2, "final status"); // the one on connect, the one after the job
    other.ws.close();
    const seen = new Set(types(parsed(other.messages)));
    expect(seen.has("status")).toBe(true);
    expect(seen.has("executing")).toBe(false);
    expect(seen.has("execution_start")).toBe(false);
  });

  test("execution_error and feature_flags have the fixtures' shapes", async () => {
    const s = await start({ failJobs: () => true });
    const { ws, messages } = await connect(s);
    ws.send(JSON.stringify({ type: "feature_flags", data: { supports_preview_metadata: true } }));
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => types(parsed(messages)).includes("execution_error"), "execution_error");
    ws.close();
    const other = fixture("comfy-ws-other-messages.json") as PyDict[];
    const got = parsed(messages);
    // The fixture abridges current_inputs (the history fixture has them all): compare the rest.
    const withoutInputs = (m: PyDict): PyDict => new Map([...m].map(([k, v]) => [k, k === "data" ? new Map([...(v as PyDict)].filter(([dk]) => dk !== "current_inputs")) : v]));
    expectSameShape(withoutInputs(got.find((m) => m.get("type") === "execution_error") as PyDict), withoutInputs(other[0] as PyDict));
    const flags = got.find((m) => m.get("type") === "feature_flags");
    expect(dumpsPy(flags ?? null)).toBe(dumpsPy(other[2] as PyValue));
    expect(types(got)).not.toContain("execution_success");
  });

  test("echo mode returns text and 1 MiB binary frames unchanged", async () => {
    const s = await start({ wsEcho: true });
    const { ws, messages } = await connect(s);
    await waitFor(() => messages.length >= 1, "status");
    const big = new Uint8Array(1024 * 1024).map((_, i) => (i * 31) & 0xff);
    ws.send("hello");
    ws.send(big);
    await waitFor(() => messages.length >= 3, "echoes");
    ws.close();
    expect(messages[1]).toBe("hello");
    expect(new Uint8Array(messages[2] as ArrayBuffer)).toEqual(big);
  });
});

describe("simulated ComfyUI: other routes (C7, C8)", () => {
  test("every route answers under /api too; unknown is 404, wrong method 405", async () => {
    expect(await (await fetch(`${sim.url}/api/system_stats`)).text()).toBe(await (await fetch(`${sim.url}/system_stats`)).text());
    const nf = await fetch(`${sim.url}/api/nope`);
    expect(nf.status).toBe(404);
    expect(await nf.text()).toBe("404: Not Found");
    expect((await fetch(`${sim.url}/free`)).status).toBe(405);
  });

  test("/view serves an 8 MiB big.png for benchmarks and job outputs; 404 for unknown files", async () => {
    const res = await fetch(`${sim.url}/view?filename=big.png`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("image/png");
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(bytes.length).toBe(8 * 1024 * 1024);
    expect([...bytes.slice(0, 4)]).toEqual([0x89, 0x50, 0x4e, 0x47]);
    const again = new Uint8Array(await (await fetch(`${sim.url}/api/view?filename=big.png&type=output`)).arrayBuffer());
    expect(Bun.hash(again)).toBe(Bun.hash(bytes)); // deterministic
    expect((await fetch(`${sim.url}/view?filename=missing.png`)).status).toBe(404);
    expect((await fetch(`${sim.url}/view?filename=../etc/passwd`)).status).toBe(400);
    await post(`${sim.url}/prompt`, REQUEST);
    await waitHistory(sim, PROMPT_ID);
    expect((await fetch(`${sim.url}/view?filename=ComfyUI_00001_.png&type=output`)).status).toBe(200);
  });

  test("/upload/image stores the file, renames clashes, and /view returns it", async () => {
    const upload = async (content: string): Promise<Response> => {
      const form = new FormData();
      form.append("image", new File([content], "example.png", { type: "image/png" }));
      return fetch(`${sim.url}/upload/image`, { method: "POST", body: form });
    };
    const first = await upload("one");
    expect(first.status).toBe(200);
    expect(dumpsPy(await pyBody(first))).toBe(dumpsPy(fixture("comfy-upload-image.json")));
    expect(JSON.parse(await (await upload("one")).text()).name).toBe("example.png"); // same content
    expect(JSON.parse(await (await upload("two")).text()).name).toBe("example (1).png");
    expect(await (await fetch(`${sim.url}/view?filename=example (1).png&type=input`)).text()).toBe("two");
  });

  test("/features, /object_info and /object_info/{class}", async () => {
    expect(dumpsPy(await pyBody(await fetch(`${sim.url}/features`)))).toBe(dumpsPy(fixture("comfy-features.json")));
    const info = (await pyBody(await fetch(`${sim.url}/object_info`))) as PyDict;
    expect(info.has("KSampler") && info.has("SaveImage")).toBe(true);
    const one = (await pyBody(await fetch(`${sim.url}/api/object_info/SaveImage`))) as PyDict;
    expect([...one.keys()]).toEqual(["SaveImage"]);
    expect(dumpsPy(await pyBody(await fetch(`${sim.url}/object_info/Nope`)))).toBe("{}");
  });

  test("a loopback Host with a foreign Origin is 403; the same origin passes", async () => {
    const bad = await fetch(`${sim.url}/prompt`, { headers: { origin: "http://evil.example.com" } });
    expect(bad.status).toBe(403);
    expect(await bad.text()).toBe("");
    const same = await fetch(`${sim.url}/prompt`, { headers: { origin: `http://127.0.0.1:${sim.port}` } });
    expect(same.status).toBe(200);
    // Only loopback hosts are protected.
    const remote = await fetch(`${sim.url}/prompt`, { headers: { host: "gpu.example.com", origin: "http://evil.example.com" } });
    expect(remote.status).toBe(200);
    const open = await start({ checkOrigin: false });
    expect((await fetch(`${open.url}/prompt`, { headers: { origin: "http://evil.example.com" } })).status).toBe(200);
  });

  test("overrides inject failures; calls record bodies byte for byte", async () => {
    const remove = sim.override("POST", "/prompt", () => new Response("down", { status: 503 }));
    expect((await post(`${sim.url}/prompt`, REQUEST)).status).toBe(503);
    remove();
    expect((await post(`${sim.url}/prompt`, REQUEST)).status).toBe(200);
    const calls = sim.calls.filter((c) => c.path === "/prompt");
    expect(calls.map((c) => c.bodyText)).toEqual([REQUEST, REQUEST]);
    expect(isDict(parsePy(calls[0]!.bodyText))).toBe(true);
  });

  test("the checkpoint loads cold (loadMs) for the first job and after a /free that unloaded it, not in between", async () => {
    const s = await start({ jobMs: 40, loadMs: 200 });
    const run = async () => {
      const res = await post(`${s.url}/prompt`, promptBody({ prompt_id: undefined }));
      const id = ((await res.json()) as { prompt_id: string }).prompt_id;
      await waitFor(() => s.jobs().find((j) => j.id === id && j.state === "done"), "job done");
      return s.jobs().find((j) => j.id === id)!;
    };
    const cold = await run();
    const warm = await run();
    expect(cold.endedAt! - cold.startedAt!).toBeGreaterThanOrEqual(200);
    expect(warm.endedAt! - warm.startedAt!).toBeLessThan(200);
    expect(s.checkpointLoads()).toBe(1);
    await post(`${s.url}/free`, { unload_models: true });
    await waitFor(() => s.gpu.vramUsed("comfy") === 0, "models unloaded");
    const again = await run();
    expect(again.endedAt! - again.startedAt!).toBeGreaterThanOrEqual(200);
    expect(s.checkpointLoads()).toBe(2);
    // The ledger holds the memory from the start of each load.
    const holds = s.gpu.ledger.filter((h) => h.tenant === "comfy");
    expect(holds).toHaveLength(2);
    expect(holds[1]!.start).toBeLessThanOrEqual(again.startedAt! + 5);
  });

  test("crash and revive: the port refuses meanwhile, the memory goes back, queue and history start empty", async () => {
    const s = await start({ jobMs: 5000 });
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => s.runningJob(), "running");
    expect(s.gpu.vramUsed("comfy")).toBeGreaterThan(0);
    const queued = (await pyBody(await fetch(`${s.url}/queue`))) as PyDict;
    expect((queued.get("queue_running") as PyValue[]).length).toBe(1);
    await s.crash();
    expect(s.gpu.vramUsed()).toBe(0);
    expect(await fetch(`${s.url}/queue`).catch((e: unknown) => e)).toBeInstanceOf(Error);
    await s.revive();
    const after = (await pyBody(await fetch(`${s.url}/queue`))) as PyDict;
    expect(dumpsPy(after)).toBe(dumpsPy(parsePy('{"queue_running": [], "queue_pending": []}')));
    expect(dumpsPy(await history(s, PROMPT_ID))).toBe("{}");
    expect(s.jobs()).toEqual([]);
    // Calls made before and after the crash are all in one record, as a test expects.
    expect(s.calls.filter((c) => c.path === "/queue")).toHaveLength(2);
  });

  test("stop closes sockets and refuses connections; the same port can be reused", async () => {
    const s = await startComfySim({ jobMs: 5000 });
    const port = s.port;
    await post(`${s.url}/prompt`, REQUEST);
    await waitFor(() => s.runningJob(), "running");
    const ws = new WebSocket(`${s.url.replace("http", "ws")}/ws`);
    await new Promise((r) => (ws.onopen = r));
    const closed = new Promise((r) => (ws.onclose = r));
    await s.stop();
    await closed;
    expect(s.gpu.vramUsed()).toBe(0);
    expect(await fetch(`${s.url}/prompt`).catch((e: unknown) => e)).toBeInstanceOf(Error);
    const again = await start({ port });
    expect((await fetch(`${again.url}/prompt`)).status).toBe(200);
  });
});

describe("simulated ComfyUI: routes match the percent-decoded path, as aiohttp's do", () => {
  test("POST /pr%6Fmpt and /api%2Fprompt queue a job", async () => {
    for (const path of ["/pr%6Fmpt", "/api%2Fprompt"]) {
      const res = await post(`${sim.url}${path}`, JSON.stringify({ ...JSON.parse(REQUEST), prompt_id: undefined }));
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
    }
    expect(sim.jobs()).toHaveLength(2);
    // The call log keeps the path as it arrived.
    expect(sim.calls.map((c) => c.path)).toEqual(["/pr%6Fmpt", "/api%2Fprompt"]);
  });

  test("an invalid encoding is a 400", async () => {
    expect((await fetch(`${sim.url}/pr%zzompt`)).status).toBe(400);
  });
});
