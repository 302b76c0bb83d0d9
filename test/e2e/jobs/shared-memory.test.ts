/**
 * ComfyUI whose memory is the system's (issue 27 point 1, api-facts R1): on `cpu` and `mps`,
 * /system_stats reports the machine's RAM as torch_vram_total, and it never drops after /free.
 * The release is then done once /free is answered and the queue is empty — not after
 * FREE_TIMEOUT — and an idle ComfyUI at start does not "hold memory".
 */
import { afterEach, describe, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { callsTo, chat, newPromptId, postJson, promptBody, settledAt, startStack, submit, type Stack, until, warnLines } from "./helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

/** Long enough that waiting it out fails every bound below. */
const ENV = { FREE_TIMEOUT: "20s", JOB_TIMEOUT: "30s", LLM_WAIT_TIMEOUT: "30s" };

describe.each(["cpu", "mps"] as const)("ComfyUI on %s", (device) => {
  test("a chat that waited for an image job is served within 1.5 s of the job's end", async () => {
    stack = await startStack({ comfy: { device, jobMs: 300 }, env: ENV });
    const { t, comfy, gpu } = stack;
    const res = await submit(t, promptBody(newPromptId()));
    expect(res.status).toBe(200);
    await res.text();
    await until(() => comfy!.runningJob() !== undefined, "the job to run");
    const answered = settledAt(chat(t, "llama3.2", AbortSignal.timeout(5000)).then((r) => r.text()));
    await until(() => answered.done(), "the chat to be answered", 6000);
    const ended = comfy!.jobs()[0]!.endedAt!;
    expect(answered.at()! - ended).toBeLessThan(1500);
    // /free was still sent before the hand-off, and nothing overlapped on the card.
    expect(callsTo(comfy!.calls, "/free")).toHaveLength(1);
    expect(warnLines(t, "release not confirmed")).toEqual([]);
    expect(gpu.overlaps()).toEqual([]);
  });

  test("a chat sent right after start is served within 1.5 s; the log says once why memory is not measured", async () => {
    stack = await startStack({ comfy: { device }, env: ENV });
    const { t } = stack;
    const t0 = now();
    const res = await chat(t, "llama3.2", AbortSignal.timeout(5000));
    expect(res.status).toBe(200);
    await res.text();
    expect(now() - t0).toBeLessThan(1500);
    expect(t.logLines.filter((l) => l.includes("holds memory with an empty queue"))).toEqual([]);
    expect(t.logLines.filter((l) => l.includes(`ComfyUI runs on ${device}`) && l.includes("not measured"))).toHaveLength(1);
    // The status says "shared with the system", not the machine's RAM "in use".
    const doc = (await (await fetch(`${t.comfyUrl}/turnstile/status`)).json()) as { comfy_memory: { shared?: string } | null };
    expect(doc.comfy_memory?.shared).toBe(device);
  });
});

test("on cpu the card is not handed on while ComfyUI's queue still holds a job sent around the turnstile", async () => {
  stack = await startStack({ comfy: { device: "cpu", jobMs: 200 }, env: ENV });
  const { t, comfy, gpu } = stack;
  const ours = await submit(t, promptBody(newPromptId()));
  await ours.text();
  await until(() => comfy!.runningJob() !== undefined, "our job to run");
  // A client that talks to ComfyUI directly queues behind ours.
  const stranger = await postJson(`${comfy!.url}/prompt`, promptBody(newPromptId()));
  expect(stranger.status).toBe(200);
  const answered = settledAt(chat(t, "llama3.2", AbortSignal.timeout(5000)).then((r) => r.text()));
  await until(() => answered.done(), "the chat to be answered", 6000);
  const [first, second] = comfy!.jobs();
  // The stranger's job had ended by the time the chat got the card.
  expect(second!.state).toBe("done");
  expect(answered.at()!).toBeGreaterThan(second!.endedAt!);
  expect(answered.at()! - second!.endedAt!).toBeLessThan(1500);
  expect(first!.endedAt!).toBeLessThan(second!.endedAt!);
  expect(gpu.overlaps()).toEqual([]);
});

test("a card of its own (cuda) still waits for the measured drop after /free", async () => {
  stack = await startStack({ comfy: { jobMs: 40, freeDelayMs: 300 } });
  const { t, comfy } = stack;
  const res = await submit(t, promptBody(newPromptId()));
  await res.text();
  await stack.t.settled();
  const free = callsTo(comfy!.calls, "/free")[0]!;
  // Handed on only once the memory was back: freeDelayMs after the worker acted on /free.
  expect(stack.idleAt.at(-1)! - free.at).toBeGreaterThanOrEqual(250);
  expect(t.logLines.filter((l) => l.includes("not measured"))).toEqual([]);
});
