/** What a fresh start makes of ComfyUI's answers (jobs/reconcile.ts), without sockets. */
import { describe, expect, test } from "bun:test";
import { VRAM_RELEASED_FLOOR } from "../../src/comfy/client.ts";
import { decideAtStart } from "../../src/jobs/reconcile.ts";

const GiB = 1024 ** 3;
const empty = { running: [], pending: [] };

describe("decideAtStart", () => {
  test("a job running: adopted, whatever the memory read said", () => {
    expect(decideAtStart({ running: ["a"], pending: [] }, 3 * GiB)).toEqual({ kind: "adopt", promptIds: ["a"] });
    expect(decideAtStart({ running: ["a"], pending: [] }, undefined)).toEqual({ kind: "adopt", promptIds: ["a"] });
  });

  test("jobs only pending are adopted too: ComfyUI is about to run them", () => {
    expect(decideAtStart({ running: [], pending: ["b", "c"] }, 0)).toEqual({ kind: "adopt", promptIds: ["b", "c"] });
  });

  test("running first, and a job seen in both lists in one read named once", () => {
    expect(decideAtStart({ running: ["a"], pending: ["b", "a"] }, 0)).toEqual({ kind: "adopt", promptIds: ["a", "b"] });
  });

  test("an empty queue with the checkpoint still loaded: free it first", () => {
    expect(decideAtStart(empty, 3 * GiB)).toEqual({ kind: "free", vramBytes: 3 * GiB });
  });

  test("an empty queue with no more than the CUDA context held, or memory unread: idle", () => {
    expect(decideAtStart(empty, VRAM_RELEASED_FLOOR)).toEqual({ kind: "idle" });
    expect(decideAtStart(empty, 0)).toEqual({ kind: "idle" });
    expect(decideAtStart(empty, undefined)).toEqual({ kind: "idle" });
  });

  test("no queue read: the state is unknown, with the reason", () => {
    expect(decideAtStart(new Error("ECONNREFUSED"), undefined)).toEqual({ kind: "unknown", reason: "ECONNREFUSED" });
  });
});
