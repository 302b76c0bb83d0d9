/** Waking followers on a client's cancel, and one /queue read shared by every follower. */
import { describe, expect, test } from "bun:test";
import type { ComfyClient, QueueView } from "../../src/comfy/client.ts";
import { BURST_MS, Nudges } from "../../src/jobs/nudge.ts";
import { SharedQueue } from "../../src/jobs/queue-share.ts";
import { cancelTargets, isCancelRoute } from "../../src/proxy/comfy-cancels.ts";

const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

describe("cancelTargets: which jobs a passing request ends (api-facts S3)", () => {
  test("each route, with and without /api", () => {
    expect(cancelTargets("/interrupt", enc({ prompt_id: "a" }))).toEqual(["a"]);
    expect(cancelTargets("/api/interrupt", undefined)).toBe("all");
    expect(cancelTargets("/interrupt", enc({}))).toBe("all");
    expect(cancelTargets("/queue", enc({ delete: ["a", "b", 3] }))).toEqual(["a", "b"]);
    expect(cancelTargets("/api/queue", enc({ clear: true }))).toBe("all");
    expect(cancelTargets("/queue", undefined)).toBe("all"); // a body we did not see may name anything
    expect(cancelTargets("/api/jobs/a/cancel", undefined)).toEqual(["a"]);
    expect(cancelTargets("/api/jobs/cancel", enc({ job_ids: ["a"] }))).toEqual(["a"]);
    expect(cancelTargets("/api/jobs/cancel", undefined)).toBe("all");
  });

  test("other routes end nothing; the jobs routes have no alias without /api", () => {
    for (const p of ["/prompt", "/history", "/free", "/jobs/a/cancel", "/api/jobs/a"]) {
      expect({ p, route: isCancelRoute(p), targets: cancelTargets(p, enc({ delete: ["a"] })) }).toEqual({ p, route: false, targets: undefined });
    }
  });
});

describe("Nudges", () => {
  test("a nudge ends a follower's sleep at once and marks its id; the next sleeps are short, then normal", async () => {
    const n = new Nudges();
    n.follow("a");
    const t0 = performance.now();
    const sleeping = n.wait("a", 60_000);
    n.nudge(["a", "unfollowed"]);
    await sleeping;
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(n.takeNamed("a")).toBe(true);
    expect(n.takeNamed("a")).toBe(false);
    const t1 = performance.now();
    await n.wait("a", 60_000); // the burst's first step
    expect(performance.now() - t1).toBeLessThan(BURST_MS[0] + 500);
    n.end("a");
    expect(n.takeNamed("unfollowed")).toBe(false);
  });

  test("'all' wakes every follower", async () => {
    const n = new Nudges();
    n.follow("a");
    n.follow("b");
    const both = Promise.all([n.wait("a", 60_000), n.wait("b", 60_000)]);
    n.nudge("all");
    await both;
    expect([n.takeNamed("a"), n.takeNamed("b")]).toEqual([true, true]);
  });
});

describe("SharedQueue", () => {
  function fakeComfy() {
    let reads = 0;
    const release: (() => void)[] = [];
    const comfy = {
      queue: () =>
        new Promise<QueueView>((resolve) => {
          reads++;
          release.push(() => resolve({ running: [`r${reads}`], pending: [] }));
        }),
    } as unknown as ComfyClient;
    return { comfy, reads: () => reads, finish: () => release.splice(0).forEach((r) => r()) };
  }

  test("followers share a read that started after they allow; an older one is never used", async () => {
    let clock = 100;
    const f = fakeComfy();
    const q = new SharedQueue(f.comfy, () => clock);
    const a = q.read(50);
    const b = q.read(90); // joins the read in flight (started at 100)
    expect(f.reads()).toBe(1);
    f.finish();
    expect(await a).toEqual(await b);
    clock = 200;
    const c = q.read(150); // the last read started at 100: too old
    expect(f.reads()).toBe(2);
    f.finish();
    expect((await c)!.running).toEqual(["r2"]);
    expect(await q.read(200)).toEqual(await c);
    expect(f.reads()).toBe(2);
  });
});
