import { describe, expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import type { Lease, LockEvent, LockSnapshot } from "../../src/lock/index.ts";
import { flush, granted, setup, track } from "./helpers.ts";

const idle: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 };

describe("LLM slots", () => {
  test("LLM requests enter an idle or llm GPU at once and count up", async () => {
    const { lock } = setup();
    const a = lock.acquireLLM();
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
    const b = lock.acquireLLM();
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 2 });
    (await granted(a)).release();
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
    (await granted(b)).release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test.each([
    ["image held", true],
    ["image pending behind a running LLM", false],
  ])("a new LLM request waits while an %s", async (_name, imageHeld) => {
    const { lock } = setup();
    const first = imageHeld ? undefined : await granted(lock.acquireLLM());
    const image = track(lock.acquireImage());
    const llm = track(lock.acquireLLM());
    await flush();
    expect(llm.current.status).toBe("pending");
    expect(lock.snapshot()).toMatchObject({ llmWaiting: 1, llmInflight: imageHeld ? 0 : 1 });
    expect(lock.snapshot().imagePending).toBe(!imageHeld);
    // The image goes first once the running LLM drains; the waiting LLM only after the image.
    first?.release();
    await flush();
    expect(image.current.status).toBe("resolved");
    expect(llm.current.status).toBe("pending");
    if (image.current.status === "resolved") image.current.value.release();
    await flush();
    expect(llm.current.status).toBe("resolved");
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
  });
});

describe("image jobs", () => {
  test("an image waits until every in-flight LLM request is released, and the grant shows at once", async () => {
    const { lock } = setup();
    const a = await granted(lock.acquireLLM());
    const b = await granted(lock.acquireLLM());
    const image = track(lock.acquireImage());
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 2, imagePending: true, imageWaiting: 1 });
    a.release();
    await flush();
    expect(image.current.status).toBe("pending");
    b.release();
    // Decided synchronously: the snapshot is right before the promise reaction has run.
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    expect(image.current.status).toBe("pending");
    await flush();
    expect(image.current.status).toBe("resolved");
  });

  test("image jobs are granted FIFO and keep priority over LLM requests that waited longer", async () => {
    const { lock } = setup();
    const order: string[] = [];
    const take = (name: string, p: Promise<Lease>) => p.then((l) => (order.push(name), l));
    const i1 = take("i1", lock.acquireImage());
    const llm = take("llm", lock.acquireLLM());
    const i2 = take("i2", lock.acquireImage());
    const i3 = take("i3", lock.acquireImage());
    expect(lock.snapshot()).toEqual({ state: "image", llmInflight: 0, imagePending: true, imageWaiting: 2, llmWaiting: 1 });
    (await i1).release();
    (await i2).release();
    await flush();
    expect(order).toEqual(["i1", "i2", "i3"]);
    (await i3).release();
    await llm;
    expect(order).toEqual(["i1", "i2", "i3", "llm"]);
  });

  test("releasing the last image admits every waiting LLM request at once", async () => {
    const { lock } = setup();
    const image = await granted(lock.acquireImage());
    const llms = [lock.acquireLLM(), lock.acquireLLM(), lock.acquireLLM()].map(track);
    image.release();
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 3 });
    await flush();
    expect(llms.map((l) => l.current.status)).toEqual(["resolved", "resolved", "resolved"]);
  });
});

describe("abort", () => {
  const reason = new Error("client went away");

  test.each([
    ["an LLM waiter behind a held image", "llm"],
    ["an image waiter behind running LLMs", "image"],
    ["an image waiter behind a held image", "image-behind-image"],
  ] as const)("aborting %s rejects it with the reason and leaves no trace", async (_name, which) => {
    const { lock, events } = setup();
    const holder = await granted(which === "image" ? lock.acquireLLM() : lock.acquireImage());
    const before = lock.snapshot();
    const eventsBefore = events.length;
    const ac = new AbortController();
    const waiter = track(which === "llm" ? lock.acquireLLM(ac.signal) : lock.acquireImage(ac.signal));
    expect(lock.snapshot()).not.toEqual(before);
    ac.abort(reason);
    expect(lock.snapshot()).toEqual(before);
    await flush();
    expect(waiter.current).toEqual({ status: "rejected", reason, settles: 1 });
    expect(events.slice(eventsBefore)).toEqual([
      { type: "abandoned", kind: which === "llm" ? "llm" : "image", waitedMs: 0, reason, id: 2 },
    ]);
    holder.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("aborting the only pending image admits the LLM requests it was holding back", async () => {
    const { lock } = setup();
    const running = await granted(lock.acquireLLM());
    const ac = new AbortController();
    const image = track(lock.acquireImage(ac.signal));
    const waiting = [track(lock.acquireLLM()), track(lock.acquireLLM())];
    ac.abort(reason);
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 3 });
    await flush();
    expect(image.current.status).toBe("rejected");
    expect(waiting.map((w) => w.current.status)).toEqual(["resolved", "resolved"]);
    running.release();
    for (const w of waiting) if (w.current.status === "resolved") w.current.value.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("aborting a pending image while another image holds the GPU keeps LLMs waiting", async () => {
    const { lock } = setup();
    const held = await granted(lock.acquireImage());
    const ac = new AbortController();
    lock.acquireImage(ac.signal).catch(() => {});
    const llm = track(lock.acquireLLM());
    ac.abort(reason);
    await flush();
    expect(llm.current.status).toBe("pending");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image", llmWaiting: 1 });
    held.release();
    await flush();
    expect(llm.current.status).toBe("resolved");
  });

  test("aborting the head image hands the GPU to the next image, not to waiting LLMs", async () => {
    const { lock } = setup();
    const running = await granted(lock.acquireLLM());
    const ac = new AbortController();
    lock.acquireImage(ac.signal).catch(() => {});
    const second = track(lock.acquireImage());
    const llm = track(lock.acquireLLM());
    ac.abort(reason);
    running.release();
    await flush();
    expect(second.current.status).toBe("resolved");
    expect(llm.current.status).toBe("pending");
  });

  test("an abort after the grant does nothing: the lease stays the caller's", async () => {
    const { lock } = setup();
    const ac = new AbortController();
    const p = lock.acquireImage(ac.signal);
    ac.abort(reason); // same tick as the grant, before the caller has seen the lease
    const lease = await p;
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    lease.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("an abort listener that frees the GPU mid-abort cannot grant the aborting waiter", async () => {
    // The signal is already aborted when the earlier listener releases the holder, so the lock
    // dispatches before its own abort listener has run: it must reject, not grant, that waiter.
    const { lock, events } = setup();
    const held = await granted(lock.acquireImage());
    const ac = new AbortController();
    ac.signal.addEventListener("abort", () => held.release());
    const waiter = track(lock.acquireImage(ac.signal));
    const next = track(lock.acquireImage());
    ac.abort(reason);
    await flush();
    expect(waiter.current).toEqual({ status: "rejected", reason, settles: 1 });
    expect(next.current.status).toBe("resolved");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    expect(events.filter((e) => e.type === "abandoned")).toHaveLength(1);
  });

  test.each([
    ["acquireLLM", "an idle"],
    ["acquireImage", "an idle"],
    ["acquireLLM", "a busy"],
    ["acquireImage", "a busy"],
  ] as const)("%s with an already-aborted signal rejects at once on %s GPU, no events", async (method, gpu) => {
    const { lock, events } = setup();
    if (gpu === "a busy") await granted(lock.acquireImage());
    const before = lock.snapshot();
    const eventsBefore = events.length;
    const ac = new AbortController();
    ac.abort(reason);
    const t = track(lock[method](ac.signal));
    expect(lock.snapshot()).toEqual(before);
    await flush();
    expect(t.current).toEqual({ status: "rejected", reason, settles: 1 });
    expect(events.length).toBe(eventsBefore);
  });
});

describe("release", () => {
  test("a second LLM release is a no-op and cannot take another request's slot", async () => {
    const { lock, events } = setup();
    const a = await granted(lock.acquireLLM());
    await granted(lock.acquireLLM());
    a.release();
    a.release();
    a.release();
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
    expect(events.filter((e) => e.type === "released")).toHaveLength(1);
  });

  test("a second image release cannot release the next image job", async () => {
    const { lock } = setup();
    const first = await granted(lock.acquireImage());
    const second = track(lock.acquireImage());
    const llm = track(lock.acquireLLM());
    first.release();
    first.release();
    await flush();
    expect(second.current.status).toBe("resolved");
    expect(llm.current.status).toBe("pending");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image", llmWaiting: 1 });
  });
});

describe("tryAcquireLLM", () => {
  test.each([
    ["idle", [], true],
    ["llm", ["llm"], true],
    ["image held", ["image"], false],
    ["image pending", ["llm", "image"], false],
  ] as const)("on a GPU that is %s", async (_name, setupCalls, expectLease) => {
    const { lock, events } = setup();
    for (const kind of setupCalls) (kind === "llm" ? lock.acquireLLM() : lock.acquireImage()).catch(() => {});
    const before = lock.snapshot();
    const eventsBefore = events.length;
    const lease = lock.tryAcquireLLM();
    if (!expectLease) {
      expect(lease).toBeNull();
      expect(lock.snapshot()).toEqual(before);
      expect(events.length).toBe(eventsBefore);
      return;
    }
    expect(lease).toMatchObject({ kind: "llm", waitedMs: 0 });
    expect(lock.snapshot()).toEqual({ ...before, state: "llm", llmInflight: before.llmInflight + 1 });
    lease?.release();
    expect(lock.snapshot()).toEqual(before);
  });
});

describe("events", () => {
  test("transitions carry the right from/to, fire only on real changes, and hand over directly", async () => {
    const { lock, transitions, events } = setup();
    const a = await granted(lock.acquireLLM()); //           idle -> llm
    const b = await granted(lock.acquireLLM()); //           (no change)
    const i1 = track(lock.acquireImage());
    const i2 = track(lock.acquireImage());
    const l = track(lock.acquireLLM());
    a.release(); //                                          (no change)
    b.release(); //                                          llm -> image, no idle in between
    await flush();
    if (i1.current.status !== "resolved") throw new Error("i1 not granted");
    i1.current.value.release(); //                           image -> image: no transition
    await flush();
    if (i2.current.status !== "resolved") throw new Error("i2 not granted");
    i2.current.value.release(); //                           image -> llm
    await flush();
    if (l.current.status !== "resolved") throw new Error("llm not granted");
    l.current.value.release(); //                            llm -> idle
    const i3 = await granted(lock.acquireImage()); //        idle -> image
    i3.release(); //                                         image -> idle
    expect(transitions()).toEqual(["idle->llm", "llm->image", "image->llm", "llm->idle", "idle->image", "image->idle"]);
    const handover = events.findIndex((e) => e.type === "transition" && e.to === "image");
    // Within one step: the cause, then the transition (with the snapshot after it), then the grant.
    expect(events.slice(handover - 1, handover + 2)).toEqual([
      { type: "released", kind: "llm", heldMs: 0, id: 2 },
      {
        type: "transition",
        from: "llm",
        to: "image",
        at: 1000,
        snapshot: { state: "image", llmInflight: 0, imagePending: true, imageWaiting: 1, llmWaiting: 1 },
      },
      { type: "acquired", kind: "image", waitedMs: 0, id: 3 },
    ]);
  });

  test("listeners run synchronously, after the state change", () => {
    const lock = new GpuLock();
    const seen: string[] = [];
    lock.onEvent((e) => seen.push(`${e.type}:${lock.state}:${lock.snapshot().llmInflight}`));
    lock.acquireLLM();
    expect(seen).toEqual(["transition:llm:1", "acquired:llm:1"]);
  });

  test("waitedMs and heldMs come from the injected clock", async () => {
    const { lock, clock, events } = setup();
    const llm = await granted(lock.acquireLLM());
    clock.advance(5);
    const image = track(lock.acquireImage());
    clock.advance(20);
    const ac = new AbortController();
    lock.acquireLLM(ac.signal).catch(() => {});
    clock.advance(7);
    ac.abort("gone");
    clock.advance(100);
    llm.release(); // held 132 ms; the image waited 127 ms
    await flush();
    if (image.current.status !== "resolved") throw new Error("image not granted");
    expect(image.current.value.waitedMs).toBe(127);
    clock.advance(1000);
    image.current.value.release();
    expect(events.filter((e) => e.type !== "transition")).toEqual([
      { type: "acquired", kind: "llm", waitedMs: 0, id: 1 },
      { type: "abandoned", kind: "llm", waitedMs: 7, reason: "gone", id: 3 },
      { type: "released", kind: "llm", heldMs: 132, id: 1 },
      { type: "acquired", kind: "image", waitedMs: 127, id: 2 },
      { type: "released", kind: "image", heldMs: 1000, id: 2 },
    ]);
    expect(events.find((e) => e.type === "transition" && e.to === "idle")).toMatchObject({ at: 2132 });
  });

  test("a throwing listener neither breaks the lock nor silences the other listeners", async () => {
    const errors: unknown[] = [];
    const lock = new GpuLock({ onListenerError: (err) => errors.push(err) });
    const seen: string[] = [];
    lock.onEvent(() => {
      throw new Error("boom");
    });
    lock.onEvent((e) => seen.push(e.type));
    const a = await granted(lock.acquireLLM());
    const image = track(lock.acquireImage());
    a.release();
    await flush();
    expect(image.current.status).toBe("resolved");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    expect(seen).toEqual(["transition", "acquired", "released", "transition", "acquired"]);
    expect(errors).toHaveLength(5);
    // Without an onListenerError the error is swallowed, and a throwing reporter is survived too.
    const quiet = new GpuLock({ onListenerError: () => { throw new Error("reporter broke"); } });
    quiet.onEvent(() => {
      throw new Error("boom");
    });
    (await granted(quiet.acquireLLM())).release();
    expect(quiet.snapshot()).toEqual(idle);
  });

  test("a listener that re-enters the lock does not reorder events for the listeners after it", () => {
    const lock = new GpuLock();
    let nested: Lease | null = null;
    lock.onEvent((e) => {
      // A nested step while the first step is still being delivered.
      if (e.type === "acquired" && nested === null) nested = lock.tryAcquireLLM();
    });
    const seen: string[] = [];
    lock.onEvent((e) => seen.push(e.type === "acquired" ? `acquired#${e.id}` : e.type));
    lock.acquireLLM();
    expect(seen).toEqual(["transition", "acquired#1", "acquired#2"]);
    expect(lock.snapshot().llmInflight).toBe(2);
  });

  test("unsubscribe stops delivery", () => {
    const lock = new GpuLock();
    const seen: LockEvent[] = [];
    const off = lock.onEvent((e) => seen.push(e));
    lock.tryAcquireLLM()?.release();
    off();
    off();
    lock.tryAcquireLLM()?.release();
    expect(seen).toHaveLength(4);
  });
});

test("ids rise in call order; an immediate rejection takes one, a failed tryAcquireLLM does not", async () => {
  const { lock } = setup();
  const ac = new AbortController();
  ac.abort();
  lock.acquireLLM(ac.signal).catch(() => {}); //   1
  const image = await granted(lock.acquireImage()); // 2
  expect(lock.tryAcquireLLM()).toBeNull(); //     no id
  const llm = lock.acquireLLM(); //                3
  image.release();
  expect([image.id, (await llm).id, lock.tryAcquireLLM()?.id]).toEqual([2, 3, 4]);
});

describe("image sessions (imageSessionMaxMs > 0)", () => {
  function sessionLock(maxMs = 100) {
    const ctx = setup();
    const lock = new GpuLock({ now: ctx.clock.now, imageSessionMaxMs: maxMs });
    const events: LockEvent[] = [];
    lock.onEvent((e) => events.push(e));
    const transitions = () => events.flatMap((e) => (e.type === "transition" ? [`${e.from}->${e.to}`] : []));
    return { lock, clock: ctx.clock, transitions };
  }

  test("image jobs join the running session at once; the GPU stays image until the last one leaves", async () => {
    const { lock, transitions } = sessionLock();
    const a = await granted(lock.acquireImage());
    const b = await granted(lock.acquireImage());
    expect([a.opensSession, b.opensSession]).toEqual([true, false]);
    expect(a.closeIfLast()).toBe(false);
    a.release();
    expect(lock.state).toBe("image");
    expect(b.closeIfLast()).toBe(true);
    // Closed: a newcomer waits for the next session.
    const c = track(lock.acquireImage());
    await flush();
    expect(c.current.status).toBe("pending");
    b.release();
    await flush();
    expect(c.current.status).toBe("resolved");
    if (c.current.status === "resolved") {
      expect(c.current.value.opensSession).toBe(true);
      c.current.value.release();
    }
    // The hand-over from one session to the next is one step: no idle in between.
    expect(transitions()).toEqual(["idle->image", "image->idle"]);
  });

  test("with an LLM request waiting, joins stop once the session has lasted IMAGE_SESSION_MAX; then the LLM goes first", async () => {
    const { lock, clock } = sessionLock(100);
    const first = await granted(lock.acquireImage());
    const llm = track(lock.acquireLLM());
    clock.advance(99);
    const joined = await granted(lock.acquireImage());
    clock.advance(1);
    const late = track(lock.acquireImage());
    await flush();
    expect(late.current.status).toBe("pending");
    first.release();
    joined.release();
    await flush();
    // FIFO: the LLM request called before the late image job.
    expect(llm.current.status).toBe("resolved");
    expect(late.current.status).toBe("pending");
    if (llm.current.status === "resolved") llm.current.value.release();
    await flush();
    expect(late.current.status).toBe("resolved");
  });

  test("with no LLM request waiting, a session admits image jobs however long it lasts", async () => {
    const { lock, clock } = sessionLock(100);
    const first = await granted(lock.acquireImage());
    clock.advance(10_000);
    const later = await granted(lock.acquireImage());
    expect(later.opensSession).toBe(false);
    first.release();
    later.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("imageSessionMaxMs 0: every image job is its own session", async () => {
    const { lock } = setup();
    const a = await granted(lock.acquireImage());
    const b = track(lock.acquireImage());
    await flush();
    expect(b.current.status).toBe("pending");
    expect(a.closeIfLast()).toBe(true);
    a.release();
    await flush();
    expect(b.current.status).toBe("resolved");
  });
});

describe("GPU leases (the whole card for an outside program)", () => {
  test("a lease waits for running LLM work like an image job, then holds off LLM requests and image jobs until released", async () => {
    const { lock } = setup();
    const chat = await granted(lock.acquireLLM());
    const lease = track(lock.acquireLease());
    await flush();
    expect(lease.current.status).toBe("pending");
    // Waiting like an image job: new chats queue behind it.
    expect(lock.tryAcquireLLM()).toBeNull();
    chat.release();
    await flush();
    expect(lease.current.status).toBe("resolved");
    expect(lock.snapshot()).toEqual({ ...idle, state: "lease" });
    const llm = track(lock.acquireLLM());
    const image = track(lock.acquireImage());
    await flush();
    expect([llm.current.status, image.current.status]).toEqual(["pending", "pending"]);
    if (lease.current.status === "resolved") lease.current.value.release();
    await flush();
    // Image priority as ever: the image job goes next, the chat after it.
    expect([llm.current.status, image.current.status]).toEqual(["pending", "resolved"]);
  });

  test("a lease joins no image session and waits for it to end; images behind the lease wait too", async () => {
    const { lock } = setup({ imageSessionMaxMs: 60_000 });
    const first = await granted(lock.acquireImage());
    const lease = track(lock.acquireLease());
    const later = track(lock.acquireImage());
    await flush();
    expect([lease.current.status, later.current.status]).toEqual(["pending", "pending"]);
    first.release();
    await flush();
    expect([lease.current.status, later.current.status]).toEqual(["resolved", "pending"]);
    expect(lock.state).toBe("lease");
  });

  test("an aborted lease waiter leaves the queue and lets LLM requests in", async () => {
    const { lock } = setup();
    const img = await granted(lock.acquireImage());
    const ac = new AbortController();
    const lease = track(lock.acquireLease(ac.signal));
    ac.abort(new Error("gone"));
    img.release();
    await flush();
    expect(lease.current.status).toBe("rejected");
    expect(lock.tryAcquireLLM()).not.toBeNull();
  });
});
