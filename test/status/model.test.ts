import { describe, expect, test } from "bun:test";
import type { LockSnapshot } from "../../src/lock/index.ts";
import { StatusModel, type StatusEvent } from "../../src/status/model.ts";

function setup(opts: { historyMs?: number; maxSpans?: number } = {}) {
  let clock = 1_000_000;
  const lock: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 };
  const model = new StatusModel({ version: "v1.2.3", lock: { snapshot: () => ({ ...lock }) }, upstreams: ["ollama", "comfy"], now: () => clock, ...opts });
  const events: StatusEvent[] = [];
  model.subscribe((e) => events.push(e));
  const transition = (from: LockSnapshot["state"], to: LockSnapshot["state"]) => {
    lock.state = to;
    model.onLock({ type: "transition", from, to, at: 0, snapshot: { ...lock } });
  };
  return { model, lock, events, transition, advance: (ms: number) => (clock += ms), now: () => clock };
}


describe("StatusModel", () => {
  test("LLM requests: waiting, then admitted, then gone; clients only when asked", () => {
    const { model, lock, advance } = setup();
    const a = model.start("/api/chat", "127.0.0.1");
    model.named(a, "llama3.2");
    advance(300);
    const b = model.start("/v1/chat/completions", "10.0.0.7");
    model.named(b, "qwen2.5:7b");
    advance(200);
    model.admitted(a);
    lock.llmInflight = 1;
    const doc = model.snapshot(true);
    expect(doc.llm).toMatchObject({ inflight: 1, waiting: 1, oldest_wait_ms: 200 });
    expect(doc.llm.requests).toEqual([
      { id: a.id, path: "/api/chat", model: "llama3.2", client: "127.0.0.1", age_ms: 500, waiting: false, since: a.since },
      { id: b.id, path: "/v1/chat/completions", model: "qwen2.5:7b", client: "10.0.0.7", age_ms: 200, waiting: true, since: b.since },
    ]);
    expect(model.snapshot(false).llm.requests.map((r) => "client" in r)).toEqual([false, false]);
    model.end(a);
    model.end(a);
    model.end(b);
    expect(model.snapshot(true).llm.requests).toEqual([]);
  });

  test("an image session shows every job it holds; the one ComfyUI runs is `running`, a joiner starts queued", () => {
    const { model } = setup();
    model.onJob({ phase: "acquired", jobId: 1, waitedMs: 0, joined: false });
    model.onJob({ phase: "unloaded", jobId: 1, models: [], durationMs: 1, complete: true });
    model.onJob({ phase: "forwarded", jobId: 1, status: 200, promptId: "p-1", durationMs: 1 });
    model.onJob({ phase: "acquired", jobId: 2, waitedMs: 0, joined: true });
    expect(model.snapshot(false).image.session?.jobs.map((j) => [j.job, j.phase])).toEqual([
      [1, "running"],
      [2, "queued"],
    ]);
    model.onJob({ phase: "forwarded", jobId: 2, status: 200, promptId: "p-2", durationMs: 1 });
    model.onJob({ phase: "finished", jobId: 1, promptId: "p-1", end: "success", durationMs: 5 });
    model.onJob({ phase: "released", jobId: 1, promptId: "p-1", outcome: "completed", heldMs: 5, gpuReleased: false });
    const image = model.snapshot(false).image;
    expect(image.running).toMatchObject({ job: 2, prompt_id: "p-2", phase: "running" });
    expect(image.session?.jobs.map((j) => j.job)).toEqual([2]);
    model.onJob({ phase: "session_ended", jobs: 2, durationMs: 10 });
    model.onJob({ phase: "released", jobId: 2, promptId: "p-2", outcome: "completed", heldMs: 9, gpuReleased: true });
    expect(model.snapshot(false).image).toEqual({ running: null, queued: 0, session: null });
  });

  test("an image job goes unloading → queued → running → freeing → recent, with its durations", () => {
    const { model, events, advance, lock } = setup();
    lock.imageWaiting = 1;
    expect(model.snapshot(false).image).toEqual({ running: null, queued: 1, session: null });
    lock.imageWaiting = 0;
    model.onJob({ phase: "acquired", jobId: 7, waitedMs: 40, joined: false });
    expect(model.snapshot(false).image.running).toMatchObject({ job: 7, phase: "unloading", waited_ms: 40, age_ms: 0 });
    advance(100);
    model.onJob({ phase: "unloaded", jobId: 7, models: ["llama3.2"], durationMs: 100, complete: true });
    model.onJob({ phase: "forwarded", jobId: 7, status: 200, promptId: "p-1", durationMs: 5 });
    expect(model.snapshot(false).image.running).toMatchObject({ job: 7, phase: "running", prompt_id: "p-1", age_ms: 100 });
    model.onJob({ phase: "finished", jobId: 7, promptId: "p-1", end: "success", durationMs: 900 });
    model.onJob({ phase: "freed", jobId: 7, promptId: "p-1", durationMs: 30, vramBefore: 3000, vramAfter: 500, released: true });
    expect(model.snapshot(false).image.running?.phase).toBe("freeing");
    model.onJob({ phase: "released", jobId: 7, promptId: "p-1", outcome: "completed", heldMs: 1100, gpuReleased: true });
    const doc = model.snapshot(false);
    expect(doc.image.running).toBeNull();
    expect(doc.recent).toEqual([
      {
        kind: "image_job",
        job: 7,
        prompt_id: "p-1",
        since: expect.any(Number),
        waited_ms: 40,
        unload_ms: 100,
        forward_ms: 5,
        job_ms: 900,
        free_ms: 30,
        vram_reclaimed: 2500,
        outcome: "completed",
        held_ms: 1100,
        ended: expect.any(Number),
      },
    ]);
    expect(events.filter((e) => e.type === "job").map((e) => (e.data as { phase: string }).phase)).toEqual(["unloading", "queued", "running", "freeing", "done"]);
  });

  test("recent keeps only the last jobs", () => {
    const { model } = setup();
    for (let j = 1; j <= 25; j++) {
      model.onJob({ phase: "acquired", jobId: j, waitedMs: 0, joined: false });
      model.onJob({ phase: "released", jobId: j, outcome: "rejected", heldMs: 1, gpuReleased: true });
    }
    expect(model.snapshot(false).recent.map((r) => r.job)).toEqual(Array.from({ length: 20 }, (_, i) => i + 6));
  });

  test("state, state_since and an hour of spans, bounded", () => {
    const { model, transition, advance, events, now } = setup({ maxSpans: 5 });
    advance(1000);
    transition("idle", "llm");
    const since = now();
    expect(model.snapshot(false)).toMatchObject({ state: "llm", state_since: new Date(since).toISOString() });
    expect(events.at(-1)).toEqual({ type: "state", data: { state: "llm", from: "idle", since } });
    advance(1000);
    transition("llm", "image");
    expect(model.snapshot(false).history.map((s) => s.state)).toEqual(["idle", "llm", "image"]);
    for (let i = 0; i < 10; i++) {
      advance(10);
      transition("image", "idle");
      transition("idle", "image");
    }
    expect(model.snapshot(false).history).toHaveLength(5);
    advance(3_600_001);
    const h = model.snapshot(false).history;
    expect(h).toEqual([{ state: "image", from: now() - 3_600_001 }]);
  });

  test("upstreams: unknown until probed, events only on change", () => {
    const { model, events } = setup();
    expect(model.snapshot(false).upstreams).toEqual({ ollama: { up: null, version: null }, comfy: { up: null, version: null } });
    model.onUpstream("ollama", true, "0.5.7");
    model.onUpstream("ollama", true, "0.5.7");
    model.onUpstream("ollama", false, "connection refused");
    expect(model.snapshot(false).upstreams.ollama).toEqual({ up: false, version: "0.5.7", reason: "connection refused" });
    expect(events.map((e) => e.type)).toEqual(["upstream", "upstream"]);
  });

  test("a throwing subscriber does not break the others or the caller", () => {
    const { model, transition, events } = setup();
    model.subscribe(() => {
      throw new Error("boom");
    });
    expect(() => transition("idle", "llm")).not.toThrow();
    expect(events).toHaveLength(1);
  });
});
