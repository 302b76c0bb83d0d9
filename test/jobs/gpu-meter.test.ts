/** What the GPU-seconds quota counts from image jobs' events and LLM grants, and its refusal; on a virtual clock. */
import { describe, expect, test } from "bun:test";
import { GpuTime } from "../../src/fair/gpu-time.ts";
import type { Identity } from "../../src/fair/identity.ts";
import { GpuMeter, type GpuWork } from "../../src/jobs/gpu-meter.ts";

const S = 1000;
const who = (client: string, gpu?: number): Identity => ({ client, cls: "normal", by: "key", known: true, gpu });

function meter(limitS = 10) {
  let t = 0;
  const refused: { client: string; work: GpuWork; usedS: number }[] = [];
  const ledger = new GpuTime<Identity>(3600 * S);
  const m = new GpuMeter({
    ledger,
    limitS: (w) => w.gpu ?? limitS,
    now: () => t,
    onRefused: (w, work, usedS) => refused.push({ client: w.client, work, usedS }),
  });
  return { m, ledger, refused, at: (s: number) => (t = s * S), used: (c: string) => ledger.usedMs(c, t) / S };
}

describe("GpuMeter", () => {
  test("an image job counts from its send (or the end of the job before it) to its end, seen running or not", () => {
    const g = meter();
    g.m.onJob({ phase: "received", jobId: 1, promptId: "a", minted: false, who: who("alice") });
    g.m.onJob({ phase: "received", jobId: 2, promptId: "b", minted: false, who: who("bob") });
    g.at(1);
    g.m.onJob({ phase: "forwarded", jobId: 1, status: 200, durationMs: 5 });
    g.m.onJob({ phase: "forwarded", jobId: 2, status: 200, durationMs: 5 });
    // Alice's is seen running at 3 s: it counts from 1 s (sent; nothing ran before it).
    g.at(3);
    g.m.onJob({ phase: "started", jobId: 1, promptId: "a" });
    g.at(4);
    expect(g.used("alice")).toBe(3);
    g.at(6);
    g.m.onJob({ phase: "finished", jobId: 1, promptId: "a", end: "success", durationMs: 5000 });
    g.m.onJob({ phase: "released", jobId: 1, outcome: "completed", heldMs: 5000, gpuReleased: false });
    // Bob's waited in ComfyUI's queue behind Alice's and was never seen running: it ran from 6 s.
    g.at(8);
    g.m.onJob({ phase: "finished", jobId: 2, promptId: "b", end: "success", durationMs: 7000 });
    g.m.onJob({ phase: "finished", jobId: 2, promptId: "b2", end: "success", durationMs: 7000 });
    g.m.onJob({ phase: "released", jobId: 2, outcome: "completed", heldMs: 7000, gpuReleased: true });
    expect(g.used("alice")).toBe(5);
    expect(g.used("bob")).toBe(2);
    // The status: every client's use for one who may steer, else the viewer's own only.
    expect(g.m.uses()).toEqual([
      { client: "alice", class: "normal", used_s: 5, quota_s: 10, running: 0 },
      { client: "bob", class: "normal", used_s: 2, quota_s: 10, running: 0 },
    ]);
    expect(g.m.uses("bob").map((u) => u.client)).toEqual(["bob"]);
  });

  test("a job seen running while the job before it is still counted as running began then, not when it was sent (the other's end not yet heard)", () => {
    const g = meter();
    g.m.onJob({ phase: "received", jobId: 1, promptId: "a", minted: false, who: who("alice") });
    g.m.onJob({ phase: "received", jobId: 2, promptId: "b", minted: false, who: who("bob") });
    g.m.onJob({ phase: "forwarded", jobId: 1, status: 200, durationMs: 5 });
    g.m.onJob({ phase: "started", jobId: 1, promptId: "a" });
    g.at(1);
    g.m.onJob({ phase: "forwarded", jobId: 2, status: 200, durationMs: 5 });
    // The same /queue read shows alice's gone and bob's running; bob's follower tells first.
    g.at(30);
    g.m.onJob({ phase: "started", jobId: 2, promptId: "b" });
    g.m.onJob({ phase: "finished", jobId: 1, promptId: "a", end: "success", durationMs: 30_000 });
    g.at(40);
    g.m.onJob({ phase: "finished", jobId: 2, promptId: "b", end: "success", durationMs: 10_000 });
    expect(g.used("alice")).toBe(30);
    expect(g.used("bob")).toBe(10);
  });

  test("a job refused, never sent, or cancelled while it waited in the queue counts nothing; a retry's backoff neither", () => {
    const g = meter();
    g.m.onJob({ phase: "received", jobId: 1, promptId: "a", minted: false, who: who("alice") });
    g.m.onJob({ phase: "forwarded", jobId: 1, status: 400, durationMs: 5 });
    g.m.onJob({ phase: "released", jobId: 1, outcome: "rejected", heldMs: 5, gpuReleased: true });
    g.m.onJob({ phase: "received", jobId: 2, promptId: "b", minted: false, who: who("alice") });
    g.at(2);
    g.m.onJob({ phase: "forwarded", jobId: 2, status: 200, durationMs: 5 });
    g.at(5);
    g.m.onJob({ phase: "finished", jobId: 2, promptId: "b", end: "cancelled", durationMs: 5 });
    g.m.onJob({ phase: "released", jobId: 2, outcome: "cancelled", heldMs: 5, gpuReleased: true });
    g.m.onJob({ phase: "received", jobId: 3, promptId: "c", minted: true, who: who("alice") });
    g.at(6);
    g.m.onJob({ phase: "started", jobId: 3, promptId: "c" });
    g.at(7);
    g.m.onJob({ phase: "retrying", jobId: 3, attempt: 1, delayMs: 4000, reason: "refused" });
    g.at(11);
    g.m.onJob({ phase: "started", jobId: 3, promptId: "c" });
    g.at(12);
    g.m.onJob({ phase: "finished", jobId: 3, promptId: "c", end: "success", durationMs: 1000 });
    g.m.onJob({ phase: "released", jobId: 3, outcome: "completed", heldMs: 6000, gpuReleased: true });
    expect(g.used("alice")).toBe(2);
    // A job with no client name (picked up at start) is not metered.
    g.m.onJob({ phase: "received", jobId: 4, promptId: "d", minted: false });
    g.m.onJob({ phase: "started", jobId: 4, promptId: "d" });
    g.at(20);
    g.m.onJob({ phase: "finished", jobId: 4, promptId: "d", end: "success", durationMs: 8000 });
    expect(g.ledger.uses(20 * S).map((u) => u.client)).toEqual(["alice"]);
  });

  test("an LLM request counts from each grant to its end, concurrent ones each their own time", () => {
    const g = meter();
    const a = g.m.llm(who("alice"));
    const b = g.m.llm(who("alice"));
    g.at(1);
    a.granted();
    b.granted();
    g.at(2);
    a.paused();
    g.at(4);
    a.granted();
    g.at(5);
    a.ended();
    a.ended();
    b.ended();
    // Granted again after its end (a late admission): not counted.
    a.granted();
    g.at(9);
    expect(g.used("alice")).toBe(2 + 4);
  });

  test("past its quota a client's new work is refused with Retry-After; below it, or with no limit, it is not", () => {
    const g = meter(10);
    const chat = g.m.llm(who("alice"));
    chat.granted();
    g.at(9);
    expect(g.m.refusal(who("alice"), "image")).toBeUndefined();
    g.at(10);
    // The chat still runs: it is not stopped, but new work is refused.
    const r = g.m.refusal(who("alice"), "llm");
    expect(r?.type).toBe("quota_exceeded");
    expect(r?.message).toBe("gpu-turnstile: client alice used 10 s of GPU time in the last 1h0m0s (its quota: 10 s); retry in 3620 s");
    // Its first seconds are in the window's first 30 s slot, gone at 3630 s: never forgiven early.
    expect(r?.headers).toEqual({ "retry-after": "3620" });
    expect(g.refused).toEqual([{ client: "alice", work: "llm", usedS: 10 }]);
    expect(g.m.refusal(who("bob"), "llm")).toBeUndefined();
    expect(g.m.refusal(who("alice", 0), "llm")).toBeUndefined();
    expect(g.m.refusal(who("alice", 60), "llm")).toBeUndefined();
    chat.ended();
    g.at(3629);
    expect(g.m.refusal(who("alice"), "image")).toBeDefined();
    g.at(3630);
    expect(g.m.refusal(who("alice"), "image")).toBeUndefined();
  });
});
