/** The GPU-seconds ledger on a virtual clock: what counts, how the window slides, when a refused client may retry. */
import { describe, expect, test } from "bun:test";
import { GpuTime } from "../../src/fair/gpu-time.ts";

const S = 1000;
const HOUR = 3600 * S;

describe("GpuTime", () => {
  test("a span counts from its start to its end; a running one up to now", () => {
    const g = new GpuTime(HOUR);
    const job = g.begin("alice", 10 * S, undefined);
    expect(g.usedMs("alice", 25 * S)).toBe(15 * S);
    expect(g.usedMs("alice", 40 * S)).toBe(30 * S);
    job.end(70 * S);
    job.end(90 * S);
    expect(g.usedMs("alice", 100 * S)).toBe(60 * S);
    expect(g.usedMs("bob", 100 * S)).toBe(0);
  });

  test("concurrent spans each count their own wall time (the upper bound)", () => {
    const g = new GpuTime(HOUR);
    const a = g.begin("alice", 0, undefined);
    const b = g.begin("alice", 5 * S, undefined);
    a.end(20 * S);
    b.end(20 * S);
    expect(g.usedMs("alice", 20 * S)).toBe(35 * S);
  });

  test("use slides out of the window; a span longer than the window counts only its last window", () => {
    const g = new GpuTime(120 * S); // one-second slots
    g.begin("alice", 0, undefined).end(30 * S);
    expect(g.usedMs("alice", 100 * S)).toBe(30 * S);
    // At 130.5 s the window reaches back to 10 s (the start of the slot holding 10.5 s).
    expect(g.usedMs("alice", 130.5 * S)).toBe(20 * S);
    expect(g.usedMs("alice", 151 * S)).toBe(0);
    g.begin("bob", 0, undefined).end(1000 * S);
    expect(g.usedMs("bob", 1000 * S)).toBe(120 * S);
  });

  test("Retry-After: when enough of the oldest use has left the window to be under the limit", () => {
    const g = new GpuTime(120 * S);
    g.begin("alice", 0, undefined).end(40 * S);
    g.begin("alice", 60 * S, undefined).end(70 * S);
    // 50 s used at 80 s; under 45 s once 6 s of the first span are out: the slot [5 s, 6 s) leaves at 126 s.
    expect(g.retryAfterMs("alice", 45 * S, 80 * S)).toBe(46 * S);
    expect(g.usedMs("alice", 126 * S - 1)).toBeGreaterThanOrEqual(45 * S);
    expect(g.usedMs("alice", 126 * S)).toBeLessThan(45 * S);
    expect(g.retryAfterMs("alice", 60 * S, 80 * S)).toBe(0);
    expect(g.retryAfterMs("nobody", 1, 80 * S)).toBe(0);
  });

  test("Retry-After counts running work as it stands: still running at that moment, the client is refused again with a new figure", () => {
    const g = new GpuTime(120 * S);
    g.begin("alice", 0, undefined);
    const first = g.retryAfterMs("alice", 10 * S, 10 * S);
    expect(first).toBeGreaterThan(0);
    const later = 10 * S + first;
    expect(g.usedMs("alice", later)).toBeGreaterThanOrEqual(10 * S);
    expect(g.retryAfterMs("alice", 10 * S, later)).toBeGreaterThan(0);
  });

  test("a span begun in the past (its start learned late) charges from then", () => {
    const g = new GpuTime(HOUR);
    g.begin("alice", 5 * S, undefined).end(9 * S);
    g.begin("alice", 2 * S, undefined);
    expect(g.usedMs("alice", 10 * S)).toBe(12 * S);
  });

  test("uses: each client with use or running work, most first; clients with nothing left are forgotten", () => {
    const g = new GpuTime(120 * S);
    g.begin("bob", 0, undefined).end(5 * S);
    g.begin("alice", 0, undefined).end(20 * S);
    const c = g.begin("carol", 20 * S, undefined);
    expect(g.uses(20 * S)).toEqual([
      { client: "alice", tag: undefined, usedMs: 20 * S, running: 0 },
      { client: "bob", tag: undefined, usedMs: 5 * S, running: 0 },
      { client: "carol", tag: undefined, usedMs: 0, running: 1 },
    ]);
    c.end(30 * S);
    expect(g.uses(200 * S)).toEqual([]);
    expect(g.usedMs("alice", 200 * S)).toBe(0);
  });

  test("memory stays bounded: a client's many short spans fold into the window's slots", () => {
    const g = new GpuTime(HOUR);
    let t = 0;
    for (let i = 0; i < 50_000; i++, t += 200) g.begin("alice", t, undefined).end(t + 100);
    // 50 000 spans of 0.1 s over 10 000 s: half of the last hour (and at most one 30 s slot more).
    const used = g.usedMs("alice", t);
    expect(used).toBeGreaterThanOrEqual(1800 * S);
    expect(used).toBeLessThanOrEqual(1815 * S);
  });
});
