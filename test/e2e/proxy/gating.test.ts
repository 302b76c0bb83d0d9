/**
 * LLM gating: while an image job holds the GPU, every LLM route is held at the turnstile (Ollama
 * receives it only after ComfyUI's memory was freed) and every pass-through route is answered at
 * once. Arrival times come from the simulators' call logs, on the same clock as `now()`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { postJson, promptBody, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  s = await startStack();
});
afterAll(async () => {
  await s.stop();
});

const CHAT = [{ role: "user", content: "hi" }];
/** Every LLM route of the classification table; the simulator implements most of them. */
const LLM: [path: string, body: unknown, status: number][] = [
  ["/api/generate", { model: "llama3.2", prompt: "hi", stream: false }, 200],
  ["/api/chat", { model: "llama3.2", messages: CHAT, stream: false }, 200],
  ["/api/embed", { model: "nomic-embed-text", input: "hi" }, 200],
  ["/api/embeddings", { model: "nomic-embed-text", prompt: "hi" }, 200],
  ["/v1/chat/completions", { model: "llama3.2", messages: CHAT }, 200],
  ["/v1/completions", { model: "llama3.2", prompt: "hi" }, 200],
  ["/v1/embeddings", { model: "nomic-embed-text", input: "hi" }, 200],
  ["/v1/responses", { model: "llama3.2", input: "hi" }, 200],
  // Not implemented by the simulator (500), but held all the same.
  ["/v1/messages", { model: "llama3.2", messages: CHAT, max_tokens: 8 }, 500],
  // Speech to text runs through the chat handler on the GPU (ollama/ollama#15214).
  ["/v1/audio/transcriptions", { model: "llama3.2" }, 500],
];
const TAG = "x-e2e-gating";

describe("while an image job holds the GPU", () => {
  test("every LLM path is held until the job's /free; every pass-through path is answered meanwhile", async () => {
    const { ollama, comfy, gpu } = s.pair;
    const via = s.t.ollamaUrl;
    await startImageJob(s.t, 800);
    expect(s.t.lock.state).toBe("image");

    const held = LLM.map(async ([path, body]) => {
      const res = await postJson(`${via}${path}`, body, { [TAG]: path });
      await res.arrayBuffer();
      return { path, status: res.status };
    });
    // All of them are inside the turnstile, queued at the lock.
    await until(() => s.t.lock.snapshot().llmWaiting === LLM.length, "every LLM request waiting at the lock");
    expect(ollama.calls.filter((c) => c.headers[TAG])).toEqual([]);

    const passes = [
      `${via}/api/tags`,
      `${via}/api/ps`,
      `${via}/v1/models`,
      `${s.t.comfyUrl}/queue`,
      `${s.t.comfyUrl}/history`,
      `${s.t.comfyUrl}/api/system_stats`,
    ];
    const answered = await Promise.all(
      passes.map(async (url) => {
        const res = await fetch(url);
        await res.arrayBuffer();
        return { url, status: res.status, at: now() };
      }),
    );
    // Answered, and the job still holds the GPU: none of them waited for it.
    expect(answered.map((a) => a.status)).toEqual(passes.map(() => 200));
    expect(s.t.lock.state).toBe("image");
    expect(s.t.lock.snapshot().llmWaiting).toBe(LLM.length);

    const results = await Promise.all(held);
    expect(results).toEqual(LLM.map(([path, , status]) => ({ path, status })));
    await s.t.settled();

    const free = comfy.calls.find((c) => c.path === "/free");
    expect(free).toBeDefined();
    const freeAt = free!.at;
    for (const [path] of LLM) {
      const calls = ollama.calls.filter((c) => c.headers[TAG] === path);
      expect({ path, calls: calls.length }).toEqual({ path, calls: 1 });
      expect({ path, afterFree: calls[0]!.at >= freeAt }).toEqual({ path, afterFree: true });
    }
    for (const a of answered) expect({ url: a.url, beforeFree: a.at < freeAt }).toEqual({ url: a.url, beforeFree: true });
    // The user-visible point of it all: the two tenants never held GPU memory at the same time.
    expect(gpu.overlaps()).toEqual([]);
  });

  test("/api/prompt (the ComfyUI web UI's route) holds LLM requests too", async () => {
    const { ollama } = s.pair;
    await s.t.settled();
    const res = await fetch(`${s.t.comfyUrl}/api/prompt`, { method: "POST", body: promptBody(300) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(s.t.lock.state).toBe("image");
    const chat = postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: CHAT, stream: false }, { [TAG]: "api-prompt" });
    await until(() => s.t.lock.snapshot().llmWaiting === 1, "chat waiting at the lock");
    expect((await chat).status).toBe(200);
    await s.t.settled();
    const freeAt = s.pair.comfy.calls.filter((c) => c.path === "/free").at(-1)!.at;
    expect(ollama.calls.find((c) => c.headers[TAG] === "api-prompt")!.at).toBeGreaterThanOrEqual(freeAt);
  });
});
