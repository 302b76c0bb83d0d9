/**
 * /turnstile/status and /turnstile/events through real sockets against the simulators: a chat
 * stream, an image job waiting behind it, a chat waiting behind the image, the image running and
 * freeing, a second image joining its session; then back to idle.
 */
import { afterEach, expect, test } from "bun:test";
import type { StatusDoc } from "../../../src/status/model.ts";
import { readSse } from "../../../src/status/sse-read.ts";
import { newPromptId, postJson, promptBody, startStack, submit, until, type Stack } from "./helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

async function status(base: string, headers: Record<string, string> = {}): Promise<StatusDoc> {
  const res = await fetch(`${base}/turnstile/status`, { headers });
  expect(res.status).toBe(200);
  return (await res.json()) as StatusDoc;
}

/** Reads SSE events off a response body into `out` until the body ends. */
async function readEvents(res: Response, out: { event: string; data: any }[]): Promise<void> {
  try {
    for await (const e of readSse(res.body!)) out.push(e);
  } catch {
    // the test aborts the stream when it is done with it
  }
}

test("status and events follow a chat, a waiting image, a waiting chat, a running image and a second one joining its session", async () => {
  stack = await startStack({ ollama: { tokenDelayMs: 30, tokens: 12 }, comfy: { jobMs: 400, freeDelayMs: 50 } });
  const { t } = stack;
  const events: { event: string; data: any }[] = [];
  const stopReading = new AbortController();
  const sse = await fetch(`${t.comfyUrl}/turnstile/events`, { signal: stopReading.signal });
  expect(sse.headers.get("content-type")).toContain("text/event-stream");
  const reading = readEvents(sse, events);
  await until(() => events.length > 0, "the first event");
  expect(events[0]!.event).toBe("status");
  expect(events[0]!.data).toMatchObject({ state: "idle", version: "v0.0.0-test", lease: null, upstreams: { ollama: { up: true }, comfy: { up: true } } });

  // 1. A chat stream holds the GPU.
  const chat = postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", stream: true, messages: [{ role: "user", content: "hi" }] });
  await until(async () => (await status(t.ollamaUrl)).llm.inflight === 1, "the chat in flight");
  let s = await status(t.ollamaUrl);
  expect(s.state).toBe("llm");
  expect(s.llm.requests).toEqual([expect.objectContaining({ path: "/api/chat", model: "llama3.2", client: "127.0.0.1", waiting: false })]);

  // 2. An image job waits for it; 3. a second chat waits behind the image.
  const p1 = newPromptId();
  const job1 = submit(t, promptBody(p1));
  await until(async () => (await status(t.comfyUrl)).image.waiting === 1, "the image waiting");
  s = await status(t.ollamaUrl);
  expect(s.image.jobs).toEqual([expect.objectContaining({ phase: "waiting", client: "127.0.0.1" })]);
  expect(s.waiting).toEqual([expect.objectContaining({ kind: "image", reason: "draining chats (1 in flight)", retry_after_s: expect.any(Number) })]);
  const chat2 = postJson(`${t.ollamaUrl}/api/chat`, { model: "qwen2.5:7b", stream: false, messages: [{ role: "user", content: "hi" }] });
  await until(async () => (await status(t.ollamaUrl)).llm.waiting === 1, "the second chat waiting");
  s = await status(t.ollamaUrl);
  expect(s.state).toBe("llm");
  expect(s.llm.requests.find((r) => r.waiting)).toMatchObject({ model: "qwen2.5:7b" });
  expect(s.waiting.map((w) => [w.kind, w.reason])).toEqual([
    ["image", "draining chats (1 in flight)"],
    ["llm", `behind image job ${s.image.jobs[0]!.job} (waiting too)`],
  ]);
  expect(s.llm.oldest_wait_ms).toBeGreaterThanOrEqual(0);
  await (await chat).text();

  // 4. The image runs; a second image queues behind it.
  await until(async () => (await status(t.comfyUrl)).image.running?.phase === "running", "the image running");
  s = await status(t.comfyUrl);
  expect(s.state).toBe("image");
  expect(s.image.running).toMatchObject({ prompt_id: p1, phase: "running" });
  expect(s.llm.waiting).toBe(1);
  // The GPU is in an image session: a second image (another client's: fair turns hold a client's
  // second job until its first has ended) joins it at once and queues in ComfyUI.
  const p2 = newPromptId();
  const job2 = submit(t, JSON.stringify({ ...JSON.parse(promptBody(p2)), client_id: "second-tab" }));
  expect((await (await job2).json()).prompt_id).toBe(p2);
  s = await status(t.comfyUrl);
  expect(s.image.session?.jobs.map((j) => j.prompt_id)).toContain(p2);
  await until(async () => (await status(t.comfyUrl)).image.running?.phase === "freeing", "the session freeing");

  expect((await (await job1).json()).prompt_id).toBe(p1);
  await stack.t.settled();
  await (await chat2).text();
  await until(async () => (await status(t.comfyUrl)).state === "idle", "back to idle");
  s = await status(t.comfyUrl);
  expect(s.llm).toEqual({ inflight: 0, waiting: 0, oldest_wait_ms: 0, requests: [], requests_omitted: 0 });
  expect(s.image).toEqual({ running: null, queued: 0, waiting: 0, retrying: 0, session: null, jobs: [], jobs_omitted: 0 });
  expect(s.waiting).toEqual([]);
  expect(s.waiting_omitted).toBe(0);
  // The image job's unload read /api/ps until it was empty; its /free read /system_stats. The
  // chat that waited then loaded its model, and the hand-off's offload check read /api/ps again.
  await until(async () => (await status(t.comfyUrl)).models?.map((m) => m.name).join() === "qwen2.5:7b", "the chat's model listed");
  s = await status(t.comfyUrl);
  expect(s.models![0]).toMatchObject({ name: "qwen2.5:7b", size_vram: s.models![0]!.size });
  expect(s.models_at).toBeGreaterThan(0);
  expect(s.comfy_memory!.total).toBeGreaterThan(0);
  expect(s.comfy_memory!.used).toBeGreaterThanOrEqual(0);
  expect(s.recent.map((r) => [r.prompt_id, r.outcome])).toEqual([
    [p1, "completed"],
    [p2, "completed"],
  ]);
  // The session's opener emptied Ollama; its last job freed ComfyUI.
  expect(s.recent[0]).toMatchObject({ unload_ms: expect.any(Number), job_ms: expect.any(Number) });
  expect(s.recent[1]).toMatchObject({ job_ms: expect.any(Number), free_ms: expect.any(Number), vram_reclaimed: expect.any(Number) });
  expect(s.history.map((h) => h.state).slice(0, 3)).toEqual(["idle", "llm", "image"]);

  // The events tell the same story, in order.
  await until(() => events.some((e) => e.event === "state" && e.data.state === "idle" && e.data.from !== "idle" && events.indexOf(e) > 3), "the idle event");
  const states = events.filter((e) => e.event === "state").map((e) => e.data.state);
  expect(states.slice(0, 2)).toEqual(["llm", "image"]);
  expect(states.at(-1)).toBe("idle");
  const phases = (p: string) => events.filter((e) => e.event === "job" && e.data.prompt_id === p).map((e) => e.data.phase);
  // The job is known by its prompt_id from its arrival (the turnstile checked or minted it).
  expect(phases(p1)).toEqual(["waiting", "unloading", "sending", "queued", "running", "freeing", "done"]);
  const job1Events = events.filter((e) => e.event === "job" && e.data.job === events.find((x) => x.event === "job" && x.data.prompt_id === p1)!.data.job);
  expect(job1Events.map((e) => e.data.phase)).toEqual(["waiting", "unloading", "sending", "queued", "running", "freeing", "done"]);
  expect(events.some((e) => e.event === "holders" && e.data.llm.waiting === 1)).toBe(true);
  stopReading.abort();
  await reading;
}, 15_000);

test("unknown paths under /turnstile/ answer JSON 404, writes 405, and /turnstile redirects", async () => {
  stack = await startStack({ comfy: false });
  const { t } = stack;
  const r404 = await fetch(`${t.ollamaUrl}/turnstile/nope`);
  expect(r404.status).toBe(404);
  expect(await r404.json()).toEqual({ error: "gpu-turnstile: no such page: /turnstile/nope" });
  const r405 = await fetch(`${t.ollamaUrl}/turnstile/status`, { method: "POST" });
  expect(r405.status).toBe(405);
  const redirect = await fetch(`${t.ollamaUrl}/turnstile`, { redirect: "manual" });
  expect(redirect.status).toBe(308);
  expect(redirect.headers.get("location")).toBe("/turnstile/");
  expect(stack.ollama!.calls.filter((c) => c.path.startsWith("/turnstile"))).toEqual([]);
});

test("an open event stream does not hold up a graceful stop", async () => {
  stack = await startStack({ comfy: false });
  const { t } = stack;
  const res = await fetch(`${t.ollamaUrl}/turnstile/events`);
  const reader = res.body!.getReader();
  expect((await reader.read()).done).toBe(false);
  const s = stack;
  stack = undefined;
  await s.stop();
  for (;;) if ((await reader.read().catch(() => ({ done: true }))).done) break;
  expect(t.logLines.join("")).not.toContain("still open after SHUTDOWN_TIMEOUT");
});

test("the /turnstile/ pages sit behind the Host rules: a DNS-rebinding page cannot read them", async () => {
  stack = await startStack({ comfy: false });
  const { t } = stack;
  const host = `evil.example:${new URL(t.ollamaUrl).port}`;
  for (const path of ["/turnstile/status", "/turnstile/", "/turnstile/events"]) {
    const res = await fetch(`${t.ollamaUrl}${path}`, { headers: { host, origin: `http://${host}` } });
    expect(res.status).toBe(403);
    await res.body?.cancel();
  }
  expect((await fetch(`${t.ollamaUrl}/turnstile/status`)).status).toBe(200);
});

test("a chat that is refused, or whose client leaves mid-stream, leaves no entry behind", async () => {
  stack = await startStack({ ollama: { tokenDelayMs: 50, tokens: 100 }, comfy: { jobMs: 300 }, env: { LLM_BUSY_MODE: "reject" } });
  const { t } = stack;
  const leaving = new AbortController();
  const res = await postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", stream: true, messages: [{ role: "user", content: "hi" }] }, leaving.signal);
  const reader = res.body!.getReader();
  await reader.read();
  expect((await status(t.ollamaUrl)).llm.requests).toHaveLength(1);
  leaving.abort();
  await until(async () => (await status(t.ollamaUrl)).llm.requests.length === 0, "the left stream's entry gone");

  const job = submit(t, promptBody(newPromptId()));
  await until(async () => (await status(t.comfyUrl)).state === "image", "the image job holding the GPU");
  const refused = await postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] });
  expect(refused.status).toBe(503);
  expect((await status(t.ollamaUrl)).llm.requests).toEqual([]);
  await (await job).text();
});

test("a chat only retrying a dead Ollama is shown as retrying: neither holding the GPU nor waiting for it", async () => {
  stack = await startStack({ comfy: false, env: { UPSTREAM_RETRY_TIMEOUT: "10s", BACKOFF_INITIAL: "50ms", BACKOFF_MAX: "100ms" } });
  const { t } = stack;
  await stack.ollama!.stop();
  const gone = new AbortController();
  const chat = postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }, gone.signal).catch(() => undefined);
  await until(async () => (await status(t.ollamaUrl)).llm.requests.some((r) => r.retrying), "the chat retrying");
  const s = await status(t.ollamaUrl);
  expect(s.llm).toMatchObject({ inflight: 0, waiting: 0 });
  expect(s.waiting).toEqual([]);
  expect(s.state).toBe("idle");
  gone.abort();
  await chat;
});
