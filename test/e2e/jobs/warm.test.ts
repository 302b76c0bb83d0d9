/**
 * WARM_MODEL: after an image job the chat model is loaded back — only once the GPU is released,
 * holding an LLM slot like any chat, so an image job that arrives meanwhile waits and unloads it.
 */
import { afterEach, expect, test } from "bun:test";
import { callsTo, newPromptId, promptBody, type Stack, startStack, submit, until, waitFor } from "./helpers.ts";

const W = "llama3.2:latest";
const WARM_BODY = JSON.stringify({ model: W, prompt: "", keep_alive: -1 });

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

test("the warm-up is sent after the release and never overlaps a ComfyUI job", async () => {
  s = await startStack({ env: { WARM_MODEL: W } });
  const res = await submit(s.t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();

  const warms = callsTo(s.ollama!.calls, "/api/generate");
  expect(warms.map((c) => c.bodyText)).toEqual([WARM_BODY]);
  const released = s.transitions.find((x) => x.from === "image")!;
  expect(released.to).toBe("idle");
  expect(warms[0]!.at).toBeGreaterThan(released.at);
  // The warm-up held an LLM slot: idle → llm → idle after the image job.
  expect(s.transitions.map((x) => `${x.from}>${x.to}`)).toEqual(["idle>image", "image>idle", "idle>llm", "llm>idle"]);

  expect(s.ollama!.loadedModels()).toEqual([W]);
  const comfyHold = s.gpu.ledger.find((h) => h.tenant === "comfy")!;
  const ollamaHold = s.gpu.ledger.find((h) => h.tenant === "ollama")!;
  expect(ollamaHold.detail).toBe(W);
  expect(ollamaHold.start).toBeGreaterThanOrEqual(comfyHold.end!);
  expect(s.gpu.overlaps()).toEqual([]);
  expect(s.t.logLines.some((l) => l.includes(`warmed ${W}`))).toBe(true);
});

test("an image job arriving during the warm-up waits for it, then unloads the warmed model", async () => {
  // A slow load keeps the warm-up in flight long enough to send the second job into it.
  s = await startStack({ ollama: { loadMs: 300 }, env: { WARM_MODEL: W } });
  const first = await submit(s.t, promptBody(newPromptId()));
  expect(first.status).toBe(200);
  await first.text();
  await waitFor(() => callsTo(s!.ollama!.calls, "/api/generate").length === 1, "warm-up sent");
  expect(s.t.lock.state).toBe("llm");

  s.ollama!.clearCalls();
  const second = submit(s.t, promptBody(newPromptId()));
  await until(() => s!.t.lock.snapshot().imageWaiting === 1, "second job waiting behind the warm-up");
  expect((await second).status).toBe(200);
  await s.t.settled();

  // The second job emptied Ollama of the warmed model before ComfyUI got its prompt…
  const unload = callsTo(s.ollama!.calls, "/api/generate").find((c) => JSON.parse(c.bodyText).keep_alive === 0)!;
  expect(JSON.parse(unload.bodyText)).toEqual({ model: W, keep_alive: 0 });
  const prompts = callsTo(s.comfy!.calls, "/prompt");
  expect(prompts).toHaveLength(2);
  expect(unload.at).toBeLessThan(prompts[1]!.at);
  // …and the warm-up's hold ended before the second job's ComfyUI hold began.
  const [firstWarm, secondWarm] = s.gpu.ledger.filter((h) => h.tenant === "ollama");
  const secondComfy = s.gpu.ledger.filter((h) => h.tenant === "comfy")[1]!;
  expect(firstWarm!.end!).toBeLessThanOrEqual(secondComfy.start);
  expect(s.gpu.overlaps()).toEqual([]);
  // After the second job the model is warmed again.
  expect(secondWarm!.start).toBeGreaterThanOrEqual(secondComfy.end!);
  expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
});
