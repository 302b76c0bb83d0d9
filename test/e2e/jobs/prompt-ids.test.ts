/**
 * Issue 18: no client input can hand the card back early. Each case is the outside probe's,
 * replayed on the simulators: the GPU ledger must show no overlap, and a refused /prompt must
 * leave the user's model loaded (nothing unloaded for a job that never runs).
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { ComfySimOptions } from "../../../src/sim/index.ts";
import { callsTo, chat, jobCounts, newPromptId, postJson, promptBody, type Stack, startStack, submit, until, waitFor, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const MODEL = "llama3.2:latest";

async function withModelLoaded(comfy: ComfySimOptions = {}, env: Record<string, string> = {}): Promise<Stack> {
  const stack = await startStack({ comfy, env });
  const res = await postJson(`${stack.ollama!.url}/api/generate`, { model: MODEL, prompt: "" });
  await res.text();
  stack.ollama!.clearCalls();
  return stack;
}

/** Nothing moved: no unload, no /prompt reached ComfyUI, the lock never left idle. */
function expectUntouched(stack: Stack): void {
  expect(stack.ollama!.loadedModels()).toEqual([MODEL]);
  expect(callsTo(stack.ollama!.calls, "/api/generate")).toEqual([]);
  expect(callsTo(stack.comfy!.calls, /\/prompt$/, "POST")).toEqual([]);
  expect(stack.transitions).toEqual([]);
}

async function errorType(res: Response): Promise<string> {
  const body = (await res.json()) as { error: { type: string }; node_errors: object };
  expect(body.node_errors).toEqual({});
  return body.error.type;
}

describe("a client-chosen prompt_id must be a canonical UUID", () => {
  // The probe's ids, against a ComfyUI (v0.3.64) that would itself accept any string.
  const bad: [string, string][] = [
    ["empty", ""],
    ["too long for the 64 KiB read of ComfyUI's answer", "x".repeat(70_000)],
    ["too long for aiohttp's request line (/history/<id>)", "y".repeat(9_000)],
    ["unencodable in a URL", "job\ud800"],
    ["upper-case", crypto.randomUUID().toUpperCase()],
  ];
  test.each(bad)("%s: 400 invalid_prompt_id in ComfyUI's shape, before anything is unloaded", async (_name, id) => {
    s = await withModelLoaded({ legacy: true });
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(400);
    expect(await errorType(res)).toBe("invalid_prompt_id");
    expectUntouched(s);
  });

  test("without one, the turnstile mints a UUID, sends it, and follows the job by it", async () => {
    s = await startStack();
    const body = JSON.parse(promptBody("x"));
    delete body.prompt_id;
    const res = await submit(s.t, JSON.stringify(body));
    expect(res.status).toBe(200);
    const { prompt_id } = (await res.json()) as { prompt_id: string };
    await s.t.settled();
    const sent = JSON.parse(callsTo(s.comfy!.calls, "/prompt", "POST")[0]!.bodyText);
    expect(sent.prompt_id).toBe(prompt_id);
    expect(sent.prompt).toEqual(body.prompt);
    expect(prompt_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
    expect(s.gpu.overlaps()).toEqual([]);
  });
});

describe("an id already in use gets 400 too", () => {
  test("reusing a finished job's id (shown on /turnstile/status) is refused before anything is unloaded", async () => {
    s = await withModelLoaded();
    const id = newPromptId();
    const first = await submit(s.t, promptBody(id));
    expect(first.status).toBe(200);
    await first.text();
    await s.t.settled();
    const reload = await postJson(`${s.ollama!.url}/api/generate`, { model: MODEL, prompt: "" });
    await reload.text();
    s.ollama!.clearCalls();
    s.comfy!.clearCalls();
    s.transitions.length = 0;

    const again = await submit(s.t, promptBody(id, { sim_job_ms: 2000 }));
    expect(again.status).toBe(400);
    expect(await errorType(again)).toBe("duplicate_prompt_id");
    expectUntouched(s);
  });

  test.each([false, true])("an id ComfyUI knows from a job queued around the turnstile (legacy ComfyUI: %p)", async (legacy) => {
    s = await withModelLoaded({ legacy, jobMs: 60 });
    const id = newPromptId();
    const direct = await postJson(`${s.comfy!.url}/prompt`, promptBody(id));
    expect(direct.status).toBe(200);
    await direct.text();
    s.comfy!.clearCalls();
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(400);
    expect(await errorType(res)).toBe("duplicate_prompt_id");
    expectUntouched(s);
  });

  test("a client that left while waiting for the GPU may send the same id again", async () => {
    s = await startStack();
    const lease = (await (await postJson(`${s.t.comfyUrl}/turnstile/lease`, { ttl: "1m" })).json()) as { id: string };
    const id = newPromptId();
    const ac = new AbortController();
    const first = submit(s.t, promptBody(id), { signal: ac.signal }).catch((e: unknown) => e);
    await until(() => s!.t.lock.snapshot().imageWaiting === 1, "the prompt waiting behind the lease");
    ac.abort();
    expect(await first).toBeInstanceOf(Error);
    await until(() => s!.t.lock.snapshot().imageWaiting === 0, "the waiter gone");
    await fetch(`${s.t.comfyUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" }).then((r) => r.text());
    const again = await submit(s.t, promptBody(id));
    expect(again.status).toBe(200);
    await again.text();
    await s.t.settled();
    expect(callsTo(s.comfy!.calls, "/prompt", "POST")).toHaveLength(1);
  });

  test("two clients racing with the same new id: one job, one 400", async () => {
    s = await startStack();
    const id = newPromptId();
    const [a, b] = await Promise.all([submit(s.t, promptBody(id)), submit(s.t, promptBody(id))]);
    expect([a.status, b.status].sort()).toEqual([200, 400]);
    await Promise.all([a.text(), b.text()]);
    await s.t.settled();
    expect(callsTo(s.comfy!.calls, "/prompt", "POST")).toHaveLength(1);
  });
});

describe("never done from an entry that existed before the job was sent", () => {
  test("ComfyUI could not be asked about the id, and its history has an old job under it: held until the new job ends", async () => {
    s = await startStack({ comfy: { legacy: true, jobMs: 40 }, env: { FREE_TIMEOUT: "100ms" } });
    const id = newPromptId();
    // An old job under this id, run around the turnstile, finished long ago.
    const old = await postJson(`${s.comfy!.url}/prompt`, promptBody(id));
    await old.text();
    await waitFor(() => s!.comfy!.jobs()[0]?.state === "done", "old job done");
    // The id check fails (ComfyUI's /queue answers 500 once), so the job goes on, not "fresh".
    let failed = false;
    s.comfy!.override("GET", "/queue", () => (failed ? undefined : ((failed = true), new Response("500", { status: 500 }))));
    const res = await submit(s.t, promptBody(id, { sim_job_ms: 400 }));
    expect(res.status).toBe(200);
    await res.text();
    const c = await chat(s.t);
    expect(c.status).toBe(200);
    await c.text();
    await s.t.settled();
    const newJob = s.comfy!.jobs().at(-1)!;
    const handedOn = s.transitions.find((x) => x.from === "image")!.at;
    expect(handedOn).toBeGreaterThanOrEqual(newJob.endedAt!);
    expect(s.gpu.overlaps()).toEqual([]);
    // The follow itself waited for the new job (not only the memory and queue checks after it).
    expect(warnLines(s.t, "queue still holds")).toEqual([]);
    expect(s.t.logLines.some((l) => l.includes("prompt success"))).toBe(true);
  });
});

describe("a cross-site /prompt gets ComfyUI's 403 before Ollama is touched", () => {
  const cases: [string, (port: number) => Record<string, string>][] = [
    ["a page on evil.example", () => ({ origin: "http://evil.example" })],
    ["a page on another localhost port", () => ({ origin: "http://localhost:3000" })],
    ["a browser that says cross-site", () => ({ "sec-fetch-site": "cross-site" })],
  ];
  test.each(cases)("%s", async (_name, headers) => {
    s = await withModelLoaded();
    const port = new URL(s.t.comfyUrl).port;
    // Twice a second for a while, as the probe's page did: not one unload.
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${s.t.comfyUrl}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers(Number(port)) },
        body: promptBody(newPromptId()),
      });
      expect(res.status).toBe(403);
      expect(await errorType(res)).toBe("cross_site");
    }
    expectUntouched(s);
  });

  test("a ComfyUI started with --enable-cors-header accepts any Origin, and so does the turnstile", async () => {
    s = await startStack({ comfy: { checkOrigin: false } });
    const res = await fetch(`${s.t.comfyUrl}/prompt`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: "http://my-frontend.example", "sec-fetch-site": "cross-site" },
      body: promptBody(newPromptId()),
    });
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
  });

  test("the turnstile's own page (Origin = the turnstile) still queues", async () => {
    s = await startStack();
    const res = await fetch(`${s.t.comfyUrl}/prompt`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: s.t.comfyUrl, "sec-fetch-site": "same-origin" },
      body: promptBody(newPromptId()),
    });
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
  });
});

describe("memory not back within FREE_TIMEOUT while ComfyUI still works", () => {
  test("the queue is read before the card is handed on: held until it is empty, and the log says so", async () => {
    // A job queued around the turnstile keeps ComfyUI busy; /free acts only after it (C3).
    s = await startStack({ comfy: { jobMs: 40 }, env: { FREE_TIMEOUT: "150ms", JOB_TIMEOUT: "5s" } });
    const ours = await submit(s.t, promptBody(newPromptId(), { sim_job_ms: 60 }));
    expect(ours.status).toBe(200);
    await ours.text();
    const around = await postJson(`${s.comfy!.url}/prompt`, promptBody(newPromptId(), { sim_job_ms: 600 }));
    expect(around.status).toBe(200);
    await around.text();
    // A chat waits for the card meanwhile.
    await until(() => s!.t.lock.state === "image", "image state");
    const waiting = chat(s.t);
    const c = await waiting;
    expect(c.status).toBe(200);
    await c.text();
    await s.t.settled();
    expect(warnLines(s.t, "queue still holds 1 job")).toHaveLength(1);
    const aroundEnd = s.comfy!.jobs().at(-1)!.endedAt!;
    const handedOn = s.transitions.find((x) => x.from === "image")!.at;
    expect(handedOn).toBeGreaterThanOrEqual(aroundEnd);
    expect(s.gpu.overlaps()).toEqual([]);
  });
});

describe("a client ending its own job is seen at once (issue 19)", () => {
  const SLOW_POLL = { HISTORY_POLL_INTERVAL: "5s", JOB_TIMEOUT: "60s" };
  const ways: [string, (url: string, id: string) => Promise<Response>][] = [
    ["POST /interrupt {prompt_id}", (url, id) => postJson(`${url}/interrupt`, { prompt_id: id })],
    ["POST /api/interrupt without a body", (url) => fetch(`${url}/api/interrupt`, { method: "POST" })],
    ["POST /api/jobs/{id}/cancel", (url, id) => fetch(`${url}/api/jobs/${id}/cancel`, { method: "POST" })],
    ["POST /api/jobs/cancel {job_ids}", (url, id) => postJson(`${url}/api/jobs/cancel`, { job_ids: [id] })],
  ];
  test.each(ways)("running job, %s: released long before the next poll", async (_name, end) => {
    s = await startStack({ comfy: { jobMs: 30_000, loadMs: 10 }, env: SLOW_POLL });
    const id = newPromptId();
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(() => s!.comfy!.runningJob(), "running");
    const t0 = performance.now();
    const r = await end(s.t.comfyUrl, id);
    expect(r.status).toBe(200);
    await r.text();
    await until(() => s!.t.lock.state === "idle", "idle", 3000);
    expect(performance.now() - t0).toBeLessThan(3000);
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ cancelled: 1 });
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test.each([
    ["POST /queue {delete}", (url: string, id: string) => postJson(`${url}/queue`, { delete: [id] })],
    ["POST /api/queue {clear}", (url: string) => postJson(`${url}/api/queue`, { clear: true })],
  ] as const)("pending job, %s: released long before the next poll", async (_name, end) => {
    s = await startStack({ comfy: { jobMs: 30_000, loadMs: 10 }, env: SLOW_POLL });
    // Something queued around the turnstile runs first, so ours stays pending.
    const blocker = await postJson(`${s.comfy!.url}/prompt`, promptBody(newPromptId()));
    await blocker.text();
    const id = newPromptId();
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(200);
    await res.text();
    const t0 = performance.now();
    const r = await end(s.t.comfyUrl, id);
    expect(r.status).toBe(200);
    await r.text();
    // Our job is over at once; the blocker keeps ComfyUI's memory, so the card waits on it (bounded).
    await until(() => s!.t.logLines.some((l) => l.includes("prompt cancelled")), "cancelled", 3000);
    expect(performance.now() - t0).toBeLessThan(3000);
    await postJson(`${s.comfy!.url}/interrupt`, {}).then((x) => x.text());
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ cancelled: 1 });
  });
});

describe("following many jobs on a ComfyUI without the jobs API", () => {
  test("one /queue read per poll serves every followed job", async () => {
    // FAIR_TURNS=false: one client's four jobs are all in ComfyUI, followed together.
    s = await startStack({ comfy: { legacy: true, jobMs: 80 }, env: { HISTORY_POLL_INTERVAL: "20ms", FAIR_TURNS: "false" } });
    const ids = Array.from({ length: 4 }, () => newPromptId());
    const answers = await Promise.all(ids.map((id) => submit(s!.t, promptBody(id))));
    for (const a of answers) {
      expect(a.status).toBe(200);
      await a.text();
    }
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ completed: 4 });
    const firstPrompt = callsTo(s.comfy!.calls, "/prompt", "POST")[0]!.at;
    const queueReads = callsTo(s.comfy!.calls, "/queue", "GET").filter((c) => c.at >= firstPrompt).length;
    const historyReads = ids.reduce((n, id) => n + callsTo(s!.comfy!.calls, `/history/${id}`).filter((c) => c.at >= firstPrompt).length, 0);
    // Each job reads its own /history every poll; the multi-megabyte /queue is read once for all.
    expect(queueReads).toBeLessThanOrEqual(Math.ceil(historyReads / 2));
    expect(s.gpu.overlaps()).toEqual([]);
  });
});
