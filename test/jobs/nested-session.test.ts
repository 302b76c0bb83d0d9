/** Nested LLM requests in an image session, without sockets: who may join, and how the session's end waits for them. */
import { describe, expect, test } from "bun:test";
import { ImageSessions } from "../../src/jobs/session.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { flush, track } from "../lock/helpers.ts";

function setup(drainMs = 60_000) {
  const lock = new GpuLock({ imageSessionMaxMs: 60_000 });
  const cuts: number[] = [];
  const sessions = new ImageSessions(lock, () => {}, { timeoutMs: drainMs, onCut: (n) => cuts.push(n) });
  return { lock, sessions, cuts, signal: new AbortController().signal };
}

describe("joinNested", () => {
  test("only once the session's unload is done (its /prompt may be running), and not once its last job left", async () => {
    const { lock, sessions, signal } = setup();
    expect(sessions.joinNested()).toBeUndefined(); // idle: an ordinary request
    let unloaded!: () => void;
    const a = await sessions.enter(signal, () => new Promise<void>((r) => (unloaded = r)));
    expect(sessions.joinNested()).toBeUndefined(); // Ollama still being emptied
    unloaded();
    await a.ready();
    // ComfyUI may run the job (and its node call us) before its answer to /prompt is read.
    const slot = sessions.joinNested();
    expect(slot).toBeDefined();
    expect(lock.snapshot().llmInflight).toBe(0); // it took no LLM slot
    slot!.release();
    await a.leave(async () => {});
    expect(sessions.joinNested()).toBeUndefined();
  });

  test("the session's end waits for its nested requests before freeing ComfyUI", async () => {
    const { lock, sessions, signal, cuts } = setup();
    const a = await sessions.enter(signal, async () => {});
    await a.ready();
    a.accepted();
    const slot = sessions.joinNested()!;
    let freed = false;
    const leaving = track(a.leave(async () => void (freed = true)));
    await flush();
    expect([freed, lock.state, leaving.current.status]).toEqual([false, "image", "pending"]);
    // Meanwhile no new nested request joins the ending session.
    expect(sessions.joinNested()).toBeUndefined();
    slot.release();
    await flush();
    expect([freed, lock.state, cuts]).toEqual([true, "idle", []]);
  });

  test("past the drain timeout the ones still running are cut, then ComfyUI is freed", async () => {
    const { lock, sessions, signal, cuts } = setup(20);
    const a = await sessions.enter(signal, async () => {});
    await a.ready();
    a.accepted();
    const slot = sessions.joinNested()!;
    const cutWith: string[] = [];
    slot.onCut((err) => cutWith.push(err.message));
    let freed = false;
    await a.leave(async () => void (freed = true));
    expect(cuts).toEqual([1]);
    expect(cutWith).toEqual(["gpu-turnstile: the image job that made this nested request has ended"]);
    expect([freed, lock.state]).toEqual([true, "idle"]);
  });
});
