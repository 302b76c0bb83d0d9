/**
 * Following ComfyUI's real execution: a job ComfyUI forgot (it restarted) is lost within a few
 * polls instead of holding the GPU for JOB_TIMEOUT, and a job still running at JOB_TIMEOUT is
 * interrupted before any LLM request gets the GPU.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { callsTo, chat, jobCounts, newPromptId, promptBody, type Stack, startStack, submit, total, until, waitFor, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

/** Starts a long job and a chat that waits behind it. */
async function longJobAndWaitingChat(stack: Stack, jobMs: number) {
  const id = newPromptId();
  const res = await submit(stack.t, promptBody(id, { sim_job_ms: jobMs }));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => stack.comfy!.runningJob(), "job running");
  const waiting = chat(stack.t);
  await until(() => stack.t.lock.snapshot().llmWaiting === 1, "chat waiting for the GPU");
  return { id, waiting };
}

const errorLines = (stack: Stack, match: string) => stack.t.logLines.filter((l) => /\bERROR\b/i.test(l) && l.includes(match));

describe("lost jobs", () => {
  test("ComfyUI restarted mid-job: the job is lost within a few polls, ComfyUI freed, the waiting chat served", async () => {
    s = await startStack({ env: { HISTORY_POLL_INTERVAL: "100ms", JOB_TIMEOUT: "60s" } });
    const { id, waiting } = await longJobAndWaitingChat(s, 30_000);
    await s.comfy!.crash();
    await s.comfy!.revive();
    const restartedAt = now();

    const c = await waiting;
    expect(c.status).toBe(200);
    await c.text();
    await s.t.settled();
    const handedOn = s.transitions.find((x) => x.from === "image")!;
    expect(handedOn.at - restartedAt).toBeLessThan(5000);
    expect(await jobCounts(s.t)).toMatchObject({ lost: 1, timeout: 0 });
    expect(total(await jobCounts(s.t))).toBe(1);
    expect(warnLines(s.t, "lost: ComfyUI no longer has it").filter((l) => l.includes(id))).toHaveLength(1);
    // The usual end: /free on the restarted ComfyUI, then the GPU went to the chat.
    const free = callsTo(s.comfy!.calls, "/free");
    expect(free).toHaveLength(1);
    expect(free[0]!.at).toBeGreaterThanOrEqual(restartedAt);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("ComfyUI down for a while mid-job, then back without it: lost soon after it answers again", async () => {
    s = await startStack({ env: { HISTORY_POLL_INTERVAL: "100ms", JOB_TIMEOUT: "60s", HEALTH_INTERVAL: "50ms" } });
    const { waiting } = await longJobAndWaitingChat(s, 30_000);
    await s.comfy!.crash();
    // The turnstile has noticed the outage (its health probe says so) before ComfyUI comes back.
    await waitFor(() => warnLines(s!.t, "comfy is down").length > 0, "outage noticed");
    await s.comfy!.revive();
    const revivedAt = now();
    const c = await waiting;
    expect(c.status).toBe(200);
    await c.text();
    await s.t.settled();
    expect(s.transitions.find((x) => x.from === "image")!.at - revivedAt).toBeLessThan(5000);
    expect(await jobCounts(s.t)).toMatchObject({ lost: 1 });
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("a job ComfyUI never shows again (forgotten after it ran) is lost, not held until JOB_TIMEOUT", async () => {
    s = await startStack({ comfy: { forgetJobs: true }, env: { HISTORY_POLL_INTERVAL: "20ms", JOB_TIMEOUT: "60s" } });
    const id = newPromptId();
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ lost: 1 });
    // Followed through the jobs API: the id was unknown before it was sent, then missed twice.
    expect(callsTo(s.comfy!.calls, `/api/jobs/${id}`).length).toBeGreaterThanOrEqual(3);
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
  });
});

describe("the overrun watchdog", () => {
  test("JOB_TIMEOUT passes while the job runs: /interrupt stops it before any LLM request is admitted", async () => {
    s = await startStack({ env: { JOB_TIMEOUT: "1s" } });
    const { id, waiting } = await longJobAndWaitingChat(s, 5000);
    const c = await waiting;
    expect(c.status).toBe(200);
    await c.text();
    await s.t.settled();

    const interrupts = callsTo(s.comfy!.calls, "/interrupt", "POST");
    expect(interrupts).toHaveLength(1);
    expect(JSON.parse(interrupts[0]!.bodyText)).toEqual({ prompt_id: id });
    const job = s.comfy!.jobs().find((j) => j.id === id)!;
    expect(job.state).toBe("error"); // interrupted: history says error with execution_interrupted
    // The job ended (and its memory was freed) before the chat's model was loaded.
    const firstOllama = s.gpu.ledger.find((h) => h.tenant === "ollama")!;
    expect(job.endedAt!).toBeLessThanOrEqual(firstOllama.start);
    expect(job.endedAt! - job.startedAt!).toBeLessThan(4000);
    expect(s.gpu.overlaps()).toEqual([]);
    expect(await jobCounts(s.t)).toMatchObject({ timeout: 1 });
    expect(warnLines(s.t, "ran past JOB_TIMEOUT and was interrupted").filter((l) => l.includes(id))).toHaveLength(1);
  });

  test("a job still pending at JOB_TIMEOUT (behind a stranger's job) is deleted from the queue, not left to run later", async () => {
    // FREE_TIMEOUT short: the stranger's job keeps ComfyUI's memory, so the free cannot be confirmed.
    s = await startStack({ env: { JOB_TIMEOUT: "300ms", FREE_TIMEOUT: "300ms" } });
    // Someone else's long job, sent to ComfyUI directly, runs first.
    const stranger = newPromptId();
    await (await fetch(`${s.comfy!.url}/prompt`, { method: "POST", body: promptBody(stranger, { sim_job_ms: 20_000 }) })).text();
    await waitFor(() => s!.comfy!.runningJob()?.id === stranger, "stranger's job running");
    const id = newPromptId();
    const res = await submit(s.t, promptBody(id));
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();

    const deletes = callsTo(s.comfy!.calls, "/queue", "POST");
    expect(deletes.map((c) => JSON.parse(c.bodyText))).toEqual([{ delete: [id] }]);
    expect(s.comfy!.jobs().map((j) => j.id)).toEqual([stranger]); // ours never ran and never will
    expect(s.comfy!.runningJob()?.id).toBe(stranger); // the interrupt named our prompt only
    expect(await jobCounts(s.t)).toMatchObject({ timeout: 1 });
  });

  test("a job that ignores /interrupt: error line, the GPU kept one more JOB_TIMEOUT, then handed on with an error", async () => {
    s = await startStack({ env: { JOB_TIMEOUT: "300ms", FREE_TIMEOUT: "300ms" } });
    s.comfy!.override("POST", "/interrupt", () => new Response("", { status: 200 }));
    const id = newPromptId();
    const res = await submit(s.t, promptBody(id, { sim_job_ms: 20_000 }));
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(() => errorLines(s!, "did not stop within FREE_TIMEOUT").length === 1, "the watchdog reports a stuck job");
    expect(s.t.lock.state).toBe("image");
    await waitFor(() => s!.transitions.some((x) => x.from === "image"), "GPU handed on", 5000);
    const prompt = callsTo(s.comfy!.calls, "/prompt")[0]!;
    const handedOn = s.transitions.find((x) => x.from === "image")!;
    expect(handedOn.at - prompt.at).toBeGreaterThanOrEqual(850); // JOB_TIMEOUT + FREE_TIMEOUT + JOB_TIMEOUT
    expect(callsTo(s.comfy!.calls, "/interrupt").length).toBeGreaterThanOrEqual(2);
    expect(errorLines(s, "handing the GPU on anyway").filter((l) => l.includes(id))).toHaveLength(1);
    await s.t.settled();
    expect(await jobCounts(s.t)).toMatchObject({ timeout: 1 });
  });
});
