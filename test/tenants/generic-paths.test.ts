/**
 * The paths every new driver relies on (issue 29), proven end to end with the fake tenants of
 * test/support/fake-tenants.ts behind a real turnstile: the synchronous image job (the request is
 * the job), the LLM side drained before its release and restored before the first LLM request
 * after an image turn, and a release that answers 200 and keeps the memory.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { FakeImageTenant, FakeLlmTenant, startFakeServers, type FakeServers } from "../support/fake-tenants.ts";
import { startTestTurnstile, until, type TestTurnstile } from "../support/turnstile.ts";

let fakes: FakeServers;
let t: TestTurnstile | undefined;

beforeEach(() => {
  fakes = startFakeServers();
});

afterEach(async () => {
  await t?.close();
  t = undefined;
  fakes.stop();
});

function start(env: Record<string, string> = {}): TestTurnstile {
  t = startTestTurnstile(
    { OLLAMA_URL: fakes.llm.url, COMFY_URL: fakes.image.url, ...env },
    { tenants: { llm: new FakeLlmTenant(new URL(fakes.llm.url)), image: new FakeImageTenant(new URL(fakes.image.url)) } },
  );
  return t;
}

const chat = (tt: TestTurnstile) => fetch(`${tt.ollamaUrl}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "m", messages: [] }) });
const gen = (tt: TestTurnstile, signal?: AbortSignal) => fetch(`${tt.comfyUrl}/gen`, { method: "POST", body: "{}", signal });
const index = (call: string) => fakes.calls.indexOf(call);

describe("the synchronous image job", () => {
  test("the LLM side is released and proven before the request goes; the card is the image side's until the answer ends", async () => {
    const tt = start();
    await tt.probed;
    expect((await chat(tt)).status).toBe(200);
    expect(fakes.gpu.holding("ollama")).toBe(true);
    fakes.image.genMs = 150;
    const answer = gen(tt);
    await until(() => fakes.image.generating, "the generation started");
    expect(tt.lock.state).toBe("image");
    // Sleep, then the proof, then the job: never the job first.
    const slept = index("llm POST /sleep");
    const proof = fakes.calls.indexOf("llm GET /is_sleeping", slept);
    expect(slept).toBeGreaterThanOrEqual(0);
    expect(proof).toBeGreaterThan(slept);
    expect(proof).toBeLessThan(index("image POST /gen"));
    // The image side's restore comes after the LLM side's proof and before the job.
    expect(index("image POST /reload")).toBeGreaterThan(proof);
    expect(index("image POST /reload")).toBeLessThan(index("image POST /gen"));
    const res = await answer;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ images: ["aGk="] });
    await tt.settled();
    // Released after the answer, and proven from its own report.
    expect(index("image POST /unload")).toBeGreaterThan(index("image POST /gen"));
    expect(fakes.gpu.holding("comfy")).toBe(false);
    expect(fakes.gpu.overlaps()).toEqual([]);
    // The log names the servers the sides are, not Ollama and ComfyUI.
    const log = tt.logLines.join("\n");
    expect(log).toMatch(/image job \d+ completed; GPU released/);
    expect(log).toMatch(/image job \d+: FakeLLM empty/);
    expect(log).toMatch(/image job \d+: FakeImage memory released/);
    expect(log).toContain("FakeLLM (LLM side) is up");
    expect(log).toContain("FakeImage (image side) is up");
    expect(log).not.toMatch(/Ollama|ComfyUI/);
    // The status and the job log see it as any image job: started when sent, done with its outcome.
    // The job named as the tenant's route calls it, not ComfyUI's "prompt".
    expect(log).toMatch(/image job \d+: gen success/);
    expect(log).toMatch(/image job \d+: POST \/gen received/);
    expect(log).not.toMatch(/image job \d+: (prompt|\/prompt) /);
    expect(tt.status.snapshot(false).recent[0]).toMatchObject({ outcome: "completed", prompt_id: "POST /gen" });
  });

  test("an LLM request waits while the job runs, and the LLM side is woken before it is sent", async () => {
    const tt = start();
    await tt.probed;
    fakes.image.genMs = 150;
    const answer = gen(tt);
    await until(() => fakes.image.generating, "the generation started");
    const waiting = chat(tt);
    const res = await answer;
    expect(res.status).toBe(200);
    const c = await waiting;
    expect(c.status).toBe(200);
    // wake_up came after the image side's release and before the chat reached the LLM side.
    const lastChat = fakes.calls.lastIndexOf("llm POST /v1/chat/completions");
    const wake = fakes.calls.lastIndexOf("llm POST /wake_up");
    expect(wake).toBeGreaterThan(index("image POST /unload"));
    expect(wake).toBeLessThan(lastChat);
    expect(fakes.gpu.overlaps()).toEqual([]);
  });

  test("two LLM requests after an image turn share one restore", async () => {
    const tt = start();
    await tt.probed;
    expect((await chat(tt)).status).toBe(200); // the start's own wake
    const before = fakes.calls.filter((c) => c === "llm POST /wake_up").length;
    expect((await gen(tt)).status).toBe(200);
    await tt.settled();
    const [a, b] = await Promise.all([chat(tt), chat(tt)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(fakes.calls.filter((c) => c === "llm POST /wake_up").length).toBe(before + 1);
  });

  test("the LLM side's own requests are drained before its release", async () => {
    const tt = start();
    await tt.probed;
    expect((await chat(tt)).status).toBe(200);
    // A request the LLM server runs for a client that does not use the turnstile.
    fakes.llm.ownRunning = 1;
    const answer = gen(tt);
    await until(() => fakes.calls.filter((c) => c === "llm GET /metrics").length >= 2, "the drain polled the busy count twice");
    expect(fakes.calls.includes("llm POST /sleep")).toBe(false);
    expect(fakes.calls.includes("image POST /gen")).toBe(false);
    fakes.llm.ownRunning = 0;
    expect((await answer).status).toBe(200);
    expect(fakes.llm.sleptWithRunning).toEqual([0]);
  });

  test("a client that goes mid-job: the job is interrupted, released, and the card handed on", async () => {
    const tt = start();
    await tt.probed;
    fakes.image.genMs = Infinity;
    const ac = new AbortController();
    const answer = gen(tt, ac.signal).catch((e: unknown) => e);
    await until(() => fakes.image.generating, "the generation started");
    ac.abort();
    await answer;
    await tt.settled();
    expect(index("image POST /unload")).toBeGreaterThan(index("image POST /gen"));
    expect(fakes.image.generating).toBe(false);
    expect(tt.lock.state).toBe("idle");
    expect(fakes.gpu.holding("comfy")).toBe(false);
  });

  test("a job that never answers is cut at JOB_TIMEOUT: 504, interrupted, released", async () => {
    const tt = start({ JOB_TIMEOUT: "300ms" });
    await tt.probed;
    fakes.image.genMs = Infinity;
    const t0 = performance.now();
    const res = await gen(tt);
    expect(res.status).toBe(504);
    expect(await res.text()).toContain("JOB_TIMEOUT");
    expect(performance.now() - t0).toBeLessThan(3000);
    await tt.settled();
    expect(fakes.calls).toContain("image POST /interrupt");
    expect(fakes.gpu.holding("comfy")).toBe(false);
    expect(tt.lock.state).toBe("idle");
  });
});

describe("the image side's restore and interrupt", () => {
  test("a restore that ran is released even when the job that opened the session left before it was sent", async () => {
    const tt = start();
    await tt.probed;
    expect((await gen(tt)).status).toBe(200);
    await tt.settled();
    expect(fakes.gpu.holding("comfy")).toBe(false);
    // The next session restores the checkpoint first (slowly), and its only client leaves meanwhile.
    fakes.image.reloadMs = 200;
    const ac = new AbortController();
    const answer = gen(tt, ac.signal).catch((e: unknown) => e);
    // The first session's opening restored too: wait for this one's (its client must have reached the turnstile).
    await until(() => fakes.calls.filter((c) => c === "image POST /reload").length === 2, "the restore began");
    ac.abort();
    await answer;
    await until(() => fakes.calls.filter((c) => c === "image POST /unload").length === 2, "the restored checkpoint released");
    await tt.settled();
    expect(fakes.calls.filter((c) => c === "image POST /gen").length).toBe(1);
    expect(fakes.gpu.holding("comfy")).toBe(false);
    // The card is free for the LLM side, and nothing of the image side overlaps it.
    expect((await chat(tt)).status).toBe(200);
    expect(fakes.gpu.overlaps()).toEqual([]);
  });

  test("a client that leaves while its job waits behind another does not interrupt that one", async () => {
    const tt = start();
    await tt.probed;
    fakes.image.genMs = 300;
    const ac = new AbortController();
    const first = gen(tt);
    await until(() => fakes.image.generating, "the first generation started");
    const second = gen(tt, ac.signal).catch((e: unknown) => e);
    await until(() => tt.status.snapshot(false).image.jobs.length === 2, "the second joined the session");
    ac.abort();
    await second;
    const res = await first;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ images: ["aGk="] });
    await tt.settled();
    expect(fakes.calls).not.toContain("image POST /interrupt");
    expect(fakes.calls.filter((c) => c === "image POST /gen").length).toBe(1);
    expect(fakes.gpu.holding("comfy")).toBe(false);
  });

  test("jobs of one session go one at a time, so JOB_TIMEOUT counts each job's own run", async () => {
    const tt = start({ JOB_TIMEOUT: "500ms" });
    await tt.probed;
    fakes.image.genMs = 300;
    const answers = await Promise.all([gen(tt), gen(tt), gen(tt)]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    await tt.settled();
    expect(fakes.calls.filter((c) => c.endsWith("/gen"))).toEqual([
      "image POST /gen",
      "image done /gen",
      "image POST /gen",
      "image done /gen",
      "image POST /gen",
      "image done /gen",
    ]);
    // One session: one LLM hand-over, one image release.
    expect(fakes.calls.filter((c) => c === "image POST /unload").length).toBe(1);
  });
});

test("a websocket its tenant counts as GPU work is refused, not relayed without the lock", async () => {
  const tt = start();
  await tt.probed;
  const upgrade = { upgrade: "websocket", connection: "Upgrade", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" };
  const res = await fetch(`${tt.comfyUrl}/gen-ws`, { headers: upgrade });
  expect(res.status).toBe(403);
  expect(await res.text()).toContain("runs GPU work over a websocket");
  expect(fakes.calls).not.toContain("image GET /gen-ws");
  // Any other websocket is relayed as before (the fake has none: the upstream's own 404 comes back).
  expect((await fetch(`${tt.comfyUrl}/ws`, { headers: upgrade })).status).not.toBe(403);
  expect(fakes.calls).toContain("image GET /ws");
});

test("a generation running when the turnstile starts keeps the card until it ends and is released", async () => {
  // The LLM side holds a model and the image side generates for a client that went to it directly.
  await fetch(`${fakes.llm.url}/v1/chat/completions`, { method: "POST", body: "{}" });
  fakes.image.genMs = 300;
  const direct = fetch(`${fakes.image.url}/gen`, { method: "POST", body: "{}" });
  await until(() => fakes.image.generating, "the direct generation started");
  const started = fakes.gpu.now();
  const tt = start();
  await tt.probed;
  expect(tt.lock.state).toBe("image");
  const c = await chat(tt);
  expect(c.status).toBe(200);
  expect((await direct).status).toBe(200);
  // The chat went after the generation ended and the image side was released.
  expect(fakes.calls.lastIndexOf("llm POST /v1/chat/completions")).toBeGreaterThan(index("image POST /unload"));
  // The overlap the direct clients made was ended by the start's hand-over; the turnstile made none.
  expect(fakes.gpu.overlaps().filter((o) => o.to === null || o.from >= started)).toEqual([]);
  expect(tt.logLines.join("\n")).toContain("FakeImage runs 1 job(s) at start: the GPU stays image until it is released");
});

test("WARM_MODEL with another kind is said to be ignored, not silently dropped", async () => {
  const tt = start({ WARM_MODEL: "llama3.2" });
  await tt.probed;
  expect(tt.logLines.join("\n")).toContain("WARM_MODEL=llama3.2 is ignored: it warms Ollama after ComfyUI's jobs, and this turnstile runs FakeLLM with FakeImage");
});

test("a credential for a kind not in use is said to be ignored, without its value", async () => {
  const tt = start({ SWARMUI_TOKEN: "s3cret-swarm", LMSTUDIO_TOKEN: "s3cret-lms" });
  await tt.probed;
  const log = tt.logLines.join("\n");
  expect(log).toContain("SWARMUI_TOKEN is set but ignored: it is for IMAGE_KIND=swarmui, and this turnstile runs LLM_KIND=ollama, IMAGE_KIND=comfyui");
  expect(log).toContain("LMSTUDIO_TOKEN is set but ignored: it is for LLM_KIND=lmstudio");
  expect(log).not.toContain("s3cret");
});

test("the status shows what another LLM kind holds, from its resident()", async () => {
  // Loaded before the turnstile starts (a client that went to the server directly).
  await fetch(`${fakes.llm.url}/v1/chat/completions`, { method: "POST", body: "{}" });
  const tt = start();
  await tt.probed;
  await until(() => tt.status.card().models !== null, "the first read of the LLM side's residents");
  expect(tt.status.card().models).toEqual([{ name: "fake-llm", size: 0, size_vram: 0, expires_at: null }]);
});

describe("a release answered as done that keeps the memory", () => {
  test("holds the card up to FREE_TIMEOUT, warns once, and the status says so", async () => {
    const tt = start({ FREE_TIMEOUT: "300ms", LOGLEVEL: "info" });
    await tt.probed;
    fakes.image.lie = true;
    expect((await gen(tt)).status).toBe(200);
    await tt.settled();
    const lied = () => tt.logLines.filter((l) => l.includes("answered its release as done but kept the memory"));
    expect(lied().length).toBe(1);
    expect(lied()[0]).toContain("WARN");
    expect(tt.status.snapshot(false).upstreams.comfy?.release_kept_memory).toContain("FakeImage answered the release as done but still reports memory held");
    // The second time is not shouted again.
    expect((await gen(tt)).status).toBe(200);
    await tt.settled();
    expect(lied().length).toBe(2);
    expect(lied()[1]).not.toContain("WARN");
    // A release that is proven clears the status.
    fakes.image.lie = false;
    expect((await gen(tt)).status).toBe(200);
    await tt.settled();
    expect(tt.status.snapshot(false).upstreams.comfy?.release_kept_memory).toBeUndefined();
  });
});
