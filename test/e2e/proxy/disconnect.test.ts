/**
 * A client that goes away gives back what it held: mid-stream, its LLM slot and the upstream's
 * generation (cancelled, not left running); while waiting behind an image job, everything — the
 * request never reaches Ollama and the counts are as if it had never come.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { health, postJson, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  // 1,000 tokens at 20 ms: a stream that would run 20 s if nobody cancelled it.
  s = await startStack({}, { ollama: { tokenDelayMs: 20, tokens: 1000 } });
});
afterAll(async () => {
  await s.stop();
});

const MESSAGES = [{ role: "user", content: "tell me a long story" }];
const STREAMS: [path: string, body: unknown][] = [
  ["/api/chat", { model: "llama3.2", messages: MESSAGES }],
  ["/v1/chat/completions", { model: "llama3.2", messages: MESSAGES, stream: true }],
];

describe("client disconnect", () => {
  for (const [path, body] of STREAMS) {
    test(`mid-stream on ${path}: llm_inflight back to 0 and the upstream generation cancelled`, async () => {
      const via = s.t.ollamaUrl;
      const ac = new AbortController();
      const res = await postJson(`${via}${path}`, body, {}, ac.signal);
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      expect((await reader.read()).done).toBe(false);
      // Both listeners report the slot while the stream runs.
      expect(await health(via)).toEqual({ state: "llm", llm_inflight: 1, image_pending: false });
      expect(await health(s.t.comfyUrl)).toEqual({ state: "llm", llm_inflight: 1, image_pending: false });
      expect(s.pair.ollama.inflight()).toBe(1);

      ac.abort();
      await until(async () => (await health(via)).llm_inflight === 0, "llm_inflight back to 0");
      expect(await health(via)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
      // Far sooner than the 20 s the stream would have run: the upstream request was cancelled.
      await until(() => s.pair.ollama.inflight() === 0, "the simulated Ollama stopped generating");
    });
  }

  test("before the answer starts (stream:false, the upstream still generating): slot and upstream both let go", async () => {
    const via = s.t.ollamaUrl;
    const ac = new AbortController();
    const pending = postJson(`${via}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false }, {}, ac.signal).catch((e: unknown) => e);
    await until(() => s.pair.ollama.inflight() === 1, "the simulated Ollama generating");
    expect(await health(via)).toEqual({ state: "llm", llm_inflight: 1, image_pending: false });
    ac.abort();
    expect(await pending).toBeInstanceOf(Error);
    await until(async () => (await health(via)).llm_inflight === 0, "llm_inflight back to 0");
    await until(() => s.pair.ollama.inflight() === 0, "the simulated Ollama stopped generating");
    expect(await health(via)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
  });

  test("while waiting behind an image job: no trace, and Ollama never receives the request", async () => {
    const { ollama } = s.pair;
    const via = s.t.ollamaUrl;
    await startImageJob(s.t, 600);
    expect(s.t.lock.state).toBe("image");

    const ac = new AbortController();
    const gone = postJson(`${via}/api/chat`, { model: "llama3.2", messages: MESSAGES }, { "x-e2e": "gone" }, ac.signal).catch((e: unknown) => e);
    await until(() => s.t.lock.snapshot().llmWaiting === 1, "chat waiting at the lock");
    ac.abort();
    expect(await gone).toBeInstanceOf(Error);
    await until(() => s.t.lock.snapshot().llmWaiting === 0, "waiter removed from the lock");
    expect(await health(via)).toEqual({ state: "image", llm_inflight: 0, image_pending: false });

    await s.t.settled();
    // A request admitted after the job proves the queue is empty: had the abandoned one been left
    // in it, it would have been let through first, together with this one.
    const after = await postJson(`${via}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false, options: { num_predict: 1 } });
    expect(after.status).toBe(200);
    await after.arrayBuffer();
    expect(ollama.calls.filter((c) => c.headers["x-e2e"] === "gone")).toEqual([]);
    expect(ollama.calls.some((c) => c.path === "/api/generate" && c.bodyText.includes('"num_predict":1'))).toBe(true);
    expect(await health(via)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
    expect(s.t.logLines.some((l) => l.includes("llm waiter left"))).toBe(true);
  });
});
