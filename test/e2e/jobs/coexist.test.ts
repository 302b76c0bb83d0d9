/**
 * Issue 31, COEXIST on: an embedding model stays on the card beside an image job when measured
 * memory says it fits. The simulated card has its capacity, ComfyUI's use follows the prompt's
 * curve (extra_data.sim_work_bytes), and the ledger's memory invariant holds throughout.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { CoexistStatus, StatusDoc } from "../../../src/status/model.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import type { ComfySimOptions } from "../../../src/sim/index.ts";
import { callsTo, newPromptId, postJson, promptBody, type Stack, startStack, submit, until, warnLines } from "./helpers.ts";

const GB = 1_000_000_000;
/** Each test runs two or three image jobs of two seconds. */
const TIMEOUT = 30_000;
const EMBED = "nomic-embed-text";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

function start(env: Record<string, string> = {}, comfy: ComfySimOptions = {}): Promise<Stack> {
  return startStack({
    // Long enough that a poll every 20 ms sees each sampler step (about 50 ms each).
    comfy: { jobMs: 2000, loadMs: 10, freeDelayMs: 20, ...comfy },
    env: { COEXIST: "true", COEXIST_MODELS: EMBED, COEXIST_MARGIN: "4GiB", COEXIST_POLL_INTERVAL: "20ms", LOGLEVEL: "info", ...env },
  });
}

function embed(s: Stack): Promise<Response> {
  return postJson(`${s.t.ollamaUrl}/api/embed`, { model: EMBED, input: "a document" });
}

/** One image job through the turnstile, to its end (the lock back to idle). */
async function imageJob(s: Stack, extra: Record<string, unknown>, seed = Math.floor(Math.random() * 1e9)): Promise<string> {
  const id = newPromptId();
  const res = await submit(s.t, promptBody(id, extra, (p) => ((p["3"] as { inputs: { seed: number } }).inputs.seed = seed)));
  expect(res.status).toBe(200);
  await res.text();
  return id;
}

async function idle(s: Stack, what: string): Promise<void> {
  await until(() => s.t.lock.snapshot().state === "idle" && s.comfy!.runningJob() === undefined, what, 15_000);
}

async function metric(s: Stack, name: string): Promise<number> {
  return sampleValue(parseExposition(await (await fetch(`${s.t.ollamaUrl}/metrics`)).text()), name) ?? NaN;
}

async function statusDoc(s: Stack): Promise<StatusDoc & { coexist: CoexistStatus }> {
  return (await fetch(`${s.t.ollamaUrl}/turnstile/status`)).json() as Promise<StatusDoc & { coexist: CoexistStatus }>;
}

const unloadsOf = (s: Stack, model: string) =>
  callsTo(s.ollama!.calls, /^\/api\/(generate|embed)$/, "POST").filter((c) => {
    const b = JSON.parse(c.bodyText) as { model: string; keep_alive?: number };
    return b.keep_alive === 0 && b.model.startsWith(model);
  });

describe("COEXIST on", () => {
  test("a workflow's first run is exclusive; once learned, the embedding model stays and is served during the job", async () => {
    const s = (stack = await start());
    expect((await embed(s)).status).toBe(200);
    await imageJob(s, { sim_work_bytes: 4 * GB });
    await idle(s, "the first (exclusive) job's end");
    expect(unloadsOf(s, EMBED)).toHaveLength(1);
    expect(s.t.logLines.some((l) => l.includes("learned peak"))).toBe(true);

    expect((await embed(s)).status).toBe(200);
    await imageJob(s, { sim_work_bytes: 4 * GB });
    await until(() => s.comfy!.runningJob() !== undefined, "the second job running");
    const t0 = performance.now();
    const res = await embed(s);
    expect(res.status).toBe(200);
    // Served at once, beside the job: the job is still running when the answer is in.
    expect(s.comfy!.runningJob()).toBeDefined();
    expect(performance.now() - t0).toBeLessThan(1000);
    // The operator sees it: the model, its headroom and the workflow's learned peak.
    const doc = await statusDoc(s);
    expect(doc.coexist.model).toBe(`${EMBED}:latest`);
    expect(doc.coexist.headroom_bytes).toBeGreaterThan(0);
    expect(doc.coexist.learned_peak_bytes).toBeGreaterThan(4 * GB);
    expect(doc.coexist.last_eject).toBeNull();
    await idle(s, "the second job's end");
    expect(unloadsOf(s, EMBED)).toHaveLength(1);
    expect(await metric(s, "gpu_turnstile_coexist_admissions_total")).toBe(1);
    // Sharing happened, and nothing summed past the card.
    expect(s.gpu.overlaps().length).toBeGreaterThan(0);
    expect(s.gpu.violations({ coexist: true })).toEqual([]);
  }, TIMEOUT);

  test("a run that goes higher than learned ejects the model before the card runs out, and the peak is learned again", async () => {
    const s = (stack = await start());
    expect((await embed(s)).status).toBe(200);
    await imageJob(s, { sim_work_bytes: 4 * GB });
    await idle(s, "the first job");
    expect((await embed(s)).status).toBe(200);
    // Alone it fits the 25.4 GB card (2.7 + 22.3 GB); with the 0.6 GB model beside it, it would not.
    await imageJob(s, { sim_work_bytes: 22.3 * GB });
    await until(() => s.comfy!.runningJob() !== undefined, "the growing job running");
    // Requests for the model during the job wait for it once it has been ejected.
    await until(() => warnLines(s.t, `ejected ${EMBED}`).length > 0, "the eject", 15_000);
    const held = embed(s);
    let answered = false;
    void held.then(() => (answered = true));
    await until(() => s.comfy!.runningJob() === undefined || answered, "the job's end or the embed's answer", 15_000);
    expect(answered && s.comfy!.runningJob() !== undefined).toBe(false);
    expect((await held).status).toBe(200);
    await idle(s, "the growing job");
    expect(warnLines(s.t, `ejected ${EMBED}`)[0]).toMatch(/below COEXIST_MARGIN/);
    expect(await metric(s, "gpu_turnstile_coexist_ejects_total")).toBe(1);
    expect((await statusDoc(s)).coexist.last_eject).toMatchObject({ model: `${EMBED}:latest`, why: expect.stringContaining("below COEXIST_MARGIN") });
    expect(s.gpu.violations({ coexist: true })).toEqual([]);
    expect(s.t.logLines.some((l) => l.includes("learned peak") && l.includes("higher than before"))).toBe(true);
    // The job itself was never short of memory.
    const history = await (await fetch(`${s.comfy!.url}/history`)).json();
    expect(Object.values(history as Record<string, { status: { status_str: string } }>).map((h) => h.status.status_str)).toEqual(["success", "success"]);
  }, TIMEOUT);

  test("a job that fails after an admission makes its workflow exclusive only", async () => {
    const s = (stack = await start());
    await embed(s);
    await imageJob(s, { sim_work_bytes: 2 * GB });
    await idle(s, "the first job");
    await embed(s);
    await imageJob(s, { sim_work_bytes: 2 * GB, sim_fail: true });
    await idle(s, "the failing job");
    expect(warnLines(s.t, "exclusive only")).toHaveLength(1);
    const before = unloadsOf(s, EMBED).length;
    await embed(s);
    await imageJob(s, { sim_work_bytes: 2 * GB });
    await idle(s, "the next job of that workflow");
    expect(unloadsOf(s, EMBED)).toHaveLength(before + 1);
    expect(s.gpu.violations({ coexist: true })).toEqual([]);
  }, TIMEOUT);

  test("never where ComfyUI's memory is not measured: on cpu every job empties Ollama, as with it off", async () => {
    const s = (stack = await start({}, { device: "cpu", jobMs: 300 }));
    for (let i = 0; i < 3; i++) {
      expect((await embed(s)).status).toBe(200);
      await imageJob(s, {});
      await idle(s, `job ${i + 1}`);
    }
    expect(unloadsOf(s, EMBED)).toHaveLength(3);
    expect(await metric(s, "gpu_turnstile_coexist_admissions_total")).toBe(0);
    expect(s.gpu.violations()).toEqual([]);
  }, TIMEOUT);
});
