/**
 * A blind unload still unloads: when Ollama's /api/ps hangs or fails, the image job sends
 * keep_alive:0 to every model the turnstile routed a chat to since /api/ps was last seen empty,
 * and to every model the last good /api/ps listed — so the GPU ledger shows no overlap even though
 * nothing could confirm the unload.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { callsTo, chat, jobCounts, newPromptId, postJson, promptBody, type Stack, startStack, submit, warnLines } from "./helpers.ts";

let s: Stack | undefined;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
  await s?.stop();
  s = undefined;
});

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

/** An /api/ps that never answers until the test ends (then it fails, so nothing lingers). */
function hangPs(stack: Stack): void {
  let end!: () => void;
  const ended = new Promise<void>((r) => (end = r));
  const off = stack.ollama!.override("GET", "/api/ps", () => ended.then(() => json(500, { error: "test over" })));
  cleanups.push(() => (off(), end()));
}

/** The models keep_alive:0 was sent to, in order. */
function unloadsSent(stack: Stack): string[] {
  return callsTo(stack.ollama!.calls, "/api/generate")
    .map((c) => JSON.parse(c.bodyText) as { model: string; keep_alive?: unknown })
    .filter((b) => b.keep_alive === 0)
    .map((b) => b.model);
}

// PROBE_TIMEOUT bounds each /api/ps read (at most half of UNLOAD_TIMEOUT), so a hanging one is
// given up on with time left to poll again.
const ENV = { UNLOAD_TIMEOUT: "600ms", PROBE_TIMEOUT: "200ms" };

function failPs(stack: Stack): void {
  stack.ollama!.override("GET", "/api/ps", () => json(500, { error: "boom" }));
}

type Chat = (t: Stack["t"]) => Promise<Response>;
const nativeChat: Chat = (t) => chat(t, "llama3.2");
// OpenAI's SDKs put the model after the messages.
const openaiChat: Chat = (t) =>
  postJson(`${t.ollamaUrl}/v1/chat/completions`, `{"messages":[{"role":"user","content":"say \\"model\\""}],"model":"llama3.2"}`);
// A chunked body (no Content-Length) streams to Ollama instead of being buffered.
const streamedChat: Chat = (t) => {
  const bytes = new TextEncoder().encode(JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }));
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(bytes.subarray(0, 5));
      c.enqueue(bytes.subarray(5));
      c.close();
    },
  });
  return fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body, headers: { "content-type": "application/json" } });
};

describe("Ollama's /api/ps cannot be read after a chat", () => {
  test("a client flooding made-up model names cannot push the loaded model out of what is unloaded blind", async () => {
    s = await startStack({ env: ENV });
    const c = await chat(s.t, "llama3.2");
    expect(c.status).toBe(200);
    await c.text();
    // More names than the memory keeps, each answered 404 by Ollama: nothing of them can be loaded.
    for (let i = 0; i < 40; i++) {
      const r = await chat(s.t, `no-such-model-${i}`);
      expect(r.status).toBe(404);
      await r.text();
    }
    expect(s.ollama!.loadedModels()).toEqual(["llama3.2:latest"]);
    failPs(s);
    s.ollama!.clearCalls();

    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();

    expect(unloadsSent(s)).toEqual(["llama3.2"]);
    expect(s.ollama!.loadedModels()).toEqual([]);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test.each([
    ["hangs", "a native chat", hangPs, nativeChat],
    ["answers 500", "a native chat", failPs, nativeChat],
    ["answers 500", "an OpenAI-compatible chat", failPs, openaiChat],
    ["answers 500", "a chat with a streamed body", failPs, streamedChat],
  ] as [string, string, (s: Stack) => void, Chat][])("/api/ps %s after %s: keep_alive:0 goes to its model, the ledger shows no overlap", async (_f, _c, fault, send) => {
    s = await startStack({ env: ENV });
    const c = await send(s.t);
    expect(c.status).toBe(200);
    await c.text();
    expect(s.ollama!.loadedModels()).toEqual(["llama3.2:latest"]);
    fault(s);
    s.ollama!.clearCalls();

    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();

    expect(s.gpu.overlaps()).toEqual([]);
    expect(unloadsSent(s)).toEqual(["llama3.2"]);
    expect(s.ollama!.loadedModels()).toEqual([]);
    // It kept polling until UNLOAD_TIMEOUT, then went on, and said so with what it tried.
    expect(callsTo(s.ollama!.calls, "/api/ps").length).toBeGreaterThanOrEqual(2);
    const warn = warnLines(s.t, "unload not confirmed");
    expect(warn).toHaveLength(1);
    expect(warn[0]).toContain("tried=llama3.2");
    expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
  });
});

test("a model the last good /api/ps listed is unloaded blind by the next job", async () => {
  s = await startStack({ env: ENV });
  // Loaded behind the turnstile's back: only /api/ps knows about it.
  const pre = await postJson(`${s.ollama!.url}/api/generate`, { model: "qwen2.5:7b", prompt: "" });
  await pre.text();
  // The first job reads /api/ps fine, but Ollama acknowledges the unload and keeps the model.
  const offUnload = s.ollama!.override("POST", "/api/generate", () => json(200, { done: true, done_reason: "unload" }));
  const first = await submit(s.t, promptBody(newPromptId()));
  await first.text();
  await s.t.settled();
  expect(s.ollama!.loadedModels()).toEqual(["qwen2.5:7b"]);
  offUnload();

  // The second job cannot read /api/ps at all.
  failPs(s);
  s.ollama!.clearCalls();
  const overlapsBefore = s.gpu.overlaps().length;
  const id = newPromptId();
  const second = await submit(s.t, promptBody(id));
  expect(second.status).toBe(200);
  await second.text();
  await s.t.settled();
  expect(unloadsSent(s)).toEqual(["qwen2.5:7b"]);
  expect(s.ollama!.loadedModels()).toEqual([]);
  // The first job ran with the model loaded (that is what its warn line says); the second did not.
  expect(s.gpu.overlaps().filter((o) => o.comfy.includes(id))).toEqual([]);
  expect(s.gpu.overlaps()).toHaveLength(overlapsBefore);
});

test("nothing routed since /api/ps was last empty: an unreadable /api/ps costs no wait", async () => {
  s = await startStack({ env: { UNLOAD_TIMEOUT: "30s", PROBE_TIMEOUT: "200ms" } });
  failPs(s);
  const res = await submit(s.t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();
  expect(unloadsSent(s)).toEqual([]);
  expect(callsTo(s.ollama!.calls, "/api/ps")).toHaveLength(1);
  expect(warnLines(s.t, "unload not confirmed")[0]).toContain("tried=–");
});

test("a routed name Ollama answered 404 for is not unloaded blind; the model it does know is", async () => {
  s = await startStack({ env: ENV });
  const c = await chat(s.t, "no-such-model");
  expect(c.status).toBe(404);
  await c.text();
  const real = await chat(s.t, "llama3.2");
  await real.text();
  failPs(s);
  s.ollama!.clearCalls();
  const res = await submit(s.t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
  // Nothing can be loaded under a name Ollama does not know: only the real model is sent keep_alive:0.
  expect(unloadsSent(s)).toEqual(["llama3.2"]);
  expect(callsTo(s.ollama!.calls, "/api/embed")).toHaveLength(0);
  expect(warnLines(s.t, "unload not confirmed")[0]).toContain("tried=llama3.2");
});
