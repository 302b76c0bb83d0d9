/**
 * Upstream retries through real sockets: a refused connection never reached the upstream, so it
 * is retried with doubling, capped backoff until the upstream is back; a 5xx to a POST reached it,
 * so it is passed back and never replayed; a request that is backing off holds no GPU lock.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { startComfySim, startOllamaSim, type ComfySim, type OllamaSim } from "../../../src/sim/index.ts";
import {
  chat,
  callsTo,
  FAST_COMFY,
  FAST_OLLAMA,
  jobCounts,
  newPromptId,
  promptBody,
  type Stack,
  startStack,
  submit,
  total,
  until,
  warnLines,
} from "./helpers.ts";

const BACKOFF = { BACKOFF_INITIAL: "20ms", BACKOFF_MAX: "80ms" };

let s: Stack | undefined;
const revived: (OllamaSim | ComfySim)[] = [];
afterEach(async () => {
  await s?.stop();
  s = undefined;
  for (const r of revived.splice(0)) await r.stop();
});

/** The port of a simulator that was started and stopped: connections to it are refused. */
async function deadOllama(): Promise<{ url: string; port: number }> {
  const sim = await startOllamaSim();
  await sim.stop();
  return { url: sim.url, port: sim.port };
}

async function deadComfy(): Promise<{ url: string; port: number }> {
  const sim = await startComfySim();
  await sim.stop();
  return { url: sim.url, port: sim.port };
}

/** The delays announced by "retrying in …" warn lines matching `match`, in ms. */
function announcedDelays(stack: Stack, match: string): number[] {
  return warnLines(stack.t, match).map((l) => Number(/ delay=([\d.]+)ms/.exec(l)?.[1]));
}

describe("connection refused: retried with backoff until the upstream is back", () => {
  test("a GET succeeds once Ollama listens again; the backoff doubles from 20 ms and caps at 80 ms", async () => {
    // Down since its last good probe (a pass-through request to one the probe already finds down
    // gets its 502 at once: healthz-upstreams.test.ts).
    s = await startStack({ env: BACKOFF });
    const dead = { port: s.ollama!.port };
    await s.ollama!.stop();
    const pending = fetch(`${s.t.ollamaUrl}/api/tags`);
    await until(() => warnLines(s!.t, "ollama upstream unavailable").length >= 5, "five backoff rounds");
    const back = await startOllamaSim({ ...FAST_OLLAMA, port: dead.port });
    revived.push(back);

    const res = await pending;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { models: unknown[] }).models.length).toBeGreaterThan(0);
    expect(callsTo(back.calls, "/api/tags")).toHaveLength(1);
    const delays = announcedDelays(s, "ollama upstream unavailable");
    expect(delays.slice(0, 5)).toEqual([20, 40, 80, 80, 80]);
    expect(new Set(delays.slice(2))).toEqual(new Set([80]));
    expect(warnLines(s.t, "ollama upstream unavailable")[0]).toContain("request=\"GET /api/tags\"");
  });

  test("a POST /prompt is retried until ComfyUI is back and reaches it exactly once; chats run while it backs off", async () => {
    const dead = await deadComfy();
    s = await startStack({ comfy: false, env: { ...BACKOFF, COMFY_URL: dead.url } });
    const id = newPromptId();
    const job = submit(s.t, promptBody(id));
    await until(() => warnLines(s!.t, "ComfyUI unavailable, retrying").length >= 2, "two backoff rounds");

    // The job gives the GPU back for every backoff sleep: the lock is seen idle, a chat goes
    // through while ComfyUI is still down.
    await until(() => s!.t.lock.state === "idle", "GPU idle while the job backs off");
    const c = await chat(s.t);
    expect(c.status).toBe(200);
    await c.text();
    expect(s.ollama!.calls.some((x) => x.path === "/api/chat")).toBe(true);

    await until(() => warnLines(s!.t, "ComfyUI unavailable, retrying").length >= 5, "more backoff rounds");
    const back = await startComfySim({ ...FAST_COMFY, gpu: s.gpu, port: dead.port });
    revived.push(back);
    const res = await job;
    expect(res.status).toBe(200);
    expect(JSON.parse(await res.text())).toMatchObject({ prompt_id: id });
    await s.t.settled();

    expect(callsTo(back.calls, "/prompt")).toHaveLength(1);
    expect(callsTo(back.calls, "/free")).toHaveLength(1);
    expect(back.jobs().map((j) => j.id)).toEqual([id]);
    const delays = announcedDelays(s, "ComfyUI unavailable, retrying");
    expect(delays.slice(0, 5)).toEqual([20, 40, 80, 80, 80]);
    // One job, one outcome: the attempts that found ComfyUI down are retries, not jobs.
    const counts = await jobCounts(s.t);
    expect(counts.completed).toBe(1);
    expect(total(counts)).toBe(1);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("a chat to a dead Ollama holds no LLM slot while it backs off: an image job runs meanwhile", async () => {
    const dead = await deadOllama();
    s = await startStack({ ollama: false, env: { ...BACKOFF, OLLAMA_URL: dead.url } });
    const pending = chat(s.t);
    await until(() => warnLines(s!.t, "ollama upstream unavailable").length >= 2, "chat backing off");
    const job = await submit(s.t, promptBody(newPromptId()));
    expect(job.status).toBe(200);
    await job.text();
    await until(() => s!.t.tracker.active().length === 0, "image job done");
    expect((await jobCounts(s.t)).completed).toBe(1);

    const back = await startOllamaSim({ ...FAST_OLLAMA, port: dead.port, gpu: s.gpu });
    revived.push(back);
    const res = await pending;
    expect(res.status).toBe(200);
    await res.text();
    expect(callsTo(back.calls, "/api/chat")).toHaveLength(1);
    await s.t.settled();
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  });
});

describe("UPSTREAM_RETRY_TIMEOUT: a dead upstream is given up on", () => {
  test("a chat to an Ollama that never comes back gets a 502 in its dialect after the timeout, and no slot stays held", async () => {
    const dead = await deadOllama();
    s = await startStack({ ollama: false, env: { ...BACKOFF, OLLAMA_URL: dead.url, UPSTREAM_RETRY_TIMEOUT: "300ms" } });
    const t0 = performance.now();
    const native = await chat(s.t);
    const waited = performance.now() - t0;
    expect(native.status).toBe(502);
    expect(((await native.json()) as { error: string }).error).toMatch(/gave up after trying for [\d.]+m?s \(\d+ attempts; UPSTREAM_RETRY_TIMEOUT is 300ms\)/);
    // Retried meanwhile, and answered once the timeout ran out (not before it).
    expect(warnLines(s.t, "ollama upstream unavailable").length).toBeGreaterThanOrEqual(3);
    expect(waited).toBeGreaterThanOrEqual(290);

    const openai = await fetch(`${s.t.ollamaUrl}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(openai.status).toBe(502);
    expect(((await openai.json()) as { error: { type: string } }).error.type).toBe("upstream_unreachable");
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  });

  test("an image job whose ComfyUI never comes back gets a 502 and releases the GPU", async () => {
    const dead = await deadComfy();
    s = await startStack({ comfy: false, env: { ...BACKOFF, COMFY_URL: dead.url, UPSTREAM_RETRY_TIMEOUT: "300ms" } });
    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("UPSTREAM_RETRY_TIMEOUT");
    await s.t.settled();
    expect((await jobCounts(s.t)).upstream_error).toBe(1);
  });
});

describe("5xx answers", () => {
  test("a POST answered 500 is passed back and never replayed", async () => {
    s = await startStack({ env: BACKOFF });
    const body = JSON.stringify({ error: "llama runner process has terminated: exit status 2" });
    s.ollama!.override("POST", "/api/chat", () => new Response(body, { status: 500, headers: { "content-type": "application/json" } }));
    const res = await chat(s.t);
    expect(res.status).toBe(500);
    expect(await res.text()).toBe(body);
    expect(callsTo(s.ollama!.calls, "/api/chat")).toHaveLength(1);
    expect(warnLines(s.t, "retrying")).toEqual([]);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  });

  test("a POST /prompt answered 500 reaches ComfyUI once and is passed back", async () => {
    s = await startStack({ env: BACKOFF });
    s.comfy!.override("POST", "/prompt", () => new Response("500 Internal Server Error", { status: 500 }));
    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(500);
    expect(await res.text()).toBe("500 Internal Server Error");
    expect(callsTo(s.comfy!.calls, "/prompt")).toHaveLength(1);
    expect(warnLines(s.t, "retrying")).toEqual([]);
  });

  test("a GET answered 503 three times is retried with doubling, capped backoff, then succeeds", async () => {
    s = await startStack({ env: BACKOFF });
    let n = 0;
    s.ollama!.override("GET", "/api/tags", () => (++n <= 3 ? new Response("busy", { status: 503 }) : undefined));
    const res = await fetch(`${s.t.ollamaUrl}/api/tags`);
    expect(res.status).toBe(200);
    await res.json();
    const calls = callsTo(s.ollama!.calls, "/api/tags");
    expect(calls).toHaveLength(4);
    expect(announcedDelays(s, "ollama upstream unavailable")).toEqual([20, 40, 80]);
    // The gaps between attempts are at least the announced delays (timers may fire up to ~1 ms early).
    const gaps = calls.slice(1).map((c, i) => c.at - calls[i]!.at);
    [20, 40, 80].forEach((d, i) => expect(gaps[i]!).toBeGreaterThanOrEqual(d - 2));
  });

  test("a GET that keeps answering 503 is passed back after 4 replays", async () => {
    s = await startStack({ env: BACKOFF });
    s.ollama!.override("GET", "/api/tags", () => new Response("still busy", { status: 503 }));
    const res = await fetch(`${s.t.ollamaUrl}/api/tags`);
    expect(res.status).toBe(503);
    expect(await res.text()).toBe("still busy");
    expect(callsTo(s.ollama!.calls, "/api/tags")).toHaveLength(5);
  });
});
