import { describe, expect, test } from "bun:test";
import { GpuLock } from "../../../src/lock/index.ts";
import type { LockSnapshot } from "../../../src/lock/index.ts";
import { GpuBusyError, admitLLM, busyMessage } from "../../../src/proxy/llm-gate.ts";

const idle: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 };
const waitMode = (waitTimeoutMs: number) => ({ mode: "wait" as const, waitTimeoutMs });
const rejectMode = { mode: "reject" as const, waitTimeoutMs: 60_000 };
const never = () => new AbortController().signal;

async function busyReason(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof GpuBusyError) return err.reason;
    throw err;
  }
  throw new Error("expected GpuBusyError, was admitted");
}

describe("wait mode", () => {
  test("admits at once when the GPU is idle, and the lease gives the slot back", async () => {
    const lock = new GpuLock();
    const lease = await admitLLM(lock, waitMode(60_000), never());
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
    lease.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("times out with GpuBusyError(wait_timeout) while an image holds the GPU, leaving no waiter behind", async () => {
    const lock = new GpuLock();
    const image = await lock.acquireImage();
    expect(await busyReason(admitLLM(lock, waitMode(50), never()))).toBe("wait_timeout");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    image.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("a client abort while waiting rejects with the client's reason, not a busy error", async () => {
    const lock = new GpuLock();
    const image = await lock.acquireImage();
    const client = new AbortController();
    const reason = new Error("client disconnected");
    const p = admitLLM(lock, waitMode(60_000), client.signal);
    expect(lock.snapshot().llmWaiting).toBe(1);
    client.abort(reason);
    await expect(p).rejects.toBe(reason);
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    image.release();
    expect(lock.snapshot()).toEqual(idle);
  }, 2000);

  test("a client already gone is refused with its reason", async () => {
    const lock = new GpuLock();
    const reason = new Error("gone");
    const image = await lock.acquireImage();
    await expect(admitLLM(lock, waitMode(60_000), AbortSignal.abort(reason))).rejects.toBe(reason);
    image.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("a waiting request is admitted as soon as the image job ends", async () => {
    const lock = new GpuLock();
    const image = await lock.acquireImage();
    const p = admitLLM(lock, waitMode(60_000), never());
    image.release();
    const lease = await p;
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1 });
    lease.release();
    expect(lock.snapshot()).toEqual(idle);
  }, 2000);
});

describe("reject mode", () => {
  test("admits at once when idle or already serving LLMs", async () => {
    const lock = new GpuLock();
    const a = await admitLLM(lock, rejectMode, never());
    const b = await admitLLM(lock, rejectMode, never());
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 2 });
    a.release();
    b.release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("refuses at once with GpuBusyError(reject) while an image job is pending behind running LLMs", async () => {
    const lock = new GpuLock();
    const running = await admitLLM(lock, rejectMode, never());
    const image = lock.acquireImage();
    expect(lock.snapshot().imagePending).toBe(true);
    expect(await busyReason(admitLLM(lock, rejectMode, never()))).toBe("reject");
    expect(lock.snapshot()).toEqual({ ...idle, state: "llm", llmInflight: 1, imagePending: true, imageWaiting: 1 });
    running.release();
    (await image).release();
    expect(lock.snapshot()).toEqual(idle);
  });

  test("refuses at once with GpuBusyError(reject) while an image job holds the GPU", async () => {
    const lock = new GpuLock();
    const image = await lock.acquireImage();
    expect(await busyReason(admitLLM(lock, rejectMode, never()))).toBe("reject");
    expect(lock.snapshot()).toEqual({ ...idle, state: "image" });
    image.release();
    expect(lock.snapshot()).toEqual(idle);
  });
});

test("busy messages name the image job and the retry delay", () => {
  expect(busyMessage("reject", 5)).toBe("gpu-turnstile: the GPU is busy with an image job; retry in 5 s");
  expect(busyMessage("wait_timeout", 10)).toContain("LLM_WAIT_TIMEOUT");
  expect(busyMessage("wait_timeout", 10)).toContain("retry in 10 s");
  expect(new GpuBusyError("reject")).toBeInstanceOf(Error);
});
