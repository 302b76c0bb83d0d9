/**
 * The start-up read (SPEC "Restarts", issue 26 points 5, 11, 14), against the simulators: the
 * first answers wait for both upstreams' first probes and ComfyUI's work, each bounded by
 * PROBE_TIMEOUT; a ComfyUI that accepts connections but is too slow to say what it runs is held
 * for (fail closed), not taken for idle, up to JOB_TIMEOUT. The GPU ledger shows no overlap.
 */
import { afterEach, expect, test } from "bun:test";
import { type ComfySim, type OllamaSim, SimGpu, startComfySim, startOllamaSim } from "../../../src/sim/index.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { callsTo, chat, FAST_COMFY, FAST_OLLAMA, newPromptId, postJson, promptBody, type Stack, startStack, until, waitFor } from "./helpers.ts";

let s: Stack | undefined;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await s?.stop();
  s = undefined;
});

/** A job sent straight to ComfyUI, as a killed turnstile had forwarded it; resolves once it runs. */
async function runningDirect(comfy: ComfySim, jobMs: number): Promise<string> {
  const id = newPromptId();
  const res = await postJson(`${comfy.url}/prompt`, promptBody(id, { sim_job_ms: jobMs }));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => comfy.runningJob(), "ComfyUI running the job");
  return id;
}

/**
 * ComfyUI keeps accepting connections, but its work routes answer only once `answer()` is
 * called (a busy ComfyUI; the reads in between run into PROBE_TIMEOUT).
 */
function slowWork(comfy: ComfySim): { answer(): void } {
  let answer!: () => void;
  const answered = new Promise<void>((r) => (answer = r));
  for (const path of ["/api/jobs", "/queue"]) comfy.override("GET", path, () => answered.then(() => undefined));
  cleanups.push(answer);
  return { answer };
}

const lines = (t: TestTurnstile, match: string) => t.logLines.filter((l) => l.includes(match));

/** Simulators on one GPU, and a turnstile started in front of them but not awaited. */
async function sims(): Promise<{ gpu: SimGpu; ollama: OllamaSim; comfy: ComfySim }> {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ ...FAST_OLLAMA, gpu });
  const comfy = await startComfySim({ ...FAST_COMFY, gpu });
  cleanups.push(() => Promise.all([ollama.stop(), comfy.stop()]));
  return { gpu, ollama, comfy };
}

function turnstile(env: Record<string, string>): TestTurnstile {
  const t = startTestTurnstile(env);
  cleanups.push(() => t.close());
  return t;
}

test("ComfyUI running a job but too slow to answer at start: the GPU is held as image until its work is read; the chat loads after the job and its /free", async () => {
  let id = "";
  let slow: { answer(): void } | undefined;
  s = await startStack({
    env: { PROBE_TIMEOUT: "200ms", LOGLEVEL: "info" },
    beforeStart: async ({ comfy }) => {
      id = await runningDirect(comfy!, 1500);
      slow = slowWork(comfy!);
    },
  });
  // Fail closed: not idle, although nothing could be read yet.
  expect(s.t.lock.state).toBe("image");
  expect(lines(s.t, "ComfyUI accepts connections but its work could not be read at start")).toHaveLength(1);
  expect(lines(s.t, "at most JOB_TIMEOUT (5s)")).toHaveLength(1);
  const res = chat(s.t);
  await until(() => s!.t.lock.snapshot().llmWaiting === 1, "the chat waiting at the lock");
  // ComfyUI answers again while its job still runs: the job is picked up in the same hold.
  slow!.answer();
  expect((await res).status).toBe(200);
  expect(lines(s.t, "ComfyUI's work read")).toHaveLength(1);
  expect(lines(s.t, "picked up 1 ComfyUI job(s)")[0]).toContain(id);
  const job = s.comfy!.jobs().find((j) => j.id === id)!;
  expect(job.state).toBe("done");
  const chatAt = callsTo(s.ollama!.calls, "/api/chat")[0]!.at;
  const freeAt = callsTo(s.comfy!.calls, "/free")[0]!.at;
  expect(freeAt).toBeGreaterThanOrEqual(job.endedAt!);
  expect(chatAt).toBeGreaterThan(freeAt);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("a client's image job that joins the hold's session (IMAGE_SESSION_MAX) is followed by its own request, not picked up a second time", async () => {
  let slow: { answer(): void } | undefined;
  s = await startStack({
    env: { PROBE_TIMEOUT: "200ms", IMAGE_SESSION_MAX: "5m", LOGLEVEL: "info" },
    beforeStart: async ({ comfy }) => void (slow = slowWork(comfy!)),
  });
  expect(s.t.lock.state).toBe("image");
  const id = newPromptId();
  const res = await postJson(`${s.t.comfyUrl}/prompt`, promptBody(id, { sim_job_ms: 600 }));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => s!.comfy!.runningJob(), "ComfyUI running the client's job");
  slow!.answer();
  await until(() => lines(s!.t, "ComfyUI's work read").length === 1, "the hold's read answered");
  expect(lines(s.t, "nothing to pick up")).toHaveLength(1);
  expect(lines(s.t, "picked up")).toEqual([]);
  const answer = await chat(s.t);
  expect(answer.status).toBe(200);
  expect(callsTo(s.ollama!.calls, "/api/chat")[0]!.at).toBeGreaterThan(s.comfy!.jobs().find((j) => j.id === id)!.endedAt!);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("ComfyUI whose work stays unread: the hold ends at JOB_TIMEOUT with an error line, /free is asked, and the chat goes on", async () => {
  s = await startStack({
    env: { PROBE_TIMEOUT: "100ms", JOB_TIMEOUT: "600ms", LOGLEVEL: "warn" },
    beforeStart: async ({ comfy }) => void slowWork(comfy!),
  });
  expect(s.t.lock.state).toBe("image");
  const res = await chat(s.t);
  expect(res.status).toBe(200);
  const bound = lines(s.t, "ComfyUI's work still unread JOB_TIMEOUT (600ms) after start");
  expect(bound).toHaveLength(1);
  expect(bound[0]).toMatch(/\bERROR\b/i);
  // Its reason names the bound that ended the last read: JOB_TIMEOUT's end cut it short, which is
  // not "PROBE_TIMEOUT (1ms)" (nor 96.4821ms) when PROBE_TIMEOUT is 100ms.
  expect(bound[0]).not.toMatch(/PROBE_TIMEOUT \((?!100ms\))/);
  expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
  expect(callsTo(s.ollama!.calls, "/api/chat")[0]!.at).toBeGreaterThan(callsTo(s.comfy!.calls, "/free")[0]!.at);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("ComfyUI that stops running during the hold (restarted, killed) holds nothing: the GPU is released and the chat goes on", async () => {
  s = await startStack({
    env: { PROBE_TIMEOUT: "100ms", JOB_TIMEOUT: "1m", LOGLEVEL: "info" },
    beforeStart: async ({ comfy }) => void slowWork(comfy!),
  });
  expect(s.t.lock.state).toBe("image");
  const res = chat(s.t);
  await until(() => s!.t.lock.snapshot().llmWaiting === 1, "the chat waiting at the lock");
  await s.comfy!.crash();
  expect((await res).status).toBe(200);
  expect(lines(s.t, "ComfyUI stopped running")).toHaveLength(1);
  expect(lines(s.t, "still unread")).toEqual([]);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("ComfyUI not running at start (connection refused): the start goes on idle at once, with a line", async () => {
  const { ollama, comfy } = await sims();
  await comfy.crash();
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: comfy.url, LOGLEVEL: "warn" });
  await t.probed;
  expect(t.lock.state).toBe("idle");
  expect(lines(t, "ComfyUI is not running at start")).toHaveLength(1);
  expect(lines(t, "could not be read")).toEqual([]);
});

test("/readyz asked the moment the listeners accept: the start-up probes decide it, never 'not probed yet' taken for down", async () => {
  const { ollama, comfy } = await sims();
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: comfy.url });
  const answers = await Promise.all([
    fetch(`${t.ollamaUrl}/readyz`),
    fetch(`${t.comfyUrl}/readyz`),
    fetch(`${t.ollamaUrl}/healthz`),
  ]);
  expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
  expect(((await answers[2]!.json()) as { upstreams: unknown }).upstreams).toEqual({ ollama: "up", comfy: "up" });
});

test("an Ollama that does not answer its version probe holds the start-up read for PROBE_TIMEOUT at most, and the log names the bound", async () => {
  const { ollama, comfy } = await sims();
  let answer!: () => void;
  const answered = new Promise<void>((r) => (answer = r));
  ollama.override("GET", "/api/version", () => answered.then(() => undefined));
  cleanups.push(answer);
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: comfy.url, PROBE_TIMEOUT: "200ms", LOGLEVEL: "warn" });
  const first = await fetch(`${t.ollamaUrl}/healthz`);
  expect(((await first.json()) as { upstreams: unknown }).upstreams).toEqual({ ollama: "down", comfy: "up" });
  expect(lines(t, "ollama is down")[0]).toContain("no answer within PROBE_TIMEOUT (200ms)");
});

test("the first moments after start, an image job running: a cloud chat and an unload are answered at once, not held behind the job", async () => {
  const { gpu, ollama, comfy } = await sims();
  await runningDirect(comfy, 1500);
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: comfy.url });
  const messages = [{ role: "user", content: "hi" }];
  const free = [
    () => postJson(`${t.ollamaUrl}/api/chat`, { model: "gpt-oss:120b-cloud", messages, stream: false }),
    () => postJson(`${t.ollamaUrl}/api/generate`, { model: "llama3.2", keep_alive: 0 }),
  ];
  const answers = await Promise.all(free.map(async (send) => ({ status: (await send()).status, lockWas: t.lock.state })));
  expect(answers).toEqual([
    { status: 200, lockWas: "image" },
    { status: 200, lockWas: "image" },
  ]);
  await t.settled();
  expect(gpu.overlaps()).toEqual([]);
});
