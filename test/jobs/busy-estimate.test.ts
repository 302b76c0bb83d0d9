/** BUSY_RETRY_AFTER=auto, without sockets: the estimate from job events and a clock. */
import { describe, expect, test } from "bun:test";
import { BusyEstimator, RETRY_AFTER_UNKNOWN_S } from "../../src/jobs/busy-estimate.ts";
import type { ImageJobEvent } from "../../src/jobs/events.ts";

function setup() {
  let t = 0;
  const est = new BusyEstimator(() => t);
  const at = (ms: number, e?: ImageJobEvent) => {
    t = ms;
    if (e) est.observe(e);
  };
  const accepted = (jobId: number): ImageJobEvent => ({ phase: "forwarded", jobId, status: 200, promptId: `p${jobId}`, durationMs: 1 });
  const finished = (jobId: number): ImageJobEvent => ({ phase: "finished", jobId, promptId: `p${jobId}`, end: "success", durationMs: 0 });
  return { est, at, accepted, finished };
}

describe("BusyEstimator", () => {
  test("before any job ended it answers today's fixed default", () => {
    const { est, at, accepted } = setup();
    at(0, accepted(1));
    expect(est.retryAfterS(0)).toBe(RETRY_AFTER_UNKNOWN_S);
  });

  test("the running job's remaining time against the average run time, plus the jobs behind it and the last free", () => {
    const { est, at, accepted, finished } = setup();
    // Three 10 s jobs queued together: each runs from the end of the one before.
    at(0, accepted(1));
    at(0, accepted(2));
    at(0, accepted(3));
    at(10_000, finished(1));
    at(20_000, finished(2));
    at(30_000, finished(3));
    est.observe({ phase: "freed", jobId: 3, promptId: "p3", durationMs: 2000, released: true });
    at(40_000, accepted(4));
    at(40_000, accepted(5));
    at(44_000);
    // 6 s left of job 4, 10 s for job 5, 2 s to free.
    expect(est.retryAfterS(0)).toBe(18);
    // Two more image jobs waiting at the lock: 20 s more.
    expect(est.retryAfterS(2)).toBe(38);
  });

  test("an overdue job counts as about to end; the answer is clamped to 1-300 s", () => {
    const { est, at, accepted, finished } = setup();
    at(0, accepted(1));
    at(1000, finished(1));
    at(2000, accepted(2));
    at(60_000);
    expect(est.retryAfterS(0)).toBe(1);
    expect(est.retryAfterS(10_000)).toBe(300);
  });

  test("the moving average follows changing run times", () => {
    const { est, at, accepted, finished } = setup();
    at(0, accepted(1));
    at(10_000, finished(1));
    at(10_000, accepted(2));
    at(30_000, finished(2)); // 20 s: the average moves toward it (0.3 weight), to 13 s
    at(30_000, accepted(3));
    expect(est.retryAfterS(0)).toBe(13);
  });
});
