/**
 * One side disabled (SPEC "Modes"): without ComfyUI the LLM lock never blocks and there is no
 * ComfyUI listener; without Ollama no Ollama call is ever made, yet ComfyUI is still freed.
 */
import { afterEach, expect, test } from "bun:test";
import { startOllamaSim, type OllamaSim } from "../../../src/sim/index.ts";
import { callNames, callsTo, jobCounts, newPromptId, postJson, promptBody, type Stack, startStack, submit, total } from "./helpers.ts";

let s: Stack | undefined;
let bystander: OllamaSim | undefined;
afterEach(async () => {
  await s?.stop();
  await bystander?.stop();
  s = bystander = undefined;
});

test("only OLLAMA_URL: no ComfyUI listener, and LLM requests are never held back", async () => {
  // reject mode answers at once whenever the lock would block, so a single 503 would show it.
  s = await startStack({ comfy: false, env: { LLM_BUSY_MODE: "reject" } });
  expect(s.t.listeners.map((l) => l.name)).toEqual(["ollama"]);
  expect(s.t.listener("comfy")).toBeUndefined();

  let peak = 0;
  s.t.lock.onEvent(() => (peak = Math.max(peak, s!.t.lock.snapshot().llmInflight)));
  const bodies = Array.from({ length: 24 }, (_, i) =>
    i % 3 === 0
      ? postJson(`${s!.t.ollamaUrl}/api/embed`, { model: "nomic-embed-text", input: `text ${i}` })
      : postJson(`${s!.t.ollamaUrl}/api/chat`, { model: i % 2 ? "llama3.2" : "qwen2.5:7b", messages: [{ role: "user", content: `q${i}` }] }),
  );
  const statuses = await Promise.all(
    bodies.map(async (p) => {
      const res = await p;
      await res.text(); // the slot is held until the stream ends
      return res.status;
    }),
  );
  expect(statuses).toEqual(Array(24).fill(200));
  expect(peak).toBeGreaterThan(1); // they really ran side by side
  expect(s.transitions.map((x) => x.to)).not.toContain("image");
  expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  // An image route on the Ollama side is just a 404 passed through, never an image job.
  const stray = await postJson(`${s.t.ollamaUrl}/prompt`, promptBody(newPromptId()));
  expect(stray.status).toBe(404);
  expect(total(await jobCounts(s.t))).toBe(0);
});

test("only COMFY_URL: no Ollama calls at all, and ComfyUI is still freed and verified", async () => {
  s = await startStack({ ollama: false });
  // An Ollama on the same GPU the turnstile was not told about: it must hear nothing.
  bystander = await startOllamaSim({ gpu: s.gpu });
  expect(s.t.listeners.map((l) => l.name)).toEqual(["comfy"]);

  const id = newPromptId();
  const res = await submit(s.t, promptBody(id));
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();

  expect(bystander.calls).toEqual([]);
  expect(s.t.logLines.filter((l) => /ollama/i.test(l))).toEqual([]);
  const names = callNames(s.comfy!.calls)
    .filter((n) => !n.startsWith("GET /api/jobs?"))
    .filter((n, i, a) => i === 0 || a[i - 1] !== n);
  expect(names).toEqual([`GET /api/jobs/${id}`, "POST /prompt", `GET /api/jobs/${id}`, "GET /system_stats", "POST /free", "GET /system_stats"]);
  expect(s.gpu.ledger.find((h) => h.tenant === "comfy")!.end).not.toBeNull();
  expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
  expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
});
