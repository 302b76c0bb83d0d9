/**
 * Fair turns in the lock (issue 30): waiting image jobs that name a client are taken in turns
 * across clients; in an image session each client has one job in ComfyUI at a time, and the
 * session's last member hands over to the next instead of ending it (one checkpoint load).
 */
import { describe, expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import type { ImageLease } from "../../src/lock/index.ts";
import { fakeClock, flush, track } from "./helpers.ts";

const A = { client: "alice", cls: "normal" };
const B = { client: "bob", cls: "normal" };
const NIGHT = { client: "night", cls: "batch" };

/** Grants in the order they resolve. */
function recorder() {
  const order: string[] = [];
  const leases = new Map<string, ImageLease>();
  const ask = (lock: GpuLock, name: string, who?: { client: string; cls: string }) =>
    void lock.acquireImage(undefined, who).then((l) => {
      order.push(name);
      leases.set(name, l);
    });
  return { order, leases, ask };
}

describe("without sessions", () => {
  test("image jobs waiting behind a chat go in turns across clients, not first come, first served", async () => {
    const lock = new GpuLock({ now: fakeClock().now });
    const chat = lock.tryAcquireLLM()!;
    const r = recorder();
    for (let i = 1; i <= 5; i++) r.ask(lock, `a${i}`, A);
    r.ask(lock, "b1", B);
    chat.release();
    for (let n = 0; n < 6; n++) {
      await flush();
      r.leases.get(r.order.at(-1)!)!.release();
    }
    await flush();
    expect(r.order).toEqual(["a1", "b1", "a2", "a3", "a4", "a5"]);
  });

  test("a client that comes later takes turns with the batch: its jobs do not all go first", async () => {
    const lock = new GpuLock({ now: fakeClock().now });
    const chat = lock.tryAcquireLLM()!;
    const r = recorder();
    for (let i = 1; i <= 6; i++) r.ask(lock, `a${i}`, A);
    chat.release();
    for (let n = 0; n < 3; n++) {
      await flush();
      r.leases.get(r.order.at(-1)!)!.release();
    }
    await flush();
    expect(r.order).toEqual(["a1", "a2", "a3", "a4"]);
    for (let i = 1; i <= 3; i++) r.ask(lock, `b${i}`, B);
    for (let n = 0; n < 6; n++) {
      r.leases.get(r.order.at(-1)!)!.release();
      await flush();
    }
    expect(r.order).toEqual(["a1", "a2", "a3", "a4", "b1", "a5", "b2", "a6", "b3"]);
  });

  test("jobs that name no client keep call order among themselves", async () => {
    const lock = new GpuLock({ now: fakeClock().now });
    const chat = lock.tryAcquireLLM()!;
    const r = recorder();
    for (let i = 1; i <= 4; i++) r.ask(lock, `j${i}`);
    chat.release();
    for (let n = 0; n < 4; n++) {
      await flush();
      r.leases.get(r.order.at(-1)!)!.release();
    }
    expect(r.order).toEqual(["j1", "j2", "j3", "j4"]);
  });

  test("a weighted class: a batch client gets its turns, fewer of them", async () => {
    const lock = new GpuLock({ now: fakeClock().now, turnClasses: [{ name: "normal", weight: 2 }, { name: "batch", weight: 1 }] });
    const chat = lock.tryAcquireLLM()!;
    const r = recorder();
    for (let i = 1; i <= 3; i++) r.ask(lock, `n${i}`, NIGHT);
    for (let i = 1; i <= 6; i++) r.ask(lock, `a${i}`, A);
    chat.release();
    for (let n = 0; n < 9; n++) {
      await flush();
      r.leases.get(r.order.at(-1)!)!.release();
    }
    expect(r.order.map((x) => x[0]).join("")).toBe("anaanaanaa".slice(0, 9));
  });
});

describe("with sessions", () => {
  test("one client's jobs go one at a time into the session; another client's job joins at once, behind one of them", async () => {
    const lock = new GpuLock({ now: fakeClock().now, imageSessionMaxMs: 60_000 });
    const r = recorder();
    for (let i = 1; i <= 50; i++) r.ask(lock, `a${i}`, A);
    await flush();
    expect(r.order).toEqual(["a1"]);
    expect(lock.snapshot().imageWaiting).toBe(49);
    r.ask(lock, "b1", B);
    await flush();
    expect(r.order).toEqual(["a1", "b1"]);
    const session = r.leases.get("a1")!.sessionId;
    expect(r.leases.get("b1")!.sessionId).toBe(session);
    // a1 ends (ComfyUI runs b1 next): a2 joins behind it.
    expect(r.leases.get("a1")!.closeIfLast()).toBe(false);
    r.leases.get("a1")!.release();
    await flush();
    expect(r.order).toEqual(["a1", "b1", "a2"]);
  });

  test("the session's last member hands over to the next waiter instead of ending the session: one checkpoint load", async () => {
    const lock = new GpuLock({ now: fakeClock().now, imageSessionMaxMs: 60_000 });
    const r = recorder();
    for (let i = 1; i <= 3; i++) r.ask(lock, `a${i}`, A);
    await flush();
    const states: string[] = [];
    lock.onEvent((e) => e.type === "transition" && states.push(e.to));
    for (let i = 1; i <= 3; i++) {
      const l = r.leases.get(`a${i}`)!;
      expect(l.sessionId).toBe(r.leases.get("a1")!.sessionId);
      expect(l.closeIfLast()).toBe(i === 3);
      l.release();
      await flush();
    }
    expect(r.order).toEqual(["a1", "a2", "a3"]);
    expect(states).toEqual(["idle"]);
  });

  test("no hand-over once chats have waited past IMAGE_SESSION_MAX: the session ends and the chat goes", async () => {
    const clock = fakeClock();
    const lock = new GpuLock({ now: clock.now, imageSessionMaxMs: 1000 });
    const r = recorder();
    r.ask(lock, "a1", A);
    await flush();
    const chat = track(lock.acquireLLM());
    r.ask(lock, "a2", A);
    clock.advance(1500);
    const a1 = r.leases.get("a1")!;
    expect(a1.closeIfLast()).toBe(true);
    a1.release();
    await flush();
    expect(chat.current.status).toBe("resolved");
    expect(r.order).toEqual(["a1"]);
  });

  test("a waiter that gave up is not handed the session", async () => {
    const lock = new GpuLock({ now: fakeClock().now, imageSessionMaxMs: 60_000 });
    const r = recorder();
    r.ask(lock, "a1", A);
    const ac = new AbortController();
    const a2 = track(lock.acquireImage(ac.signal, A));
    await flush();
    ac.abort();
    const a1 = r.leases.get("a1")!;
    expect(a1.closeIfLast()).toBe(true);
    a1.release();
    await flush();
    expect(a2.current.status).toBe("rejected");
    expect(lock.state).toBe("idle");
  });

  test("a batch client's session gives way to a waiting chat after the job it has in ComfyUI, and carries on after it", async () => {
    const lock = new GpuLock({
      now: fakeClock().now,
      imageSessionMaxMs: 60_000,
      turnClasses: [{ name: "normal", weight: 2 }, { name: "batch", weight: 1, chatsFirst: true }],
    });
    const r = recorder();
    for (let i = 1; i <= 3; i++) r.ask(lock, `n${i}`, NIGHT);
    await flush();
    expect(r.order).toEqual(["n1"]);
    const chat = track(lock.acquireLLM());
    const n1 = r.leases.get("n1")!;
    expect(n1.closeIfLast()).toBe(true); // no hand-over to n2: the chat waits
    n1.release();
    await flush();
    expect(chat.current.status).toBe("resolved");
    expect(r.order).toEqual(["n1"]);
    if (chat.current.status === "resolved") chat.current.value.release();
    await flush();
    expect(r.order).toEqual(["n1", "n2"]);
  });

  test("a chat arriving while chats run and only a batch client's job waits goes in at once, not after the running chats", async () => {
    const lock = new GpuLock({
      now: fakeClock().now,
      imageSessionMaxMs: 60_000,
      turnClasses: [{ name: "normal", weight: 2 }, { name: "batch", weight: 1, chatsFirst: true }],
    });
    const running = lock.tryAcquireLLM()!;
    const r = recorder();
    r.ask(lock, "n1", NIGHT);
    await flush();
    expect(r.order).toEqual([]);
    const chat = track(lock.acquireLLM());
    await flush();
    expect(chat.current.status).toBe("resolved");
    // A normal client's job still holds new chats back (image priority), as before.
    r.ask(lock, "a1", A);
    await flush();
    expect(lock.tryAcquireLLM()).toBeNull();
    running.release();
    if (chat.current.status === "resolved") chat.current.value.release();
    await flush();
    expect(r.order[0]).toBe("a1");
  });

  test("a normal client's session does not give way: chats wait for IMAGE_SESSION_MAX, as before", async () => {
    const lock = new GpuLock({
      now: fakeClock().now,
      imageSessionMaxMs: 60_000,
      turnClasses: [{ name: "normal", weight: 2 }, { name: "batch", weight: 1, chatsFirst: true }],
    });
    const r = recorder();
    for (let i = 1; i <= 2; i++) r.ask(lock, `a${i}`, A);
    await flush();
    const chat = track(lock.acquireLLM());
    const a1 = r.leases.get("a1")!;
    expect(a1.closeIfLast()).toBe(false);
    a1.release();
    await flush();
    expect(r.order).toEqual(["a1", "a2"]);
    expect(chat.current.status).toBe("pending");
  });
});
