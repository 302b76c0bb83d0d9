/**
 * `systemctl status` is never stale: the STATUS= line follows every holder and waiter count, not
 * only state changes, and busy traffic costs at most one datagram per beat (4 a second).
 */
import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import { reportStatus } from "../../src/service/notify-status.ts";

/** A reporter whose beats the test strikes by hand. */
function manual(lock: GpuLock) {
  const sent: string[] = [];
  let beat = () => {};
  let stopped = false;
  const stop = reportStatus({
    snapshot: () => lock.snapshot(),
    send: (t) => sent.push(t),
    every: (tick) => ((beat = tick), () => void (stopped = true)),
  });
  return { sent, beat: () => beat(), stop, stopped: () => stopped };
}

test("the status is sent at once, then on the next beat after any count changed", async () => {
  const lock = new GpuLock();
  const r = manual(lock);
  expect(r.sent).toEqual(["GPU idle: 0 LLM request(s) running, 0 waiting; 0 image job(s) waiting"]);
  const chat = await lock.acquireLLM();
  r.beat();
  expect(r.sent.at(-1)).toBe("GPU llm: 1 LLM request(s) running, 0 waiting; 0 image job(s) waiting");
  // An image job queues behind the chat: no state change, but the waiter shows.
  const image = lock.acquireImage();
  r.beat();
  expect(r.sent.at(-1)).toBe("GPU llm: 1 LLM request(s) running, 0 waiting; 1 image job(s) waiting");
  // A chat behind the waiting image job.
  const later = lock.acquireLLM();
  r.beat();
  expect(r.sent.at(-1)).toBe("GPU llm: 1 LLM request(s) running, 1 waiting; 1 image job(s) waiting");
  expect(r.sent).toHaveLength(4);
  // Nothing changed: nothing sent.
  r.beat();
  expect(r.sent).toHaveLength(4);
  chat.release();
  (await image).release();
  (await later).release();
  r.beat();
  expect(r.sent.at(-1)).toBe("GPU idle: 0 LLM request(s) running, 0 waiting; 0 image job(s) waiting");
  r.stop();
  expect(r.stopped()).toBe(true);
});

test("a thousand chats between two beats are one datagram", async () => {
  const lock = new GpuLock();
  const r = manual(lock);
  for (let i = 0; i < 1000; i++) (await lock.acquireLLM()).release();
  const held = await lock.acquireLLM();
  r.beat();
  expect(r.sent).toHaveLength(2);
  expect(r.sent[1]).toStartWith("GPU llm: 1 LLM request(s) running");
  held.release();
});
