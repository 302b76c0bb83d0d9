/** The rules of following a ComfyUI job, without sockets: when it is done, lost, or overrunning. */
import { describe, expect, test } from "bun:test";
import { JobWatch, type Sighting } from "../../src/jobs/follow.ts";

const running: Sighting = { history: "open", place: "running", behindOurs: false };
const missing: Sighting = { history: "open", place: "absent", behindOurs: false };
const down: Sighting = { history: undefined, place: undefined, behindOurs: false };

describe("JobWatch", () => {
  test("ComfyUI's own verdict ends the watch", () => {
    const w = new JobWatch(1000, 0);
    expect(w.see(running, 10)).toBeUndefined();
    expect(w.see({ ...missing, history: "success" }, 20)).toBe("success");
    expect(new JobWatch(1000, 0).see({ ...missing, history: "error" }, 5)).toBe("error");
    expect(new JobWatch(1000, 0).see({ ...missing, history: "cancelled" }, 5)).toBe("cancelled");
  });

  test("an end while the queue still holds the id is not the job's end (a reused id's old entry)", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see({ ...running, history: "success" }, 10)).toBeUndefined();
    expect(w.see({ ...running, place: "pending", history: "error" }, 20)).toBeUndefined();
    expect(w.see({ ...missing, history: "success" }, 30)).toBe("success");
  });

  test("a job a client named in a cancel or delete is over at the first miss", () => {
    expect(new JobWatch(60_000, 0).see({ ...missing, named: true }, 10)).toBe("cancelled");
    // Named but still there (an interrupt that has not landed yet): the watch goes on.
    expect(new JobWatch(60_000, 0).see({ ...running, named: true }, 10)).toBeUndefined();
  });

  test("lost after two polls in a row miss it, not after one", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see(running, 10)).toBeUndefined();
    expect(w.see(missing, 20)).toBeUndefined();
    expect(w.see(missing, 30)).toBe("lost");
  });

  test("a sighting between two misses starts the count again", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see(missing, 10)).toBeUndefined();
    expect(w.see(running, 20)).toBeUndefined();
    expect(w.see(missing, 30)).toBeUndefined();
    expect(w.see(missing, 40)).toBe("lost");
  });

  test("a half-failed read is no miss", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see(missing, 10)).toBeUndefined();
    expect(w.see({ ...missing, history: undefined }, 20)).toBeUndefined();
    expect(w.see(missing, 30)).toBeUndefined();
    expect(w.see(missing, 40)).toBe("lost");
  });

  test("unreachable, then back without the job: lost at the first full read", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see(running, 10)).toBeUndefined();
    expect(w.see(down, 20)).toBeUndefined();
    expect(w.see(down, 30)).toBeUndefined();
    expect(w.see(missing, 40)).toBe("lost");
  });

  test("unreachable, then back with the job still running: the watch goes on", () => {
    const w = new JobWatch(60_000, 0);
    expect(w.see(down, 10)).toBeUndefined();
    expect(w.see(running, 20)).toBeUndefined();
    expect(w.see(missing, 30)).toBeUndefined();
  });

  test("past JOB_TIMEOUT: overrun while ComfyUI still has it, timeout when it cannot be seen", () => {
    expect(new JobWatch(100, 0).see(running, 100)).toBe("overrun");
    expect(new JobWatch(100, 0).see({ ...running, place: "pending" }, 100)).toBe("overrun");
    expect(new JobWatch(100, 0).see(down, 100)).toBe("timeout");
    expect(new JobWatch(100, 0).see({ ...running, place: undefined }, 100)).toBe("timeout");
  });

  test("the clock pauses while the job waits behind another of ours", () => {
    const w = new JobWatch(100, 0);
    expect(w.see({ ...running, place: "pending", behindOurs: true }, 500)).toBeUndefined();
    expect(w.elapsedMs).toBe(0);
    expect(w.see(running, 560)).toBeUndefined();
    expect(w.see(running, 600)).toBe("overrun");
    // Behind a stranger's job the clock runs: that job is no turnstile job with a bound of its own.
    expect(new JobWatch(100, 0).see({ ...running, place: "pending", behindOurs: false }, 100)).toBe("overrun");
  });
});
