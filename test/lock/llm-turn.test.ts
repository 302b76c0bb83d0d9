import { expect, test } from "bun:test";
import { turnsAhead } from "../../src/lock/llm-turn.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { fakeClock, flush } from "./helpers.ts";

const image = (id: number) => ({ id, kind: "image" as const });
const lease = (id: number) => ({ id, kind: "lease" as const });

test("without sessions every image job and lease goes first", () => {
  expect(turnsAhead([image(9), lease(2), image(3)], 5, false, false)).toBe(3);
});

test("with sessions: the waiters up to the last that called before the chat, and every image job once a session may take them", () => {
  // Nothing older, no session admitting: the chat's turn is next.
  expect(turnsAhead([image(9), image(8)], 5, true, false)).toBe(0);
  // The session holding the card may still take both.
  expect(turnsAhead([image(9), image(8)], 5, true, true)).toBe(2);
  // An older lease, then newer work behind it in the line: only the lease goes first.
  expect(turnsAhead([lease(2), image(9)], 5, true, false)).toBe(1);
  // An older image job opens a session the newer one may join; the newer lease waits for the chat.
  expect(turnsAhead([image(9), image(3), lease(8)], 5, true, false)).toBe(2);
  // A newer lease first in the line goes before the older waiter behind it.
  expect(turnsAhead([lease(8), lease(2)], 5, true, false)).toBe(2);
});

test("llmLine: each waiting chat with its client and how many of imageLine() go before its LLM turn", async () => {
  const clock = fakeClock();
  const lock = new GpuLock({ now: clock.now, imageSessionMaxMs: 1000 });
  const running = lock.tryAcquireLLM()!;
  void lock.acquireImage(undefined, { client: "alice", cls: "normal", tag: 1 });
  void lock.acquireLLM(undefined, { client: "bob", cls: "normal", tag: 7 });
  void lock.acquireImage(undefined, { client: "carol", cls: "normal", tag: 2 });
  void lock.acquireLLM(undefined, { client: "dave", cls: "batch", tag: 8 });
  // Alice's job opens a session carol's may join: both before either chat's turn.
  expect(lock.llmLine()).toEqual([
    { client: "bob", cls: "normal", tag: 7, ahead: 2 },
    { client: "dave", cls: "batch", tag: 8, ahead: 2 },
  ]);
  running.release();
  await flush();
  // Both jobs hold the card in one session: no waiter is left ahead of either chat.
  expect(lock.state).toBe("image");
  expect(lock.llmLine().map((e) => e.ahead)).toEqual([0, 0]);
  expect(lock.imageLine()).toEqual([]);
});
