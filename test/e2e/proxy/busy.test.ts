/**
 * Busy answers: in wait mode an LLM request gives up after LLM_WAIT_TIMEOUT with 503; in reject
 * mode it is answered at once with LLM_BUSY_STATUS. Both carry Retry-After and an error body in
 * the dialect the client parses, and neither ever reaches Ollama.
 */
import { describe, expect, test } from "bun:test";
import { sampleValue } from "../../support/prom-parse.ts";
import { postJson, scrape, type Stack, startImageJob, startStack } from "./helpers.ts";

const CHAT = { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false };

async function withStack(env: Record<string, string>, run: (s: Stack) => Promise<void>): Promise<void> {
  const s = await startStack(env);
  try {
    await run(s);
  } finally {
    await s.stop();
  }
}

async function busyReplies(s: Stack) {
  const via = s.t.ollamaUrl;
  const [native, openai] = await Promise.all([
    postJson(`${via}/api/chat`, CHAT, { "x-e2e": "busy" }),
    postJson(`${via}/v1/chat/completions`, CHAT, { "x-e2e": "busy" }),
  ]);
  return {
    native: { status: native.status, retryAfter: native.headers.get("retry-after"), type: native.headers.get("content-type"), body: await native.json() },
    openai: { status: openai.status, retryAfter: openai.headers.get("retry-after"), type: openai.headers.get("content-type"), body: await openai.json() },
  };
}

describe("busy replies", () => {
  test("wait mode: 503 after LLM_WAIT_TIMEOUT, Retry-After, Ollama and OpenAI dialect bodies", async () => {
    await withStack({ LLM_WAIT_TIMEOUT: "100ms", BUSY_RETRY_AFTER: "7" }, async (s) => {
      await startImageJob(s.t, 600);
      const r = await busyReplies(s);
      // They gave up while the job still runs: the timeout, not the job's end, answered them.
      expect(s.t.lock.state).toBe("image");

      expect(r.native.status).toBe(503);
      expect(r.native.retryAfter).toBe("7");
      expect(r.native.type).toStartWith("application/json");
      expect(Object.keys(r.native.body)).toEqual(["error"]);
      expect(typeof r.native.body.error).toBe("string");
      expect(r.native.body.error).toMatch(/busy/);
      expect(r.native.body.error).toMatch(/image job/);

      expect(r.openai.status).toBe(503);
      expect(r.openai.retryAfter).toBe("7");
      expect(r.openai.body).toEqual({ error: { message: expect.stringMatching(/busy/), type: "gpu_busy", param: null, code: null } });

      expect(s.pair.ollama.calls.filter((c) => c.headers["x-e2e"])).toEqual([]);
      const m = await scrape(s.t.ollamaUrl);
      expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "wait_timeout" })).toBe(2);
      expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "reject" })).toBe(0);
      expect(sampleValue(m, "gpu_turnstile_requests_total", { listener: "ollama", class: "llm", status: "503" })).toBe(2);
      expect(s.t.lock.snapshot().llmWaiting).toBe(0);
    });
  });

  test("reject mode with LLM_BUSY_STATUS=429: answered at once, while the job still runs", async () => {
    await withStack({ LLM_BUSY_MODE: "reject", LLM_BUSY_STATUS: "429", BUSY_RETRY_AFTER: "12" }, async (s) => {
      await startImageJob(s.t, 600);
      const r = await busyReplies(s);
      // LLM_WAIT_TIMEOUT is 5 s here and the job runs 0.6 s: an answer while it runs was not a wait.
      expect(s.t.lock.state).toBe("image");
      expect(r.native).toMatchObject({ status: 429, retryAfter: "12", body: { error: expect.stringMatching(/busy/) } });
      expect(r.openai).toMatchObject({ status: 429, retryAfter: "12", body: { error: { type: "gpu_busy" } } });
      expect(s.pair.ollama.calls.filter((c) => c.headers["x-e2e"])).toEqual([]);
      const m = await scrape(s.t.comfyUrl);
      expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "reject" })).toBe(2);
      expect(sampleValue(m, "gpu_turnstile_busy_total", { reason: "wait_timeout" })).toBe(0);
      // Once the GPU is free again, the same request goes through.
      await s.t.settled();
      expect((await postJson(`${s.t.ollamaUrl}/api/chat`, CHAT)).status).toBe(200);
    });
  });
});
