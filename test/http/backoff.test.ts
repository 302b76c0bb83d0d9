import { expect, test } from "bun:test";
import { backoffDelays, sleep } from "../../src/http/backoff.ts";

test("delays start at the initial value, double, and stay at the cap", () => {
  const next = backoffDelays(1, 30);
  expect(Array.from({ length: 9 }, next)).toEqual([1, 2, 4, 8, 16, 30, 30, 30, 30]);
});

test("a cap that is a power-of-two multiple is reached exactly", () => {
  const next = backoffDelays(250, 2000);
  expect(Array.from({ length: 6 }, next)).toEqual([250, 500, 1000, 2000, 2000, 2000]);
});

test("an initial delay above the cap is clamped to the cap", () => {
  const next = backoffDelays(5000, 1000);
  expect([next(), next()]).toEqual([1000, 1000]);
});

test("each schedule is independent", () => {
  const a = backoffDelays(1, 8);
  a();
  a();
  const b = backoffDelays(1, 8);
  expect([a(), b()]).toEqual([4, 1]);
});

test("sleep resolves after its delay", async () => {
  await expect(sleep(1)).resolves.toBeUndefined();
  await expect(sleep(1, new AbortController().signal)).resolves.toBeUndefined();
});

test("sleep rejects at once with the abort reason when aborted while sleeping", async () => {
  const ac = new AbortController();
  const reason = new Error("client went away");
  const p = sleep(60_000, ac.signal);
  ac.abort(reason);
  await expect(p).rejects.toBe(reason);
}, 2000);

test("sleep rejects at once when the signal was already aborted", async () => {
  const reason = { why: "gone" };
  await expect(sleep(60_000, AbortSignal.abort(reason))).rejects.toBe(reason);
}, 2000);
