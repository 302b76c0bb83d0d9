/**
 * The end of a job is heard when ComfyUI announces it (issue 27 point 2): the turnstile keeps a
 * websocket of its own open to ComfyUI, and the `status` frame ComfyUI sends every client on a
 * queue change wakes the follower at once — not at its next HISTORY_POLL_INTERVAL poll.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { callsTo, chat, newPromptId, promptBody, refuseOwnSocket, settledAt, startStack, submit, type Stack, until } from "./helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

const ENV = { HISTORY_POLL_INTERVAL: "4s", JOB_TIMEOUT: "30s", LLM_WAIT_TIMEOUT: "30s" };

describe.each([
  ["today's ComfyUI (jobs API)", false],
  ["ComfyUI v0.3.64 (/queue and /history)", true],
] as const)("%s", (_name, legacy) => {
  test("with HISTORY_POLL_INTERVAL 4s a waiting chat is served within 800 ms of the job's end", async () => {
    stack = await startStack({ comfy: { jobMs: 600, legacy }, env: ENV });
    const { t, comfy, gpu } = stack;
    await until(() => comfy!.sockets() === 1, "the turnstile's own socket to ComfyUI");
    const res = await submit(t, promptBody(newPromptId()));
    expect(res.status).toBe(200);
    await res.text();
    await until(() => comfy!.runningJob() !== undefined, "the job to run");
    const answered = settledAt(chat(t, "llama3.2", AbortSignal.timeout(6000)).then((r) => r.text()));
    await until(() => answered.done(), "the chat to be answered", 7000);
    const ended = comfy!.jobs()[0]!.endedAt!;
    expect(answered.at()! - ended).toBeLessThan(800);
    expect(gpu.overlaps()).toEqual([]);
  });
});

test("a relayed end frame of a followed job wakes its follower when the turnstile's own socket is down", async () => {
  stack = await startStack({ comfy: { jobMs: 600 }, env: ENV, beforeStart: async ({ comfy }) => refuseOwnSocket(comfy!) });
  const { t, comfy } = stack;
  const ws = new WebSocket(`${t.comfyUrl.replace("http", "ws")}/ws?clientId=painter`);
  await new Promise((resolve, reject) => ((ws.onopen = resolve), (ws.onerror = reject)));
  try {
    const body = JSON.parse(promptBody(newPromptId())) as Record<string, unknown>;
    body.client_id = "painter";
    const res = await submit(t, JSON.stringify(body));
    expect(res.status).toBe(200);
    await res.text();
    await until(() => comfy!.runningJob() !== undefined, "the job to run");
    const answered = settledAt(chat(t, "llama3.2", AbortSignal.timeout(6000)).then((r) => r.text()));
    await until(() => answered.done(), "the chat to be answered", 7000);
    expect(answered.at()! - comfy!.jobs()[0]!.endedAt!).toBeLessThan(800);
  } finally {
    ws.close();
  }
});

test("with the turnstile's own socket refused, polling still sees the end, and the socket is retried with backoff", async () => {
  stack = await startStack({ comfy: { jobMs: 40 }, env: { HISTORY_POLL_INTERVAL: "50ms" }, beforeStart: async ({ comfy }) => refuseOwnSocket(comfy!) });
  const { t, comfy } = stack;
  const res = await submit(t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  await t.settled();
  expect(callsTo(comfy!.calls, "/free")).toHaveLength(1);
  // BACKOFF_INITIAL 20ms doubling to BACKOFF_MAX 160ms: tried again, but not in a tight loop.
  await until(() => callsTo(comfy!.calls, "/ws").length >= 3, "the socket to be tried again");
  const tries = callsTo(comfy!.calls, "/ws").map((c) => c.at);
  expect(tries[2]! - tries[1]!).toBeGreaterThanOrEqual(15);
});

test("the socket comes back after ComfyUI restarts, and holds nothing", async () => {
  stack = await startStack({ comfy: { jobMs: 40 }, env: { HISTORY_POLL_INTERVAL: "50ms" } });
  const { t, comfy } = stack;
  await until(() => comfy!.sockets() === 1, "the turnstile's own socket to ComfyUI");
  await comfy!.crash();
  await comfy!.revive();
  await until(() => comfy!.sockets() === 1, "the socket reopened after ComfyUI came back");
  // The socket holds nothing: the card is idle while it is open.
  expect(t.lock.state).toBe("idle");
  const res = await submit(t, promptBody(newPromptId()));
  expect(res.status).toBe(200);
  await res.text();
  await t.settled();
});
