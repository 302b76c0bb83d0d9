/** Image sessions without sockets: one prepare per session, joiners wait for it, one finish at the end. */
import { describe, expect, test } from "bun:test";
import { ImageSessions, type SessionEnd } from "../../src/jobs/session.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { flush, track } from "../lock/helpers.ts";

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function setup() {
  const lock = new GpuLock({ imageSessionMaxMs: 60_000 });
  const ended: SessionEnd[] = [];
  const sessions = new ImageSessions(lock, (e) => ended.push(e));
  const signal = new AbortController().signal;
  return { lock, sessions, ended, signal };
}

describe("ImageSessions", () => {
  test("the session's first job empties Ollama once; a joiner is ready only when that is done", async () => {
    const { sessions, signal } = setup();
    const unload = deferred();
    let prepares = 0;
    const prepare = () => (prepares++, unload.promise);
    const a = await sessions.enter(signal, prepare);
    const b = await sessions.enter(signal, prepare);
    expect([a.opensSession, b.opensSession, prepares]).toEqual([true, false, 1]);
    const ready = track(b.ready());
    await flush();
    expect(ready.current.status).toBe("pending");
    unload.resolve();
    await flush();
    expect(ready.current.status).toBe("resolved");
  });

  test("only the last job out frees ComfyUI, and the GPU is released after the free", async () => {
    const { lock, sessions, ended, signal } = setup();
    const a = await sessions.enter(signal, async () => {});
    const b = await sessions.enter(signal, async () => {});
    a.accepted();
    b.accepted();
    let frees = 0;
    const free = deferred();
    const finish = () => (frees++, free.promise);
    expect(await a.leave(finish)).toBe(false);
    expect(lock.state).toBe("image");
    const last = track(b.leave(finish));
    await flush();
    expect(frees).toBe(1);
    expect(lock.state).toBe("image"); // still freeing
    free.resolve();
    await flush();
    expect(last.current).toMatchObject({ status: "resolved", value: true });
    expect(lock.state).toBe("idle");
    expect(ended).toEqual([{ jobs: 2, durationMs: expect.any(Number) }]);
    expect(await b.leave(finish)).toBe(false); // idempotent
  });

  test("a session in which ComfyUI accepted nothing ends without a free and is not counted", async () => {
    const { lock, sessions, ended, signal } = setup();
    const a = await sessions.enter(signal, async () => {});
    let frees = 0;
    expect(await a.leave(async () => void frees++)).toBe(true);
    expect([frees, lock.state, ended.length]).toEqual([0, "idle", 0]);
  });

  test("a newcomer while the last job frees waits for the next session, which empties Ollama again", async () => {
    const { sessions, signal } = setup();
    let prepares = 0;
    const prepare = async () => void prepares++;
    const a = await sessions.enter(signal, prepare);
    a.accepted();
    const free = deferred();
    const leaving = a.leave(() => free.promise);
    const next = track(sessions.enter(signal, prepare));
    await flush();
    expect(next.current.status).toBe("pending");
    free.resolve();
    await leaving;
    await flush();
    expect(next.current.status).toBe("resolved");
    if (next.current.status === "resolved") expect(next.current.value.opensSession).toBe(true);
    expect(prepares).toBe(2);
  });
});
