import { expect, test } from "bun:test";
import { GpuLock } from "../../../src/lock/index.ts";
import { DrainTimeout, LlmDrainBound } from "../../../src/proxy/llm-drain.ts";

function setup(boundMs = 1000) {
  let now = 0;
  const lock = new GpuLock({ now: () => now });
  const cuts: Error[] = [];
  const seen: { cut: number; waitedMs: number }[] = [];
  const bound = new LlmDrainBound({
    lock,
    llm: { cutAll: (err) => (cuts.push(err), 2) },
    boundMs,
    bound: "1s",
    onCut: (r) => seen.push(r),
    now: () => now,
  });
  return { lock, bound, cuts, seen, tick: (ms: number) => ((now += ms), bound.check()) };
}

test("running LLM requests are cut once an image job has waited for them the whole bound, not before", async () => {
  const { lock, bound, cuts, seen, tick } = setup();
  await lock.acquireLLM();
  bound.check();
  const job = lock.acquireImage();
  tick(0);
  tick(999);
  expect(cuts).toEqual([]);
  tick(1);
  expect(cuts).toHaveLength(1);
  expect(cuts[0]).toBeInstanceOf(DrainTimeout);
  expect(cuts[0]!.message).toContain("LLM_DRAIN_TIMEOUT (1s)");
  expect(seen).toEqual([{ cut: 2, waitedMs: 1000 }]);
  void job;
});

test("no image job waiting, or the card not held by LLM work: nothing is cut, however long the chats run", async () => {
  const { lock, cuts, tick } = setup();
  const l = await lock.acquireLLM();
  tick(0);
  tick(10_000);
  expect(cuts).toEqual([]);
  // The wait is counted afresh for each image job: a job that came and went leaves nothing behind.
  const ac = new AbortController();
  const job = lock.acquireImage(ac.signal).catch(() => {});
  tick(900);
  ac.abort();
  await job;
  tick(0);
  void lock.acquireImage();
  tick(900);
  expect(cuts).toEqual([]);
  l.release();
  tick(5_000);
  expect(cuts).toEqual([]);
});
