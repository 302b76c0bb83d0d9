import { describe, expect, test } from "bun:test";
import type { LockSnapshot } from "../../src/lock/index.ts";
import { StatusModel, type StatusEvent } from "../../src/status/model.ts";
import { fixtureText } from "../sim/helpers.ts";

function setup(opts: { historyMs?: number; maxSpans?: number } = {}) {
  let clock = 1_000_000;
  const lock: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 };
  const model = new StatusModel({ version: "v1.2.3", upstreams: ["ollama", "comfy"], now: () => clock, ...opts });
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

  test("an image session shows every job it holds; the one ComfyUI runs is `running`, the others queued in ComfyUI", () => {
    const { model } = setup();
    model.onJob({ phase: "acquired", jobId: 1, waitedMs: 0, joined: false });
    model.onJob({ phase: "unloaded", jobId: 1, models: [], durationMs: 1, complete: true });
    model.onJob({ phase: "forwarded", jobId: 1, status: 200, promptId: "p-1", durationMs: 1 });
    model.onJob({ phase: "started", jobId: 1, promptId: "p-1" });
    model.onJob({ phase: "acquired", jobId: 2, waitedMs: 0, joined: true });
    expect(model.snapshot(false).image.session?.jobs.map((j) => [j.job, j.phase])).toEqual([
      [1, "running"],
      [2, "sending"],
    ]);
    model.onJob({ phase: "forwarded", jobId: 2, status: 200, promptId: "p-2", durationMs: 1 });
    model.onJob({ phase: "acquired", jobId: 3, waitedMs: 0, joined: true });
    model.onJob({ phase: "forwarded", jobId: 3, status: 200, promptId: "p-3", durationMs: 1 });
    // Issue 21: two jobs in ComfyUI's queue behind the running one are counted and listed.
    expect(model.snapshot(false).image).toMatchObject({ queued: 2, running: { job: 1 } });
    model.onJob({ phase: "finished", jobId: 1, promptId: "p-1", end: "success", durationMs: 5 });
    model.onJob({ phase: "released", jobId: 1, promptId: "p-1", outcome: "completed", heldMs: 5, gpuReleased: false });
    const image = model.snapshot(false).image;
    expect(image.running).toMatchObject({ job: 2, prompt_id: "p-2", phase: "queued" });
    expect(image.session?.jobs.map((j) => j.job)).toEqual([2, 3]);
    for (const id of [2, 3]) {
      model.onJob({ phase: "released", jobId: id, promptId: `p-${id}`, outcome: "completed", heldMs: 9, gpuReleased: id === 3 });
    }
    expect(model.snapshot(false).image).toEqual({ running: null, queued: 0, waiting: 0, retrying: 0, session: null, jobs: [], jobs_omitted: 0 });
  });

  test("an image job goes waiting → unloading → sending → queued → running → freeing → recent, its queue time apart from its run", () => {
    const { model, events, advance } = setup();
    model.onJob({ phase: "received", jobId: 7, promptId: "p7", minted: true, client: "10.0.0.9" });
    expect(model.snapshot(false).image).toMatchObject({ running: null, waiting: 1, session: null });
    expect(model.snapshot(true).image.jobs).toMatchObject([{ job: 7, phase: "waiting", client: "10.0.0.9" }]);
    expect(model.snapshot(false).image.jobs[0]!.client).toBeUndefined();
    advance(40);
    model.onJob({ phase: "acquired", jobId: 7, waitedMs: 40, joined: false });
    expect(model.snapshot(false).image.running).toMatchObject({ job: 7, phase: "unloading", waited_ms: 40, age_ms: 0 });
    advance(100);
    model.onJob({ phase: "unloaded", jobId: 7, models: ["llama3.2"], durationMs: 100, complete: true });
    model.onJob({ phase: "forwarded", jobId: 7, status: 200, promptId: "p-1", durationMs: 5, clientId: "c-77" });
    expect(model.snapshot(false).image.running).toMatchObject({ job: 7, phase: "queued", prompt_id: "p-1", age_ms: 100, client_id: "c-77" });
    advance(15_000);
    model.onJob({ phase: "started", jobId: 7, promptId: "p-1" });
    advance(2_000);
    model.onJob({ phase: "finished", jobId: 7, promptId: "p-1", end: "success", durationMs: 17_000 });
    model.onJob({ phase: "freed", jobId: 7, promptId: "p-1", durationMs: 30, vramBefore: 3000, vramAfter: 500, released: true });
    expect(model.snapshot(false).image.running?.phase).toBe("freeing");
    model.onJob({ phase: "released", jobId: 7, promptId: "p-1", outcome: "completed", heldMs: 17_100, gpuReleased: true });
    const doc = model.snapshot(false);
    expect(doc.image.running).toBeNull();
    expect(model.snapshot(true).recent).toEqual([
      {
        kind: "image_job",
        job: 7,
        prompt_id: "p-1",
        arrived: expect.any(Number),
        client: "10.0.0.9",
        client_id: "c-77",
        since: expect.any(Number),
        queued_since: expect.any(Number),
        running_since: expect.any(Number),
        queue_ms: 15_000,
        run_ms: 2_000,
        waited_ms: 40,
        unload_ms: 100,
        forward_ms: 5,
        job_ms: 17_000,
        free_ms: 30,
        vram_reclaimed: 2500,
        outcome: "completed",
        held_ms: 17_100,
        ended: expect.any(Number),
      },
    ]);
    expect(events.filter((e) => e.type === "job").map((e) => (e.data as { phase: string }).phase)).toEqual(["waiting", "unloading", "sending", "queued", "running", "freeing", "done"]);
    // Events reach every reader alike: no client address in them, nor in a reader's recent list without the right.
    expect(events.some((e) => e.type === "job" && "client" in e.data)).toBe(false);
    expect(doc.recent[0]!.client).toBeUndefined();
    expect(model.snapshot(true).recent[0]!.client).toBe("10.0.0.9");
  });

  test("an image job backing off from a ComfyUI that refused the connection holds nothing until it has the GPU again", () => {
    const { model } = setup();
    model.onJob({ phase: "received", jobId: 3, promptId: "p3", minted: true });
    model.onJob({ phase: "acquired", jobId: 3, waitedMs: 5, joined: false });
    model.onJob({ phase: "retrying", jobId: 3, attempt: 1, delayMs: 20, reason: "connection refused" });
    let image = model.snapshot(false).image;
    expect(image).toMatchObject({ running: null, session: null, retrying: 1, waiting: 0 });
    expect(model.snapshot(false).waiting).toEqual([]);
    model.onJob({ phase: "acquired", jobId: 3, waitedMs: 7, joined: false });
    image = model.snapshot(false).image;
    expect(image).toMatchObject({ running: { job: 3, phase: "unloading", waited_ms: 12 }, retrying: 0 });
  });

  test("a job whose client left while it waited goes without a trace in recent", () => {
    const { model } = setup();
    model.onJob({ phase: "received", jobId: 4, promptId: "p4", minted: true });
    model.onJob({ phase: "left", jobId: 4 });
    expect(model.snapshot(false).image.jobs).toEqual([]);
    expect(model.snapshot(false).recent).toEqual([]);
  });

  test("ComfyUI's progress frames on a relayed /ws: running, step x of y, and the client_id of the socket", () => {
    const { model } = setup();
    model.onJob({ phase: "acquired", jobId: 1, waitedMs: 0, joined: false });
    model.onJob({ phase: "forwarded", jobId: 1, status: 200, promptId: "p-1", durationMs: 1 });
    model.onComfyFrame("c-1", JSON.stringify({ type: "status", data: { status: { exec_info: { queue_remaining: 1 } } } }));
    expect(model.snapshot(false).image.running).toMatchObject({ phase: "queued" });
    // ComfyUI writes its frames with Python's separators.
    model.onComfyFrame("c-1", '{"type": "progress", "data": {"value": 3, "max": 20, "prompt_id": "p-1", "node": "3"}}');
    expect(model.snapshot(false).image.running).toMatchObject({ phase: "running", progress: { value: 3, max: 20 }, client_id: "c-1" });
    model.onComfyFrame("c-2", '{"type": "progress", "data": {"value": 1, "max": 4, "prompt_id": "someone-elses"}}');
    model.onComfyFrame("c-1", '{"type": "progress", "data": {"value": 4, "max": 20, "prompt_id": "p-1"');
    expect(model.snapshot(false).image.running).toMatchObject({ progress: { value: 3, max: 20 } });
  });

  test("every waiter says why it waits, with the Retry-After estimate; a retrying request is neither holder nor waiter", () => {
    let clock = 1_000_000;
    const lock: LockSnapshot = { state: "idle", llmInflight: 0, imagePending: false, imageWaiting: 0, llmWaiting: 0 };
    const leases = [{ holder: "train", by: "10.0.0.3", since: 0 }];
    const model = new StatusModel({ version: "v", upstreams: [], now: () => clock, retryAfterS: () => 42, leaseQueue: () => leases });
    model.onLock({ type: "transition", from: "idle", to: "llm", at: 0, snapshot: lock });
    const chat = model.start("/api/chat", "10.0.0.1");
    model.admitted(chat);
    const dead = model.start("/api/chat", "10.0.0.2");
    model.admitted(dead);
    model.retrying(dead);
    clock += 10;
    model.onJob({ phase: "received", jobId: 5, promptId: "p5", minted: true, client: "10.0.0.4" });
    leases[0]!.since = (clock += 10);
    clock += 10;
    const late = model.start("/api/generate", "10.0.0.5");
    const doc = model.snapshot(true);
    expect(doc.llm).toMatchObject({ inflight: 1, waiting: 1 });
    expect(doc.llm.requests.find((r) => r.id === dead.id)).toMatchObject({ retrying: true, waiting: false });
    expect(doc.waiting.map((w) => [w.kind, w.id, w.reason, w.retry_after_s])).toEqual([
      ["image", 5, "draining chats (1 in flight)", 42],
      ["lease", "train", "behind image job 5 (waiting too)", 42],
      ["llm", late.id, 'behind a queued lease ("train")', 42],
    ]);
    expect(model.snapshot(false).waiting.map((w) => w.client)).toEqual([undefined, undefined, undefined]);
  });

  test("Ollama's resident models and ComfyUI's memory, as their last answers said", () => {
    const { model } = setup();
    expect(model.snapshot(false)).toMatchObject({ models: null, comfy_memory: null });
    model.onModels(JSON.parse(fixtureText("ollama-ps.json")).models);
    model.onComfyStats(JSON.parse(fixtureText("comfy-system-stats-loaded.json")));
    const doc = model.snapshot(false);
    expect(doc.models![0]).toEqual({ name: "nomic-embed-text:latest", size: 590557184, size_vram: 590557184, expires_at: "2318-11-30T10:04:17.412907113-07:00" });
    expect(doc.models_at).toBe(doc.now);
    expect(doc.comfy_memory).toEqual({ used: 25386352640 - 21302018048, total: 25386352640, torch_reserved: 2684354560, at: doc.now });
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
