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

  test("no queue read, for a definite reason (refused, no such host, reset, not a queue): not running, with the reason", () => {
    const refused = Object.assign(new Error("connect failed"), { code: "ECONNREFUSED" });
    expect(decideAtStart(refused, undefined)).toEqual({ kind: "down", reason: "ECONNREFUSED: connect failed" });
    for (const code of ["ENOTFOUND", "ECONNRESET", "BAD_UPSTREAM_RESPONSE"]) {
      expect(decideAtStart(Object.assign(new Error("x"), { code }), 3 * GiB).kind).toBe("down");
    }
    // Something answers, but not ComfyUI's queue (another server, a proxy with nothing behind it).
    expect(decideAtStart(new Error("GET /queue: HTTP 404 not found"), 0).kind).toBe("down");
  });

  test("no answer in time: ComfyUI may be running a job, too busy to say so — unread, never idle (issue 26)", () => {
    const late = new DOMException("no answer within PROBE_TIMEOUT (5s)", "TimeoutError");
    expect(decideAtStart(late, undefined)).toEqual({ kind: "unread", reason: "no answer within PROBE_TIMEOUT (5s)" });
    // A SYN nobody answered in time and a temporary DNS failure cannot tell "not running" either.
    expect(decideAtStart(Object.assign(new Error("connect timed out"), { code: "ETIMEDOUT" }), undefined).kind).toBe("unread");
    expect(decideAtStart(Object.assign(new Error("dns"), { code: "EAI_AGAIN" }), undefined).kind).toBe("unread");
  });
});
