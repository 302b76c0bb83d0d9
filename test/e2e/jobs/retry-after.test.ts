/**
 * BUSY_RETRY_AFTER=auto through real sockets: once a few jobs have been seen, a busy answer during
 * a job of known length carries a Retry-After close to the time the GPU really stays busy.
 */
import { afterEach, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { chat, newPromptId, promptBody, type Stack, startStack, submit, waitFor } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const JOB_MS = 700;

async function images(stack: Stack, n: number): Promise<void> {
  const answers = await Promise.all(Array.from({ length: n }, () => submit(stack.t, promptBody(newPromptId(), { sim_job_ms: JOB_MS }))));
  for (const a of answers) {
    expect(a.status).toBe(200);
    await a.text();
  }
}

test("reject mode: Retry-After is within 50 % of the real remaining busy time once a few jobs were seen", async () => {
  // One client's jobs all in ComfyUI at once (first come, first served): the queued-in-ComfyUI case.
  s = await startStack({ env: { LLM_BUSY_MODE: "reject", HISTORY_POLL_INTERVAL: "20ms", FAIR_TURNS: "false" } });
  // Three jobs of known length, run back to back in one session, teach the average.
  await images(s, 3);
  await s.t.settled();

  // Two more: the first is running, the second queued behind it in ComfyUI.
  await images(s, 2);
  const running = await waitFor(() => s!.comfy!.runningJob(), "job running");
  await waitFor(() => s!.gpu.now() - running.startedAt! >= 100, "job 100 ms in");
  const res = await chat(s.t);
  const askedAt = now();
  expect(res.status).toBe(503);
  await res.text();
  const retryAfter = Number(res.headers.get("retry-after"));
  expect(retryAfter).toBeGreaterThanOrEqual(1);

  await s.t.settled();
  const handedOn = s.transitions.filter((x) => x.from === "image").at(-1)!;
  const realS = (handedOn.at - askedAt) / 1000;
  expect(realS).toBeGreaterThan(1); // the rest of one job and all of the next
  expect(Math.abs(retryAfter - realS)).toBeLessThanOrEqual(realS * 0.5);
}, 15_000);
