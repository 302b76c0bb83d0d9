/**
 * The after-hand-off check of an LLM tenant (llama-server's --fit squeeze): armed only by the card
 * coming back from the image side or a lease, run once when the first LLM slot after that is given
 * back, never on an ordinary LLM turn, and never failing anything when the reading fails.
 */
import { expect, test } from "bun:test";
import type { LockEvent } from "../../src/lock/index.ts";
import { AfterLoadCheck } from "../../src/tenants/after-load.ts";

function fakeLock() {
  const listeners: ((e: LockEvent) => void)[] = [];
  return {
    onEvent(fn: (e: LockEvent) => void) {
      listeners.push(fn);
      return () => {};
    },
    emit(e: LockEvent) {
      for (const l of listeners) l(e);
    },
  };
}
const turn = (from: string, to: string) => ({ type: "transition", from, to, at: 0, snapshot: {} }) as unknown as LockEvent;
const llmDone = { type: "released", kind: "llm", heldMs: 1, id: 1 } as LockEvent;

test("after an image turn, the first LLM slot given back runs the check once and reports each finding", async () => {
  const lock = fakeLock();
  const reported: string[] = [];
  let runs = 0;
  const c = new AfterLoadCheck(async () => (runs++, ["qwen loaded with 12% of its context"]), (f) => reported.push(f), 1000);
  c.watch(lock);
  lock.emit(turn("idle", "llm"));
  lock.emit(llmDone);
  expect(runs).toBe(0); // an ordinary LLM turn checks nothing
  lock.emit(turn("llm", "image"));
  lock.emit(turn("image", "llm"));
  expect(c.armed).toBe(true);
  lock.emit(llmDone);
  lock.emit(llmDone);
  await c.ended();
  expect(runs).toBe(1);
  expect(reported).toEqual(["qwen loaded with 12% of its context"]);
});

test("the image side taking the card again disarms it; a failed reading reports nothing and does not throw", async () => {
  const lock = fakeLock();
  const reported: string[] = [];
  const c = new AfterLoadCheck(() => Promise.reject(new Error("down")), (f) => reported.push(f), 1000);
  c.watch(lock);
  lock.emit(turn("lease", "idle"));
  expect(c.armed).toBe(true);
  lock.emit(turn("idle", "image"));
  expect(c.armed).toBe(false);
  lock.emit(turn("image", "idle"));
  await c.ended();
  expect(reported).toEqual([]);
  expect(c.armed).toBe(false);
});
