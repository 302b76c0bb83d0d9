import { expect, test } from "bun:test";
import { GpuLock } from "../../../src/lock/index.ts";
import { DrainTimeout, drainCutWarning, LlmDrainBound } from "../../../src/proxy/llm-drain.ts";

function setup(boundMs = 1000, leaseHolder?: () => string | undefined) {
  let now = 0;
  const lock = new GpuLock({ now: () => now });
  const cuts: Error[] = [];
  const seen: Parameters<ConstructorParameters<typeof LlmDrainBound>[0]["onCut"]>[0][] = [];
  const bound = new LlmDrainBound({
    lock,
    llm: { cutAll: (err) => (cuts.push(err), 2) },
    boundMs,
    bound: "1s",
    onCut: (r) => seen.push(r),
    leaseHolder,
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
  expect(cuts[0]!.message).toStartWith("gpu-turnstile: an image job waited");
  expect(seen).toEqual([{ cut: 2, waitedMs: 1000, waiter: { kind: "image" } }]);
  expect(drainCutWarning(seen[0]!, "1s")).toEqual(["an image job waited LLM_DRAIN_TIMEOUT (1s) for running LLM requests: 2 cut", { llm_cut: 2, waiter: "image", client: null }]);
  void job;
});

test("a lease kept waiting: the cut names the lease, and the warning its holder", async () => {
  const { lock, cuts, seen, tick } = setup(1000, () => "train.py");
  await lock.acquireLLM();
  void lock.acquireLease();
  tick(0);
  tick(1000);
  expect(cuts[0]!.message).toBe("gpu-turnstile: a GPU lease waited LLM_DRAIN_TIMEOUT (1s) for this request to end; it was cut");
  expect(seen).toEqual([{ cut: 2, waitedMs: 1000, waiter: { kind: "lease", holder: "train.py" } }]);
  expect(drainCutWarning(seen[0]!, "1s")).toEqual(['a GPU lease for "train.py" waited LLM_DRAIN_TIMEOUT (1s) for running LLM requests: 2 cut', { llm_cut: 2, waiter: "lease", holder: "train.py" }]);
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
