/**
 * Queue edits made through the turnstile (issue 27 point 3), against the simulator as ComfyUI
 * v0.3.64 (no jobs API, so /queue and /history are the only witnesses; a deleted pending job gets
 * no history, api-facts R5):
 *
 * - a pending job removed with `POST /queue {"delete":[id]}` or `{"clear":true}` ends `cancelled`,
 *   not `lost` (a /queue read that started before the edit must not be taken as the answer);
 * - a job the turnstile holds for the GPU shows in /queue under its real prompt_id with its own
 *   workflow, and a delete through the turnstile removes it: it is never sent, and its /prompt is
 *   answered at once.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { callsTo, chat, newPromptId, postJson, promptBody, refuseOwnSocket, type Stack, startStack, submit, until, waitFor, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const outcomes = (st: Stack) => st.t.status.snapshot(false).recent.map((j) => [j.prompt_id, j.outcome] as const);
const editQueue = (base: string, body: object) => postJson(`${base}/queue`, body);

interface QueueDoc {
  queue_running: unknown[][];
  queue_pending: unknown[][];
}
const readQueue = async (base: string) => (await (await fetch(`${base}/queue`)).json()) as QueueDoc;

describe("a pending job removed through the turnstile ends cancelled (issue 27 point 3)", () => {
  test.each([
    ["delete", (id: string) => ({ delete: [id] }), "up"],
    ["clear", () => ({ clear: true }), "up"],
    // Without the turnstile's own socket no `status` broadcast forces a fresh read: the edit must.
    ["delete, own ComfyUI socket down", (id: string) => ({ delete: [id] }), "down"],
    ["clear, own ComfyUI socket down", () => ({ clear: true }), "down"],
  ] as const)("%s", async (_name, body, socket) => {
    // A long poll interval: the stale read is the one the follower made just before the edit.
    s = await startStack({
      comfy: { legacy: true },
      env: { HISTORY_POLL_INTERVAL: "1s", JOB_TIMEOUT: "60s" },
      beforeStart: async ({ comfy }) => void (socket === "down" && refuseOwnSocket(comfy!)),
    });
    const running = newPromptId();
    const pending = newPromptId();
    const a = await submit(s.t, promptBody(running, { sim_job_ms: 30_000 }));
    expect(a.status).toBe(200);
    await a.text();
    await waitFor(() => s!.comfy!.runningJob(), "the first job running");
    // Another client (its own client_id): with fair turns a client's second job would wait at the
    // lock until its first has ended; this one joins the session and is pending in ComfyUI.
    const b = await submit(s.t, JSON.stringify({ ...JSON.parse(promptBody(pending)), client_id: "another-tab" }));
    expect(b.status).toBe(200);
    await b.text();
    // The follower's first look (a /queue read showing the job pending) happens as the answer
    // passes; the edit follows straight after, as a client's delete does.
    await until(() => callsTo(s!.comfy!.calls, `/history/${pending}`).length > 0, "the pending job's first look");
    const edit = await editQueue(s.t.comfyUrl, body(pending));
    expect(edit.status).toBe(200);
    await waitFor(() => outcomes(s!).find(([id]) => id === pending), "the pending job's end", 10_000);
    expect(outcomes(s)).toContainEqual([pending, "cancelled"]);
    expect(warnLines(s.t, "prompt lost")).toEqual([]);
    // The running job was not touched by the edit; it is stopped here only to end the test.
    expect(s.comfy!.runningJob()?.id).toBe(running);
    await postJson(`${s.t.comfyUrl}/interrupt`, {});
    await s.t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });
});

describe("a job held for the GPU, in ComfyUI's /queue (issue 27 point 3)", () => {
  /** An image job held at the lock behind a long chat. */
  async function heldBehindChat(st: Stack, id: string, seed: string) {
    const c = chat(st.t);
    await until(() => st.t.lock.state === "llm", "the chat holding the GPU");
    const body = promptBody(id, {}, (p) => {
      // A 64-bit seed must come through digit for digit (no round trip through a JS number).
      (p["3"] as { inputs: Record<string, unknown> }).inputs.seed = 0;
    }).replace('"seed":0', `"seed":${seed}`);
    const job = submit(st.t, body);
    await until(() => st.t.lock.snapshot().imageWaiting === 1, "the image job waiting for the GPU");
    return { c, job };
  }

  test("shows its real prompt_id, its own workflow and a number above ComfyUI's; /history and /prompt agree", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 20, tokens: 100 }, comfy: { legacy: true } });
    // A job ComfyUI has had (number 0), so the held one must come after it.
    const done = newPromptId();
    const first = await submit(s.t, promptBody(done));
    expect(((await first.json()) as { number: number }).number).toBe(0);
    await s.t.settled();

    const id = newPromptId();
    const seed = "156680208700286123";
    const { c, job } = await heldBehindChat(s, id, seed);
    const text = await (await fetch(`${s.t.comfyUrl}/queue`)).text();
    expect(text).toContain(`"seed":${seed}`);
    const q = JSON.parse(text) as QueueDoc;
    expect(q.queue_running).toEqual([]);
    expect(q.queue_pending).toHaveLength(1);
    const [number, promptId, workflow, extra, outputs] = q.queue_pending[0]!;
    expect(promptId).toBe(id);
    expect(number).toBeGreaterThan(0);
    expect(Object.keys(workflow as object).sort()).toEqual(Object.keys(JSON.parse(promptBody(id)).prompt).sort());
    expect(extra).toMatchObject({ client_id: JSON.parse(promptBody(id)).client_id });
    expect(Array.isArray(outputs)).toBe(true);
    // A queue panel opens it: no history yet, as for any pending job; /prompt counts it.
    expect(await (await fetch(`${s.t.comfyUrl}/history/${id}`)).json()).toEqual({});
    expect(await (await fetch(`${s.t.comfyUrl}/prompt`)).json()).toEqual({ exec_info: { queue_remaining: 1 } });

    expect((await c).status).toBe(200);
    const answer = (await (await job).json()) as { prompt_id: string; number: number };
    expect(answer.prompt_id).toBe(id);
    await s.t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("numbered above the jobs ComfyUI ran before the turnstile started", async () => {
    s = await startStack({
      ollama: { tokenDelayMs: 20, tokens: 100 },
      comfy: { legacy: true },
      beforeStart: async ({ comfy }) => {
        for (let i = 0; i < 3; i++) await (await postJson(`${comfy!.url}/prompt`, promptBody(newPromptId(), { sim_job_ms: 1 }))).text();
        await until(() => comfy!.jobs().every((j) => j.state === "done"), "ComfyUI's own jobs done");
      },
    });
    const id = newPromptId();
    const { c, job } = await heldBehindChat(s, id, "1");
    const q = await readQueue(s.t.comfyUrl);
    expect(q.queue_pending.map((i) => i.slice(0, 2))).toEqual([[3, id]]);
    await (await c).text();
    await (await job).text();
    await s.t.settled();
  });

  test.each([
    ["delete", (id: string) => ({ delete: [id] })],
    ["clear", () => ({ clear: true })],
  ] as const)("a %s through the turnstile removes it: never sent, its /prompt answered at once in ComfyUI's shape", async (_name, body) => {
    s = await startStack({ ollama: { tokenDelayMs: 25, tokens: 80 }, comfy: { legacy: true } });
    const id = newPromptId();
    const { c, job } = await heldBehindChat(s, id, "1");
    const edit = await editQueue(s.t.comfyUrl, body(id));
    expect(edit.status).toBe(200);
    // Answered while the chat still holds the GPU (80 tokens at 25 ms: 2 s).
    const res = await job;
    expect(s.t.lock.state).toBe("llm");
    expect(res.status).toBe(400);
    const err = (await res.json()) as { error: { type: string; message: string }; node_errors: object };
    expect(err.error.type).toBe("prompt_deleted");
    expect(err.error.message).toContain(id);
    expect(err.node_errors).toEqual({});
    expect((await readQueue(s.t.comfyUrl)).queue_pending).toEqual([]);
    expect(s.t.lock.snapshot().imageWaiting).toBe(0);
    await (await c).text();
    await s.t.settled();
    expect(callsTo(s.comfy!.calls, "/prompt", "POST")).toEqual([]);
    expect(s.comfy!.jobs()).toEqual([]);
    // The id may be sent again: it never reached ComfyUI.
    const again = await submit(s.t, promptBody(id));
    expect(again.status).toBe(200);
    await again.text();
    await s.t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });
});
