/**
 * Image sessions through real sockets: image jobs that arrive while the GPU is (about to be) in
 * the image state go to ComfyUI at once and share one Ollama unload and one /free; with
 * IMAGE_SESSION_MAX=0 every job is its own cycle; and a waiting chat is served within the bound.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { callsTo, chat, jobCounts, newPromptId, postJson, promptBody, type Stack, startStack, submit, until, waitFor } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

/** Opens a streamed chat and reads its first chunk: the GPU is `llm` until the stream ends. */
async function openChatStream(stack: Stack) {
  const res = await postJson(`${stack.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  expect((await reader.read()).done).toBe(false);
  return {
    /** Reads to the end; resolves with the moment the last byte arrived. */
    async drain(): Promise<number> {
      while (!(await reader.read()).done) {
        // the chat's slot is released once its whole answer was written
      }
      return now();
    },
  };
}

async function metric(stack: Stack, name: string): Promise<number | undefined> {
  return sampleValue(parseExposition(await (await fetch(`${stack.t.comfyUrl}/metrics`)).text()), name, {});
}

/** Four image jobs posted while a chat streams; returns when each got its answer, and the chat's end. */
async function fourJobsDuringAChat(stack: Stack) {
  const stream = await openChatStream(stack);
  const ids = [newPromptId(), newPromptId(), newPromptId(), newPromptId()];
  const answered = ids.map((id) =>
    submit(stack.t, promptBody(id)).then(async (res) => ({ status: res.status, body: (await res.json()) as { prompt_id?: string }, at: now() })),
  );
  await until(() => stack.t.lock.snapshot().imageWaiting === 4, "four image jobs waiting for the chat");
  const chatEnd = await stream.drain();
  const answers = await Promise.all(answered);
  await stack.t.settled();
  return { ids, answers, chatEnd };
}

describe("image sessions", () => {
  // One client's jobs (one address, no key, no client_id): with fair turns (the default) they go
  // to ComfyUI one at a time (test/e2e/jobs/fair.test.ts); first come, first served, all at once.
  test("FAIR_TURNS=false: 4 image jobs posted during a chat all get their prompt_id within 1 s of the chat's end; one unload, one /free", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 30, tokens: 10 }, comfy: { jobMs: 150 }, env: { FAIR_TURNS: "false" } });
    const { ids, answers, chatEnd } = await fourJobsDuringAChat(s);
    expect(answers.map((a) => [a.status, a.body.prompt_id])).toEqual(ids.map((id) => [200, id]));
    for (const a of answers) expect(a.at - chatEnd).toBeLessThan(1000);
    // All four were in ComfyUI's queue together: the last was sent before the first finished.
    const prompts = callsTo(s.comfy!.calls, "/prompt");
    expect(prompts).toHaveLength(4);
    const firstEnd = Math.min(...s.comfy!.jobs().map((j) => j.endedAt!));
    expect(Math.max(...prompts.map((p) => p.at))).toBeLessThan(firstEnd);

    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
    expect(callsTo(s.comfy!.calls, "/free")[0]!.at).toBeGreaterThanOrEqual(Math.max(...s.comfy!.jobs().map((j) => j.endedAt!)));
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(1); // the checkpoint loaded once
    expect(s.transitions.map((x) => `${x.from}->${x.to}`)).toEqual(["idle->llm", "llm->image", "image->idle"]);
    expect(s.gpu.overlaps()).toEqual([]);
    // Every job is still its own: outcome, log lines.
    expect(await jobCounts(s.t)).toMatchObject({ completed: 4 });
    expect(s.t.logLines.filter((l) => l.includes("joined the image session"))).toHaveLength(3);
    expect(s.t.logLines.filter((l) => l.includes("its image session goes on"))).toHaveLength(3);
    expect(s.t.logLines.filter((l) => l.includes("completed; GPU released"))).toHaveLength(1);
    expect(s.t.logLines.filter((l) => l.includes("image session ended after 4 jobs; GPU released"))).toHaveLength(1);
    expect(await metric(s, "gpu_turnstile_image_sessions_total")).toBe(1);
    expect(await metric(s, "gpu_turnstile_image_session_jobs_sum")).toBe(4);
  });

  test("IMAGE_SESSION_MAX=0: the same four jobs take four cycles and four /free calls", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 30, tokens: 10 }, comfy: { jobMs: 150 }, env: { IMAGE_SESSION_MAX: "0" } });
    const { answers, chatEnd } = await fourJobsDuringAChat(s);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(4);
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(4);
    // The last answer waited for three whole jobs before it.
    expect(Math.max(...answers.map((a) => a.at)) - chatEnd).toBeGreaterThanOrEqual(3 * 150);
    expect(await metric(s, "gpu_turnstile_image_sessions_total")).toBe(4);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("starvation bound: with image jobs arriving steadily, a waiting chat is served within IMAGE_SESSION_MAX plus the jobs admitted", async () => {
    const maxMs = 400;
    const jobMs = 150;
    s = await startStack({ comfy: { jobMs }, env: { IMAGE_SESSION_MAX: `${maxMs}ms` } });
    // When the lock admitted each image job (its /prompt reaches ComfyUI a little later).
    const admitted: number[] = [];
    s.t.lock.onEvent((e) => {
      if (e.type === "acquired" && e.kind === "image") admitted.push(now());
    });
    // A job every 100 ms, each 150 ms long: ComfyUI's queue never runs dry on its own.
    let producing = true;
    const posted: Promise<Response>[] = [];
    const producer = (async () => {
      while (producing) {
        posted.push(submit(s!.t, promptBody(newPromptId())));
        await new Promise((r) => setTimeout(r, 100)); // the workload's arrival rate, not a wait for state
      }
    })();
    await waitFor(() => s!.transitions.find((x) => x.to === "image"), "session open");
    const sessionStart = s.transitions.find((x) => x.to === "image")!.at;
    const asked = now();
    const res = await chat(s.t);
    const served = now();
    expect(res.status).toBe(200);
    await res.text();
    // Keep the jobs coming until one more went to ComfyUI after the chat: the next session.
    await waitFor(() => callsTo(s!.comfy!.calls, "/prompt").some((c) => c.at > served), "an image job after the chat");
    producing = false;
    await producer;
    for (const r of await Promise.all(posted)) expect(r.status).toBe(200);
    await s.t.settled();

    // Admitted jobs: those the lock let into the session before it ended; each runs jobMs in ComfyUI's queue.
    const handedOn = s.transitions.find((x) => x.from === "image")!;
    const admittedAfterCut = admitted.filter((at) => at >= sessionStart + maxMs && at <= handedOn.at);
    expect(admittedAfterCut).toEqual([]); // no job joined past IMAGE_SESSION_MAX while the chat waited
    const queuedAtCut = admitted.filter((at) => at <= sessionStart + maxMs).length;
    expect(served - asked).toBeLessThan(maxMs + queuedAtCut * jobMs + 1000);
    // Image jobs kept coming after the cut and were served by the next session, after the chat.
    expect(s.transitions.filter((x) => x.to === "image").length).toBeGreaterThanOrEqual(2);
    expect(s.gpu.overlaps()).toEqual([]);
  }, 15_000);
});
