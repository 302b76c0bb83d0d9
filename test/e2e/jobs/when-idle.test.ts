/**
 * whenIdle() is what the updater waits on before it restarts the service on a new binary: it must
 * resolve once the GPU is idle and no image job is still being tracked — never during a job or a
 * streaming chat, and not hang after one.
 */
import { afterEach, expect, test } from "bun:test";
import { newPromptId, postJson, promptBody, settledAt, startStack, submit, type Stack, until } from "./helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

test("resolves at once on an idle turnstile", async () => {
  stack = await startStack();
  await stack.t.whenIdle();
});

test("waits for a running image job to be finished, freed and released — then resolves", async () => {
  stack = await startStack({ comfy: { jobMs: 150 } });
  const { t, comfy } = stack;
  const res = await submit(t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  expect(t.lock.state).toBe("image");

  const idle = settledAt(t.whenIdle());
  await until(() => idle.done(), "whenIdle to resolve after the job", 5000);
  // It resolved only after the job's /free, with nothing tracked and the GPU idle.
  const free = comfy!.calls.find((c) => c.path === "/free");
  expect(free).toBeDefined();
  expect(t.lock.state).toBe("idle");
  expect(t.tracker.active()).toEqual([]);
});

test("waits for a streaming chat to end", async () => {
  stack = await startStack({ ollama: { tokenDelayMs: 40, tokens: 5 } });
  const { t } = stack;
  const res = await postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
  const reader = res.body!.getReader();
  await reader.read(); // the first NDJSON line: the stream is under way
  expect(t.lock.state).toBe("llm");
  const idle = settledAt(t.whenIdle());
  expect(idle.done()).toBe(false);
  while (!(await reader.read()).done);
  await until(() => idle.done(), "whenIdle to resolve after the chat");
  expect(t.lock.state).toBe("idle");
});
