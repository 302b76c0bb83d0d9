/** The balancer's views of one card, as pure functions (src/balance): readiness, the agent's line, ComfyUI's queue with held jobs. */
import { describe, expect, test } from "bun:test";
import { addHeldJobs } from "../../src/balance/comfy-queue.ts";
import { agentLine, readiness, readyzClass, readyzStatus } from "../../src/balance/readiness.ts";
import type { GpuState } from "../../src/lock/types.ts";
import { fixtureText } from "../sim/helpers.ts";

describe("readiness", () => {
  const at = (state: GpuState, imageWaiting = 0) => ({ state, imageWaiting });
  test("ready exactly when the lock would admit a chat at once; busy is 429, unservable 503", () => {
    const cases: [ReturnType<typeof at>, "up" | "down" | "disabled", string, number][] = [
      [at("idle"), "up", "ready", 200],
      [at("llm"), "up", "ready", 200],
      [at("llm", 1), "up", "image_waiting", 429],
      [at("idle", 1), "up", "image_waiting", 429],
      [at("image"), "up", "image_job", 429],
      [at("lease"), "up", "lease", 429],
      [at("idle"), "down", "upstream_down", 503],
      [at("image"), "disabled", "disabled", 503],
    ];
    for (const [lock, up, reason, status] of cases) {
      const r = readiness(lock, up);
      expect([lock, up, r.ready ? "ready" : r.reason, readyzStatus(r) as number]).toEqual([lock, up, reason, status]);
    }
  });
  test("the agent drains while an image job or a lease holds the card or an image job waits", () => {
    expect([at("idle"), at("llm"), at("llm", 1), at("image"), at("lease")].map(agentLine)).toEqual(["up ready\n", "up ready\n", "drain\n", "drain\n", "drain\n"]);
  });
  test("?class: llm, image, or the listener's own when absent", () => {
    expect([readyzClass(null, "image"), readyzClass("", "llm"), readyzClass("llm", "image"), readyzClass("LLM", "llm")]).toEqual(["image", "llm", "llm", undefined]);
  });
});

describe("ComfyUI's queue with the jobs the turnstile holds", () => {
  test("pending entries are spliced in after ComfyUI's own, numbered after them, the rest of the text untouched", () => {
    const text = fixtureText("comfy-queue.json");
    const doc = JSON.parse(text) as { queue_running: unknown[][]; queue_pending: unknown[][] };
    const out = addHeldJobs(text, 2)!;
    const got = JSON.parse(out) as typeof doc;
    expect(got.queue_running).toEqual(doc.queue_running);
    expect(got.queue_pending.slice(0, doc.queue_pending.length)).toEqual(doc.queue_pending);
    const top = Math.max(...[...doc.queue_running, ...doc.queue_pending].map((i) => i[0] as number));
    expect(got.queue_pending.slice(doc.queue_pending.length).map((i) => i.slice(0, 2))).toEqual([
      [top + 1, "gpu-turnstile-waiting-1"],
      [top + 2, "gpu-turnstile-waiting-2"],
    ]);
    expect(out.startsWith(text.slice(0, text.lastIndexOf("]")))).toBe(true);
  });
  test("a 64-bit seed keeps every digit (the text is not re-serialized)", () => {
    const text = '{"queue_running": [[3, "a", {"3": {"inputs": {"seed": 18446744073709551615}}}, {}, ["9"]]], "queue_pending": []}';
    expect(addHeldJobs(text, 1)).toContain("18446744073709551615");
  });
  test("GET /prompt's queue_remaining; anything else is left alone", () => {
    expect(JSON.parse(addHeldJobs(fixtureText("comfy-prompt-get.json"), 3)!)).toEqual({ exec_info: { queue_remaining: 5 } });
    expect(addHeldJobs("not json", 1)).toBeUndefined();
    expect(addHeldJobs('{"error": "x"}', 1)).toBeUndefined();
    expect(addHeldJobs('{"queue_pending": [], "queue_running": []}', 1)).toBeUndefined();
  });
});
