/** The balancer's views of one card, as pure functions (src/balance): readiness, the agent's line, ComfyUI's queue with held jobs. */
import { describe, expect, test } from "bun:test";
import { addHeldJobs, withWaitingLeases } from "../../src/balance/comfy-queue.ts";
import { HeldPrompts, topLevelMembers } from "../../src/jobs/held-prompts.ts";
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
  const enc = (v: string) => new TextEncoder().encode(v);
  /** Held prompts as the image job registers them (jobs/held-prompts.ts). */
  function holding(...bodies: [string, string][]): HeldPrompts {
    const h = new HeldPrompts();
    for (const [id, body] of bodies) h.hold(id, enc(body), (JSON.parse(body) as { client_id?: string }).client_id, () => {});
    return h;
  }
  const A = "0b0c6f0e-6e0c-4b64-9a55-5a8f3f2f2a01";
  const B = "0b0c6f0e-6e0c-4b64-9a55-5a8f3f2f2a02";

  test("pending entries are spliced in after ComfyUI's own, under their own ids and workflows, numbered after them, the rest of the text untouched", () => {
    const text = fixtureText("comfy-queue.json");
    const doc = JSON.parse(text) as { queue_running: unknown[][]; queue_pending: unknown[][] };
    const out = addHeldJobs(text, holding([A, '{"prompt": {"1": {"class_type": "EmptyImage", "inputs": {}}}, "client_id": "c1"}'], [B, '{"prompt": {"2": {}}, "extra_data": {"extra_pnginfo": {"workflow": {"nodes": []}}}}']))!;
    const got = JSON.parse(out) as typeof doc;
    expect(got.queue_running).toEqual(doc.queue_running);
    expect(got.queue_pending.slice(0, doc.queue_pending.length)).toEqual(doc.queue_pending);
    const top = Math.max(...[...doc.queue_running, ...doc.queue_pending].map((i) => i[0] as number));
    expect(got.queue_pending.slice(doc.queue_pending.length)).toEqual([
      [top + 1, A, { "1": { class_type: "EmptyImage", inputs: {} } }, { client_id: "c1" }, []],
      [top + 2, B, { "2": {} }, { extra_pnginfo: { workflow: { nodes: [] } } }, []],
    ]);
    expect(out.startsWith(text.slice(0, text.lastIndexOf("]")))).toBe(true);
  });
  test("numbered above every number ComfyUI gave, not only those still queued", () => {
    const h = holding([A, '{"prompt": {}}']);
    h.sawNumber(41);
    const got = JSON.parse(addHeldJobs('{"queue_running": [], "queue_pending": []}', h)!) as { queue_pending: unknown[][] };
    expect(got.queue_pending.map((i) => i[0])).toEqual([42]);
  });
  test("a 64-bit seed keeps every digit, ComfyUI's and the held workflow's (the text is not re-serialized)", () => {
    const text = '{"queue_running": [[3, "a", {"3": {"inputs": {"seed": 18446744073709551615}}}, {}, ["9"]]], "queue_pending": []}';
    const out = addHeldJobs(text, holding([A, '{"prompt": {"3": {"inputs": {"seed": 18446744073709551614}}}}']))!;
    expect(out).toContain("18446744073709551615");
    expect(out).toContain("18446744073709551614");
  });
  test("GET /prompt's queue_remaining; anything else is left alone", () => {
    const three = holding([A, "{}"], [B, "{}"], ["c", "{}"]);
    expect(JSON.parse(addHeldJobs(fixtureText("comfy-prompt-get.json"), three)!)).toEqual({ exec_info: { queue_remaining: 5 } });
    expect(addHeldJobs("not json", three)).toBeUndefined();
    expect(addHeldJobs('{"error": "x"}', three)).toBeUndefined();
    expect(addHeldJobs('{"queue_pending": [], "queue_running": []}', three)).toBeUndefined();
  });
  test("a GPU lease waiting at the lock shows as a placeholder after the held prompts (it has no workflow)", () => {
    const q = JSON.parse(addHeldJobs('{"queue_running": [[4, "r", {}, {}, []]], "queue_pending": []}', withWaitingLeases(holding([A, '{"prompt": {}}']), 1))!) as { queue_pending: unknown[][] };
    expect(q.queue_pending).toEqual([
      [5, A, {}, {}, []],
      [6, "gpu-turnstile-lease-1", {}, { gpu_turnstile: "GPU lease waiting" }, []],
    ]);
    expect(JSON.parse(addHeldJobs(fixtureText("comfy-prompt-get.json"), withWaitingLeases(new HeldPrompts(), 2))!)).toEqual({ exec_info: { queue_remaining: 4 } });
  });
  test("a queue edit removes held prompts (not one already on its way to ComfyUI) and tells each", () => {
    const h = new HeldPrompts();
    const told: string[] = [];
    h.hold(A, enc("{}"), undefined, () => told.push(A));
    h.hold(B, enc("{}"), undefined, () => told.push(B)).sending();
    expect(h.drop([A, B, "unknown"])).toEqual([A]);
    expect(h.drop("all")).toEqual([]);
    expect([told, h.size]).toEqual([[A], 1]);
  });
});

describe("topLevelMembers", () => {
  test("each member's value as written, strings with braces and escapes included", () => {
    const m = topLevelMembers('{ "a" : {"x": "}\\\\"}, "b":[1, [2]], "c": 1.50, "d": "q\\"", "e":null }');
    expect([...m]).toEqual([
      ["a", '{"x": "}\\\\"}'],
      ["b", "[1, [2]]"],
      ["c", "1.50"],
      ["d", '"q\\""'],
      ["e", "null"],
    ]);
  });
});
