/**
 * Fair turns through real sockets (issue 30): one client's batch no longer keeps another client's
 * single image waiting behind all of it, and the batch still runs as one image session (one
 * Ollama unload, one checkpoint load, one /free).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BindError } from "../../../src/turnstile.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { callsTo, expectLlmQuotaRefused, keyedChat, newPromptId, postJson, promptBody, type Stack, startStack, submit, until } from "./helpers.ts";

let s: Stack | undefined;
let dir: string | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** A /prompt body from a ComfyUI client that names itself (as the ComfyUI page does). */
function fromClient(promptId: string, clientId: string): string {
  return JSON.stringify({ ...JSON.parse(promptBody(promptId)), client_id: clientId });
}

const sentIds = (stack: Stack) => callsTo(stack.comfy!.calls, "/prompt").map((c) => JSON.parse(c.bodyText).prompt_id as string);

describe("fair turns", () => {
  test("one client queues six images, another sends one: the other's goes right after the first; still one session", async () => {
    s = await startStack({ comfy: { jobMs: 80 } });
    const batch = Array.from({ length: 6 }, () => newPromptId());
    const answers = batch.map((id) => submit(s!.t, fromClient(id, "alice-tab-1")));
    await until(() => sentIds(s!).length === 1 && s!.t.lock.snapshot().imageWaiting === 5, "alice's first job in ComfyUI, five waiting");
    const single = newPromptId();
    answers.push(submit(s.t, fromClient(single, "bob-tab-1")));
    const statuses = await Promise.all(answers.map((a) => a.then((r) => r.status)));
    expect(statuses.every((x) => x === 200)).toBe(true);
    await s.t.settled();

    // Bob's job was sent second: behind the one of Alice's that ComfyUI already had, not behind six.
    expect(sentIds(s)).toEqual([batch[0]!, single, ...batch.slice(1)]);
    // And the batch still ran as one session.
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(1);
    expect(s.transitions.map((x) => `${x.from}->${x.to}`)).toEqual(["idle->image", "image->idle"]);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("one client alone: its jobs go to ComfyUI one at a time, in one session", async () => {
    s = await startStack({ comfy: { jobMs: 60 } });
    const ids = Array.from({ length: 4 }, () => newPromptId());
    const statuses = await Promise.all(ids.map((id) => submit(s!.t, promptBody(id)).then((r) => r.status)));
    expect(statuses).toEqual([200, 200, 200, 200]);
    await s.t.settled();
    const ends = s.comfy!.jobs().map((j) => j.endedAt!).sort((a, b) => a - b);
    const prompts = callsTo(s.comfy!.calls, "/prompt");
    // Each /prompt after the first reached ComfyUI once the job before it had ended.
    for (let i = 1; i < prompts.length; i++) expect(prompts[i]!.at).toBeGreaterThanOrEqual(ends[i - 1]!);
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(1);
  });

  test("a CLIENTS_FILE line that cannot be read stops the start with the file and line named", () => {
    dir = mkdtempSync(join(tmpdir(), "gt-clients-"));
    const file = join(dir, "clients");
    writeFileSync(file, "# who\nalice interactive key=sk-alice-0123456789\nbob vip cidr=10.0.0.0/8\n");
    let err: unknown;
    try {
      startTestTurnstile({ CLIENTS_FILE: file, COMFY_URL: "http://127.0.0.1:9" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BindError);
    expect((err as Error).message).toBe(`CLIENTS_FILE ${file} line 3: client bob: class must be one of interactive, normal, batch, not "vip"`);
    expect((err as Error).message).not.toContain("sk-alice");
  });
});

describe("a place in line", () => {
  test("a waiting chat has a place too, which its client sees with its own key; the waiters and their reasons are in the lock's order, not arrival's", async () => {
    s = await startStack();
    const { t } = s;
    const waiting = () => t.lock.snapshot();
    // A lease holds the card: everything after it waits.
    const lease = (await (await postJson(`${t.ollamaUrl}/turnstile/lease`, { holder: "hold", ttl: "5m" })).json()) as { id: string };
    const jobs = [submit(t, fromClient(newPromptId(), "alice-tab"))];
    await until(() => waiting().imageWaiting === 1, "alice's first job waiting");
    jobs.push(submit(t, fromClient(newPromptId(), "alice-tab")));
    await until(() => waiting().imageWaiting === 2, "alice's second job waiting");
    jobs.push(submit(t, fromClient(newPromptId(), "bob-tab")));
    await until(() => waiting().imageWaiting === 3, "bob's job waiting");
    const chat = keyedChat(t, "sk-carol-0003", { stream: false });
    await until(() => waiting().llmWaiting === 1, "carol's chat waiting");

    type Doc = { image: { jobs: { job: number }[] }; llm: { requests: { id: number; waiting: boolean }[] }; waiting: { kind: string; id: number; reason: string }[]; line: { client: string; class: string; jobs: unknown[]; requests: { request: number; position: number; estimate_s: number }[] }[] };
    const doc = (await (await fetch(`${t.ollamaUrl}/turnstile/status`)).json()) as Doc;
    const [a1, a2, b1] = doc.image.jobs.map((j) => j.job) as [number, number, number];
    const chatId = doc.llm.requests.find((r) => r.waiting)!.id;
    // Bob's job goes before alice's second (fair turns), and carol's chat when the card turns to llm after all three.
    expect(doc.waiting.map((w) => [w.kind, w.id, w.reason])).toEqual([
      ["image", a1, 'a lease holds the card ("hold")'],
      ["image", b1, `behind image job ${a1} (waiting too)`],
      ["image", a2, `behind image job ${b1} (waiting too)`],
      ["llm", chatId, `behind image job ${a2} (waiting too)`],
    ]);
    const carol = doc.line.at(-1)!;
    expect(carol).toMatchObject({ class: "normal", jobs: [], requests: [{ request: chatId, position: 4 }] });
    expect(carol.client).toMatch(/^key-[0-9a-f]{8}$/);
    // Its estimate is the busy answer's figure with the three jobs ahead (none has run yet: 30 s).
    expect(carol.requests[0]!.estimate_s).toBe(30);
    // Carol asks with her own key, not the admin token: her own entry, nobody else's name or address.
    const own = await (await fetch(`${t.ollamaUrl}/turnstile/status`, { headers: { authorization: "Bearer sk-carol-0003" } })).text();
    expect((JSON.parse(own) as Doc).line).toEqual([carol]);
    expect(own).not.toContain("sk-carol");
    expect(own).not.toContain('"client":"comfy-');
    expect(own).not.toContain('"client":"127.0.0.1"');

    await fetch(`${t.ollamaUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" });
    expect((await Promise.all([...jobs, chat])).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    await t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });
});

describe("quotas", () => {
  test("QUOTA_IMAGE_JOBS=2: a client's third job waiting is refused on arrival with 429 and Retry-After in ComfyUI's shape; the accepted ones all run; another client is not held to it", async () => {
    s = await startStack({ comfy: { jobMs: 150 }, env: { QUOTA_IMAGE_JOBS: "2" } });
    const first = [newPromptId(), newPromptId()].map((id) => submit(s!.t, fromClient(id, "alice-1")));
    await until(() => sentIds(s!).length === 1 && s!.t.lock.snapshot().imageWaiting === 1, "alice's two jobs accepted");
    const refusedId = newPromptId();
    const refused = await submit(s.t, fromClient(refusedId, "alice-1"));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = (await refused.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("quota_exceeded");
    expect(body.error.message).toContain("already has 2 image jobs");
    const bob = await submit(s.t, fromClient(newPromptId(), "bob-1"));
    expect(bob.status).toBe(200);
    expect((await Promise.all(first)).map((r) => r.status)).toEqual([200, 200]);
    await s.t.settled();
    expect(sentIds(s)).not.toContain(refusedId);
    expect(s.comfy!.jobs().filter((j) => j.state === "done")).toHaveLength(3);
    const metrics = parseExposition(await (await fetch(`${s.t.comfyUrl}/metrics`)).text());
    expect(sampleValue(metrics, "gpu_turnstile_quota_refusals_total", { client_class: "normal", kind: "image", reason: "concurrent" })).toBe(1);
    expect(sampleValue(metrics, "gpu_turnstile_image_jobs_by_class_total", { client_class: "normal" })).toBe(3);
    // Once alice's jobs are done, she may send again — even the id that was refused.
    expect((await submit(s.t, fromClient(refusedId, "alice-1"))).status).toBe(200);
    await s.t.settled();
  });

  test("a client's own images=N in CLIENTS_FILE wins over QUOTA_IMAGE_JOBS", async () => {
    dir = mkdtempSync(join(tmpdir(), "gt-clients-"));
    const file = join(dir, "clients");
    writeFileSync(file, "render batch client_id=render- images=1\n");
    s = await startStack({ comfy: { jobMs: 150 }, env: { QUOTA_IMAGE_JOBS: "5", CLIENTS_FILE: file } });
    const one = submit(s.t, fromClient(newPromptId(), "render-7"));
    await until(() => sentIds(s!).length === 1, "render's job sent");
    const two = await submit(s.t, fromClient(newPromptId(), "render-8"));
    expect(two.status).toBe(429);
    expect((await two.json()) as unknown).toMatchObject({ error: { message: expect.stringContaining("client render already has 1 image jobs") } });
    expect((await one).status).toBe(200);
    await s.t.settled();
  });
});

describe("LLM quota", () => {
  test("QUOTA_LLM_REQUESTS=1: a client's second chat while its first streams gets 429 in Ollama's and OpenAI's shapes; another key is not held to it; the slot comes back at the end", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 40, tokens: 20 }, env: { QUOTA_LLM_REQUESTS: "1" } });
    const first = await keyedChat(s.t, "sk-alice-0001");
    const reader = first.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    expect(await expectLlmQuotaRefused(s.t, "sk-alice-0001", "already has 1 LLM requests")).toBeGreaterThanOrEqual(1);
    const other = await keyedChat(s.t, "sk-bob-0002");
    expect(other.status).toBe(200);
    await other.text();
    while (!(await reader.read()).done) {
      // the first chat's slot is given back once its answer was read to the end
    }
    await until(() => s!.t.lock.snapshot().llmInflight === 0, "the first chat's slot given back");
    const third = await keyedChat(s.t, "sk-alice-0001");
    expect(third.status).toBe(200);
    await third.text();
    const metrics = parseExposition(await (await fetch(`${s.t.ollamaUrl}/metrics`)).text());
    expect(sampleValue(metrics, "gpu_turnstile_quota_refusals_total", { client_class: "normal", kind: "llm", reason: "concurrent" })).toBe(2);
  });
});

describe("metrics by class", () => {
  test("LLM waits by class: a chat with a key CLIENTS_FILE names is counted in its class, one without in normal; no name or key in /metrics", async () => {
    dir = mkdtempSync(join(tmpdir(), "gt-clients-"));
    const file = join(dir, "clients");
    writeFileSync(file, "alice interactive key=sk-alice-0001\n");
    s = await startStack({ ollama: { tokenDelayMs: 1, tokens: 3 }, comfy: { jobMs: 400 }, env: { CLIENTS_FILE: file } });
    const chat = (headers: Record<string, string>) =>
      fetch(`${s!.t.ollamaUrl}/api/chat`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }) });
    expect((await chat({})).status).toBe(200);
    // Alice's chat waits behind an image job.
    const job = submit(s.t, promptBody(newPromptId()));
    await until(() => s!.t.status.snapshot(false).image.running !== null, "the image job holding the card");
    const waited = await chat({ authorization: "Bearer sk-alice-0001" });
    expect(waited.status).toBe(200);
    expect((await job).status).toBe(200);
    await s.t.settled();
    const text = await (await fetch(`${s.t.ollamaUrl}/metrics`)).text();
    const metrics = parseExposition(text);
    const count = (cls: string) => sampleValue(metrics, "gpu_turnstile_llm_wait_by_class_seconds_count", { client_class: cls });
    expect([count("interactive"), count("normal"), count("batch")]).toEqual([1, 1, 0]);
    expect(sampleValue(metrics, "gpu_turnstile_llm_wait_by_class_seconds_sum", { client_class: "interactive" })).toBeGreaterThan(0.05);
    expect(text).not.toContain("alice");
    expect(text).not.toContain("sk-");
  });
});

describe("held jobs in /queue", () => {
  test("ComfyUI clients see the jobs waiting for the GPU in /queue in the order they will be sent (fair turns), not arrival", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 40, tokens: 30 }, comfy: { jobMs: 50 } });
    const res = await fetch(`${s.t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    const alice = [newPromptId(), newPromptId(), newPromptId()];
    const bob = newPromptId();
    const answers = alice.map((id) => submit(s!.t, fromClient(id, "alice-1")));
    await until(() => s!.t.lock.snapshot().imageWaiting === 3, "alice's three jobs waiting behind the chat");
    answers.push(submit(s.t, fromClient(bob, "bob-1")));
    await until(() => s!.t.lock.snapshot().imageWaiting === 4, "bob's job waiting too");
    const queue = (await (await fetch(`${s.t.comfyUrl}/queue`)).json()) as { queue_pending: [number, string][] };
    expect(queue.queue_pending.map((item) => item[1])).toEqual([alice[0]!, bob, alice[1]!, alice[2]!]);
    const numbers = queue.queue_pending.map((item) => item[0]);
    expect([...numbers].sort((a, b) => a - b)).toEqual(numbers);
    while (!(await reader.read()).done) {
      // the chat ends; the jobs go in that order
    }
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    await s.t.settled();
    expect(sentIds(s)).toEqual([alice[0]!, bob, alice[1]!, alice[2]!]);
  });
});
