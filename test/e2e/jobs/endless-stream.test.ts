/**
 * Probe finding: a chat stream that never stops streaming held the card with no bound. Every byte
 * moves, so LLM_IDLE_TIMEOUT never fires; an image job that arrives waits for it to end, and every
 * chat after that waits behind the image job (503 at LLM_WAIT_TIMEOUT). One client with no token
 * (`"options":{"num_predict":-1}` on a model that rambles) kept ComfyUI off the card. LLM_DRAIN_TIMEOUT
 * bounds it: past it the running requests are cut and the image job gets the card.
 */
import { afterEach, expect, test } from "bun:test";
import { newPromptId, postJson, promptBody, type Stack, startStack, submit, until, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

test("an image job waits for a chat that streams without end for LLM_DRAIN_TIMEOUT, not for ever: the stream is cut at the client and logged", async () => {
  // 50 ms a token for 10 000 tokens: 500 s of a stream that always moves.
  s = await startStack({ ollama: { tokens: 10_000, tokenDelayMs: 50 }, env: { LLM_IDLE_TIMEOUT: "500ms", LLM_DRAIN_TIMEOUT: "1s" } });
  const chat = await fetch(`${s.t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
  expect(chat.status).toBe(200);
  const reading = chat.body!.getReader();
  const drain = (async () => {
    for (;;) if ((await reading.read().catch(() => ({ done: true }))).done) return;
  })();
  const job = submit(s.t, promptBody(newPromptId(), { sim_job_ms: 50 }));
  await until(() => s!.t.lock.snapshot().imageWaiting === 1, "the image job waiting for the chat");
  // Whatever the bound is, a job should not wait minutes; 3 s is far past LLM_IDLE_TIMEOUT here.
  await until(() => s!.t.lock.state === "image", "the image job on the card", 3000);
  // The cut stream ends at the client (not left hanging until the chat's 500 s are over).
  await drain;
  expect((await job).status).toBe(200);
  expect(warnLines(s.t, "LLM_DRAIN_TIMEOUT (1s)")).toHaveLength(1);
  expect(warnLines(s.t, "an image job waited LLM_DRAIN_TIMEOUT (1s)")).toHaveLength(1);
  expect(s.gpu.overlaps()).toEqual([]);
});

test("a lease kept waiting by an endless chat: the warning names the lease and its holder, not an image job", async () => {
  s = await startStack({ ollama: { tokens: 10_000, tokenDelayMs: 50 }, env: { LLM_IDLE_TIMEOUT: "500ms", LLM_DRAIN_TIMEOUT: "1s" } });
  const chat = await fetch(`${s.t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
  expect(chat.status).toBe(200);
  const cut = chat.text().catch(() => "");
  const lease = postJson(`${s.t.comfyUrl}/turnstile/lease`, { holder: "train.py", ttl: "1m" });
  await until(() => s!.t.lock.state === "lease", "the lease on the card", 3000);
  await cut;
  expect((await lease).status).toBe(200);
  expect(warnLines(s.t, "LLM_DRAIN_TIMEOUT (1s)")).toEqual([expect.stringContaining('a GPU lease for "train.py" waited LLM_DRAIN_TIMEOUT (1s) for running LLM requests: 1 cut')]);
  expect(s.gpu.overlaps()).toEqual([]);
});
