/**
 * One image job end to end, through real sockets: the exact calls the turnstile makes to Ollama
 * and ComfyUI, in order, and what a chat sent meanwhile sees. The fakes follow ../shared/api.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { RecordedCall } from "../../../src/sim/index.ts";
import {
  callNames,
  callsTo,
  chat,
  FIXTURE_PROMPT_ID,
  jobCounts,
  newPromptId,
  postJson,
  PROMPT_REQUEST,
  promptBody,
  settledAt,
  type Stack,
  startStack,
  submit,
  total,
  waitFor,
} from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

/** Loads models straight into the simulated Ollama (not through the turnstile), then forgets those calls. */
async function preload(stack: Stack, models: string[]): Promise<void> {
  const ollama = stack.ollama!;
  for (const model of models) {
    const res = await postJson(`${ollama.url}/api/generate`, { model, prompt: "" });
    expect(res.status).toBe(200);
    await res.text();
  }
  expect(ollama.loadedModels().sort()).toEqual([...models].sort());
  ollama.clearCalls();
}

/** Consecutive repeats folded into one entry: polls show up once, in their place. */
function runs(names: string[]): string[] {
  return names.filter((n, i) => i === 0 || names[i - 1] !== n);
}

function merged(stack: Stack): RecordedCall[] {
  return [...stack.ollama!.calls, ...stack.comfy!.calls].sort((a, b) => a.at - b.at);
}

/** What every run of the fixture job must show, whichever way ComfyUI is followed. */
function expectTheSequence(s: Stack, path: string, calls: RecordedCall[]): Promise<void> {
  return (async () => {
    // keep_alive:0 once per loaded model, nothing else in the body.
      const unloads = callsTo(calls, "/api/generate").map((c) => JSON.parse(c.bodyText));
      expect(unloads.sort((a, b) => a.model.localeCompare(b.model))).toEqual([
        { model: "llama3.2:latest", keep_alive: 0 },
        { model: "qwen2.5:7b", keep_alive: 0 },
      ]);
      // Ollama frees asynchronously (unloadMs): the first poll after the unload still lists models,
      // so the turnstile must have polled more than once, and the prompt goes out only after the
      // ledger shows Ollama's memory back.
      const prompt = callsTo(calls, path)[0]!;
      const psAfterUnload = callsTo(calls, "/api/ps").slice(1);
      expect(psAfterUnload.length).toBeGreaterThanOrEqual(2);
      const ollamaHolds = s.gpu.ledger.filter((h) => h.tenant === "ollama");
      expect(ollamaHolds).toHaveLength(2);
      for (const h of ollamaHolds) expect(h.end!).toBeLessThanOrEqual(prompt.at);

      // The body ComfyUI received is the client's, byte for byte.
      expect(prompt.bodyText).toBe(PROMPT_REQUEST);
      expect(prompt.headers["content-length"]).toBe(String(Buffer.byteLength(PROMPT_REQUEST)));
      expect(callsTo(calls, /\/prompt$/, "POST")).toHaveLength(1);

      // The job polled while it ran (jobMs 40, poll 10 ms), then the memory dance.
      expect(callsTo(calls, new RegExp(`^/(api/jobs|history)/${FIXTURE_PROMPT_ID}$`)).length).toBeGreaterThanOrEqual(2);
      const free = callsTo(calls, "/free")[0]!;
      expect(JSON.parse(free.bodyText)).toEqual({ unload_models: true, free_memory: true });
      const statsAfterFree = callsTo(calls, "/system_stats").filter((c) => c.at > free.at);
      // freeDelayMs 20: the first read after /free still sees the checkpoint reserved.
      expect(statsAfterFree.length).toBeGreaterThanOrEqual(2);
      const comfyHold = s.gpu.ledger.find((h) => h.tenant === "comfy")!;
      expect(comfyHold.end).not.toBeNull();

      // Held from before the first /api/ps until after the read that confirmed the VRAM was back.
      const image = s.transitions.find((x) => x.to === "image")!;
      const released = s.transitions.find((x) => x.from === "image")!;
      // The prompt_id check comes before the GPU is taken: a refused id unloads nothing.
      expect(image.at).toBeGreaterThan(calls[0]!.at);
      expect(image.at).toBeLessThanOrEqual(callsTo(calls, "/api/ps")[0]!.at);
      expect(released.to).toBe("idle");
      expect(released.at).toBeGreaterThanOrEqual(statsAfterFree.at(-1)!.at);
      expect(released.at).toBeGreaterThanOrEqual(comfyHold.end!);
      expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
      expect(s.gpu.overlaps()).toEqual([]);
      expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
      expect(total(await jobCounts(s.t))).toBe(1);

      // One log line per phase, each naming the job and (once known) its prompt_id.
      const jobLines = s.t.logLines.filter((l) => l.includes("image job"));
      for (const phase of ["GPU acquired", "Ollama empty", "ComfyUI answered 200", "prompt success", "memory released", "completed; GPU released"]) {
        expect(jobLines.some((l) => l.includes(phase))).toBe(true);
      }
      expect(jobLines.filter((l) => l.includes(FIXTURE_PROMPT_ID)).length).toBeGreaterThanOrEqual(4);
  })();
}

describe("one image job on a ComfyUI without the jobs API (v0.3.64)", () => {
  test("the id is checked in /queue and /history; /queue is read before each /history poll", async () => {
    s = await startStack({ comfy: { legacy: true } });
    await preload(s, ["llama3.2:latest", "qwen2.5:7b"]);
    const path = "/prompt";
    const res = await submit(s.t, PROMPT_REQUEST, { path });
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();

    const calls = merged(s);
    const historyPath = `/history/${FIXTURE_PROMPT_ID}`;
    const jobPath = `/api/jobs/${FIXTURE_PROMPT_ID}`;
    const queueReads = callsTo(calls, "/queue", "GET");
    expect(queueReads.length).toBe(callsTo(calls, historyPath).length);
    expect(queueReads.at(-1)!.at).toBeLessThanOrEqual(callsTo(calls, "/free")[0]!.at);
    expect(runs(callNames(calls).filter((n) => n !== "GET /queue"))).toEqual([
      `GET ${jobPath}`,
      `GET ${historyPath}`,
      "GET /api/ps",
      "POST /api/generate",
      "GET /api/ps",
      `POST ${path}`,
      `GET ${jobPath}`,
      `GET ${historyPath}`,
      "GET /system_stats",
      "POST /free",
      "GET /system_stats",
    ]);
    await expectTheSequence(s, path, calls);
  });
});

describe.each(["/prompt", "/api/prompt"])("one image job through %s", (path) => {
  test("unload every model, wait for /api/ps to empty, forward once, poll the jobs API, free, verify, release", async () => {
    s = await startStack();
    await preload(s, ["llama3.2:latest", "qwen2.5:7b"]);

    const res = await submit(s.t, PROMPT_REQUEST, { path });
    const answer = await res.text();
    expect(res.status).toBe(200);
    expect(JSON.parse(answer)).toMatchObject({ prompt_id: FIXTURE_PROMPT_ID, number: 0, node_errors: {} });
    await s.t.settled();

    const calls = merged(s);
    const jobPath = `/api/jobs/${FIXTURE_PROMPT_ID}`;
    // Today's ComfyUI: one small read per poll, and never its whole /queue or /history.
    expect(callsTo(calls, "/queue", "GET")).toEqual([]);
    expect(callsTo(calls, /^\/history/)).toEqual([]);
    // The id is checked unused before anything is unloaded, then followed by the same route.
    expect(runs(callNames(calls).filter((n) => !n.startsWith("GET /api/jobs?")))).toEqual([
      `GET ${jobPath}`,
      "GET /api/ps",
      "POST /api/generate",
      "GET /api/ps",
      `POST ${path}`,
      `GET ${jobPath}`,
      "GET /system_stats",
      "POST /free",
      "GET /system_stats",
    ]);
    await expectTheSequence(s, path, calls);
  });


  test("a chat sent while the job runs gets nothing until ComfyUI's memory is verified free, then succeeds", async () => {
    s = await startStack({ comfy: { jobMs: 120 } });
    const { comfy, ollama } = s;
    let chatDoneAtFree: boolean | undefined;
    let chatDoneAtLastStats: boolean | undefined;
    let pending: ReturnType<typeof settledAt> | undefined;
    comfy!.override("POST", "/free", () => {
      chatDoneAtFree = pending?.done();
      return undefined; // let the simulator answer
    });
    comfy!.override("GET", "/system_stats", () => {
      chatDoneAtLastStats = pending?.done();
      return undefined;
    });

    const job = submit(s.t, promptBody(newPromptId()), { path });
    await waitFor(() => comfy!.runningJob(), "ComfyUI running the job");
    const chatRes = chat(s.t);
    pending = settledAt(chatRes);

    expect((await job).status).toBe(200);
    const res = await chatRes;
    expect(res.status).toBe(200);
    const body = (await res.json()) as { done: boolean; message: { content: string } };
    expect(body.done).toBe(true);
    expect(body.message.content.length).toBeGreaterThan(0);
    await s.t.settled();

    expect(chatDoneAtFree).toBe(false);
    expect(chatDoneAtLastStats).toBe(false);
    // Ollama saw the chat only after the last /system_stats read (the one that confirmed release).
    const chatCall = callsTo(ollama!.calls, "/api/chat")[0]!;
    const lastStats = callsTo(comfy!.calls, "/system_stats").at(-1)!;
    expect(chatCall.at).toBeGreaterThan(lastStats.at);
    expect(pending.at()!).toBeGreaterThan(lastStats.at);
    expect(s.gpu.overlaps()).toEqual([]);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  });
});

describe("ComfyUI refuses the prompt (400)", () => {
  const cases: [string, (p: Record<string, unknown>) => void][] = [
    ["an unknown node class", (p) => ((p["3"] as { class_type: string }).class_type = "NoSuchSampler")],
    ["no output node", (p) => delete p["9"]],
  ];
  test.each(cases)("%s: the body comes back unchanged and the GPU is released at once", async (_name, mutate) => {
    s = await startStack();
    const body = promptBody(newPromptId(), {}, mutate);
    // What ComfyUI itself answers to this prompt (a 400 queues nothing, so asking twice is harmless).
    const direct = await postJson(`${s.comfy!.url}/prompt`, body);
    const directText = await direct.text();
    expect(direct.status).toBe(400);
    s.comfy!.clearCalls();

    const res = await submit(s.t, body);
    const text = await res.text();
    expect(res.status).toBe(400);
    expect(text).toBe(directText);
    expect(res.headers.get("content-type")).toBe(direct.headers.get("content-type"));
    // Released before the answer was written: idle right now, no background work.
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
    expect(s.t.tracker.active()).toEqual([]);

    const c = await chat(s.t);
    expect(c.status).toBe(200);
    await c.text();
    expect(callNames(s.comfy!.calls)).toEqual([`GET /api/jobs/${JSON.parse(body).prompt_id}`, "POST /prompt"]);
    expect(await jobCounts(s.t)).toMatchObject({ rejected: 1 });
    expect(total(await jobCounts(s.t))).toBe(1);
  });
});

describe("embedding-only model on an Ollama older than 0.3.11", () => {
  test("keep_alive:0 on /api/generate is refused, so the unload falls back to /api/embed", async () => {
    s = await startStack({ ollama: { legacyUnload: true } });
    const load = await postJson(`${s.ollama!.url}/api/embed`, { model: "nomic-embed-text", input: "hello" });
    expect(load.status).toBe(200);
    await load.text();
    expect(s.ollama!.loadedModels()).toEqual(["nomic-embed-text:latest"]);
    s.ollama!.clearCalls();

    const res = await submit(s.t, promptBody(newPromptId()));
    expect(res.status).toBe(200);
    await res.text();
    await s.t.settled();

    const calls = s.ollama!.calls;
    expect(runs(callNames(calls))).toEqual(["GET /api/ps", "POST /api/generate", "POST /api/embed", "GET /api/ps"]);
    expect(JSON.parse(callsTo(calls, "/api/generate")[0]!.bodyText)).toEqual({ model: "nomic-embed-text:latest", keep_alive: 0 });
    const embed = callsTo(calls, "/api/embed")[0]!;
    expect(embed.bodyText).toBe(JSON.stringify({ model: "nomic-embed-text:latest", input: "x", keep_alive: 0 }));
    expect(s.ollama!.loadedModels()).toEqual([]);
    // The model was really gone before ComfyUI got the prompt.
    const prompt = callsTo(s.comfy!.calls, "/prompt")[0]!;
    const hold = s.gpu.ledger.find((h) => h.tenant === "ollama")!;
    expect(hold.end!).toBeLessThanOrEqual(prompt.at);
    expect(s.gpu.overlaps()).toEqual([]);
    expect(await jobCounts(s.t)).toMatchObject({ completed: 1 });
  });
});
