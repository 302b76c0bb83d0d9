/**
 * Steering through real sockets against the simulators: POST /turnstile/release ends a running
 * image job (ComfyUI sees /interrupt) and a chat stream; a GPU lease waits for the chat in
 * flight, empties the card (the ledger shows it), holds off chats and images until it is given
 * back, and ends by itself when its renewals stop.
 */
import { afterEach, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import type { StatusDoc } from "../../../src/status/model.ts";
import { callsTo, chat, newPromptId, postJson, promptBody, type Stack, startStack, submit, until, waitFor, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const streamChat = (base: string) => postJson(`${base}/api/chat`, { model: "llama3.2", stream: true, messages: [{ role: "user", content: "hi" }] });
const release = (base: string, headers: Record<string, string> = {}) => fetch(`${base}/turnstile/release`, { method: "POST", headers });
const takeLease = (base: string, body: object, signal?: AbortSignal) => postJson(`${base}/turnstile/lease`, body, signal);
const status = async (base: string) => (await (await fetch(`${base}/turnstile/status`)).json()) as StatusDoc & { can_steer: boolean };

/** Reads a body to its end; true when it ended early with an error (a cut stream). */
async function readToEnd(res: Response): Promise<{ text: string; cut: boolean }> {
  let text = "";
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text, cut: false };
      text += value;
    }
  } catch {
    return { text, cut: true };
  }
}

test("force-release cuts a chat stream in flight: its slot comes back at once, the log names who did it", async () => {
  s = await startStack({ ollama: { tokenDelayMs: 50, tokens: 400 } });
  const res = await streamChat(s.t.ollamaUrl);
  expect(res.status).toBe(200);
  const reading = readToEnd(res);
  await until(() => s!.t.lock.state === "llm", "the chat holding the GPU");
  const r = await release(s.t.ollamaUrl);
  expect(r.status).toBe(200);
  expect(await r.json()).toMatchObject({ llm_cut: 1, lease: null, jobs_interrupted: [] });
  expect(s.t.lock.snapshot().llmInflight).toBe(0);
  const body = await reading;
  // 400 tokens at 50 ms would take 20 s: the stream ended long before its last token.
  expect(body.text).not.toContain('"done":true');
  expect(warnLines(s.t, "force-release by 127.0.0.1")).toHaveLength(1);
  expect(s.gpu.overlaps()).toEqual([]);
});

test("force-release ends a running image job: ComfyUI sees /interrupt, ComfyUI is freed, the waiting chat goes next; no overlap", async () => {
  s = await startStack({ env: { HISTORY_POLL_INTERVAL: "30ms", JOB_TIMEOUT: "60s" } });
  const id = newPromptId();
  const job = await submit(s.t, promptBody(id, { sim_job_ms: 30_000 }));
  expect(job.status).toBe(200);
  await job.text();
  await waitFor(() => s!.comfy!.runningJob(), "job running");
  const waiting = chat(s.t);
  await until(() => s!.t.lock.snapshot().llmWaiting === 1, "chat waiting for the GPU");

  const releasedAt = now();
  const r = await release(s.t.comfyUrl);
  expect(await r.json()).toMatchObject({ jobs_interrupted: [id] });
  const c = await waiting;
  expect(c.status).toBe(200);
  await c.text();
  await s.t.settled();
  expect(callsTo(s.comfy!.calls, "/interrupt")).not.toHaveLength(0);
  const freed = callsTo(s.comfy!.calls, "/free");
  expect(freed).toHaveLength(1);
  expect(s.t.status.snapshot(false).recent.map((j) => [j.prompt_id, j.outcome])).toEqual([[id, "interrupted"]]);
  // The force-release's line: plain values a log reader sees as written.
  expect(s.t.logLines.join("")).toMatch(new RegExp(`force-release by 127\\.0\\.0\\.1 .*lease=– llm_cut=0 jobs_interrupted=${id} leases_cancelled=0`));
  // Well before the 30 s job would have ended on its own.
  expect(s.transitions.find((x) => x.from === "image")!.at - releasedAt).toBeLessThan(5000);
  expect(s.gpu.overlaps()).toEqual([]);
});

test("steering needs loopback or the admin token: a wrong token is refused from loopback too, the right one works", async () => {
  s = await startStack({ comfy: false, env: { ADMIN_TOKEN: "0123456789abcdef-token" } });
  const wrong = await release(s.t.ollamaUrl, { authorization: "Bearer not-the-token-at-all" });
  expect(wrong.status).toBe(403);
  expect((await wrong.json()).error).toContain("wrong admin token");
  const right = await release(s.t.ollamaUrl, { authorization: "Bearer 0123456789abcdef-token" });
  expect(right.status).toBe(200);
  expect((await status(s.t.ollamaUrl)).can_steer).toBe(true);
  const get = await fetch(`${s.t.ollamaUrl}/turnstile/release`);
  expect(get.status).toBe(405);
});

test("a web page of another site cannot steer through the operator's browser (CSRF): its Origin gets 403, the GPU is untouched", async () => {
  s = await startStack({ ollama: { tokenDelayMs: 20, tokens: 15 }, comfy: false });
  const { t } = s;
  const stream = await streamChat(t.ollamaUrl);
  const reading = readToEnd(stream);
  await until(() => t.lock.state === "llm", "the chat holding the GPU");
  // What a plain cross-site form POST from http://evil.example looks like from loopback.
  const forged = await release(t.ollamaUrl, { origin: "http://evil.example", "sec-fetch-site": "cross-site" });
  expect(forged.status).toBe(403);
  expect((await forged.json()).error).toContain("another web site");
  const noFetchMeta = await release(t.ollamaUrl, { origin: "http://evil.example" });
  expect(noFetchMeta.status).toBe(403);
  const lease = await fetch(`${t.ollamaUrl}/turnstile/lease`, {
    method: "POST",
    headers: { origin: "null", "content-type": "text/plain" },
    body: JSON.stringify({ holder: "evil", ttl: "1h" }),
  });
  expect(lease.status).toBe(403);
  // The chat was not cut and nothing took the GPU from it.
  expect((await reading).cut).toBe(false);
  expect(t.lock.state).not.toBe("lease");
  // The page itself (same origin) still steers.
  const own = await release(t.ollamaUrl, { origin: t.ollamaUrl, "sec-fetch-site": "same-origin" });
  expect(own.status).toBe(200);
});

test("a lease taken during a chat waits for it, empties the card, holds off chats and images, and ends when given back", async () => {
  s = await startStack({ ollama: { tokenDelayMs: 20, tokens: 15 }, env: { LLM_WAIT_TIMEOUT: "30s" } });
  const { t } = s;
  const stream = await streamChat(t.ollamaUrl);
  const reading = readToEnd(stream);
  await until(() => t.lock.state === "llm", "the chat holding the GPU");
  const asked = takeLease(t.ollamaUrl, { holder: "benchmark", ttl: "1m" });
  await until(() => t.lock.snapshot().imageWaiting === 1, "the lease waiting like an image job");
  const chatEnd = await reading;
  expect(chatEnd.cut).toBe(false);
  const res = await asked;
  expect(res.status).toBe(200);
  const lease = (await res.json()) as { id: string; expires_at: string };
  expect(Date.parse(lease.expires_at) - Date.now()).toBeGreaterThan(50_000);
  // The card is empty: Ollama unloaded (its model's hold ended), ComfyUI freed, nothing on the GPU.
  expect(s.gpu.active()).toEqual([]);
  expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
  expect(callsTo(s.ollama!.calls, "/api/ps").length).toBeGreaterThan(0);
  expect(t.lock.state).toBe("lease");
  // Whatever touches the card while it is lent is a fault.
  const duringLease: string[] = [];
  const off = s.gpu.on((e) => e.kind === "hold" && duringLease.push(`${e.tenant} ${e.detail}`));
  const doc = await status(t.ollamaUrl);
  expect(doc.lease).toMatchObject({ id: lease.id, holder: "benchmark" });

  // Held off: a chat and an image job wait.
  const c = chat(t);
  const p = newPromptId();
  const img = submit(t, promptBody(p));
  await until(() => t.lock.snapshot().llmWaiting === 1 && t.lock.snapshot().imageWaiting === 1, "chat and image waiting");
  expect(s.gpu.active()).toEqual([]);

  off();
  expect(duringLease).toEqual([]);
  const back = await fetch(`${t.ollamaUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" });
  expect(back.status).toBe(200);
  expect((await img).status).toBe(200);
  expect((await c).status).toBe(200);
  await t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
  expect((await status(t.ollamaUrl)).lease).toBeNull();
});

test("during a lease in reject mode a chat is refused in its dialect, naming the lease", async () => {
  s = await startStack({ env: { LLM_BUSY_MODE: "reject" } });
  const res = await takeLease(s.t.ollamaUrl, { holder: "game" });
  expect(res.status).toBe(200);
  const busy = await chat(s.t);
  expect(busy.status).toBe(503);
  expect((await busy.json()).error).toContain("GPU lease");
});

test("a lease whose renewals stop ends at its TTL; renewing keeps it; a ttl above LEASE_MAX_TTL is refused", async () => {
  s = await startStack({ env: { LEASE_MAX_TTL: "10m" } });
  const { t } = s;
  const tooLong = await takeLease(t.ollamaUrl, { ttl: "11m" });
  expect(tooLong.status).toBe(400);
  expect((await tooLong.json()).error).toContain("LEASE_MAX_TTL");

  const res = await takeLease(t.ollamaUrl, { holder: "trainer", ttl: "300ms" });
  const { id } = (await res.json()) as { id: string };
  const renewed = await fetch(`${t.ollamaUrl}/turnstile/lease/${id}/renew`, { method: "POST" });
  expect(renewed.status).toBe(200);
  expect(t.lock.state).toBe("lease");
  // No more renewals: it ends by itself and the GPU is free again.
  await until(() => t.lock.state === "idle", "the lease expired", 5000);
  expect(warnLines(t, "expired")).toHaveLength(1);
  const gone = await fetch(`${t.ollamaUrl}/turnstile/lease/${id}/renew`, { method: "POST" });
  expect(gone.status).toBe(404);
  expect((await chat(t)).status).toBe(200);
});

test("a force-release while the card is being emptied for a lease ends that lease before it is granted", async () => {
  s = await startStack({ ollama: { unloadMs: 600 } });
  const { t } = s;
  expect((await chat(t)).status).toBe(200);
  const asked = takeLease(t.ollamaUrl, { holder: "late" });
  await until(() => t.lock.state === "lease", "the lease emptying the card");
  const r = await release(t.ollamaUrl);
  expect(r.status).toBe(200);
  const res = await asked;
  expect(res.status).toBe(409);
  expect((await res.json()).error).toContain("force-released");
  expect(t.lock.state).toBe("idle");
  expect((await status(t.ollamaUrl)).lease).toBeNull();
});

test("all-interfaces listener: a DNS-rebinding page (loopback, foreign Host) can neither lease nor release, and sees no addresses", async () => {
  s = await startStack({ env: { LISTEN_OLLAMA: "0.0.0.0:0" } });
  const base = `http://127.0.0.1:${new URL(s.t.ollamaUrl).port}`;
  const rebound = { host: `evil.example:${new URL(s.t.ollamaUrl).port}` };
  const lease = await fetch(`${base}/turnstile/lease`, { method: "POST", headers: { ...rebound, "content-type": "application/json" }, body: '{"ttl":"12h"}' });
  expect(lease.status).toBe(403);
  expect((await release(base, rebound)).status).toBe(403);
  expect(s.t.lock.state).toBe("idle");
  const doc = (await (await fetch(`${base}/turnstile/status`, { headers: rebound })).json()) as StatusDoc & { can_steer: boolean };
  expect(doc.can_steer).toBe(false);
  // The same machine under its own name still steers.
  expect((await release(base)).status).toBe(200);
});
