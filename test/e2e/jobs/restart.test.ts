/**
 * A fresh start picks up what the card is doing (SPEC "Restarts"), against the simulators: jobs
 * ComfyUI runs or has queued keep the GPU in `image` from the very first answer until they end
 * and ComfyUI is freed; a checkpoint left loaded is freed before the first chat; a ComfyUI that
 * is not running is said (one too slow to answer: start-read.test.ts); a GPU lease outlives a restart until its TTL. The ledger shows no
 * moment both tenants held memory.
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { leaseCommand } from "../../../src/cli/lease.ts";
import type { ComfySim } from "../../../src/sim/index.ts";
import { LeaseFile } from "../../../src/status/lease-file.ts";
import type { StatusDoc } from "../../../src/status/model.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { callsTo, chat, newPromptId, postJson, promptBody, type Stack, startStack, until, waitFor } from "./helpers.ts";

let s: Stack | undefined;
let extra: TestTurnstile | undefined;
let stateDir: string;
beforeEach(() => {
  stateDir = mkdtempSync(join(tmpdir(), "turnstile-state-"));
});
afterEach(async () => {
  await extra?.close();
  await s?.stop();
  s = extra = undefined;
  rmSync(stateDir, { recursive: true, force: true });
});

/** A job sent straight to ComfyUI, as the killed turnstile had forwarded it. */
async function queueDirect(comfy: ComfySim, jobMs: number): Promise<string> {
  const id = newPromptId();
  const res = await postJson(`${comfy.url}/prompt`, promptBody(id, { sim_job_ms: jobMs }));
  expect(res.status).toBe(200);
  await res.text();
  return id;
}

const statusOf = async (base: string) => (await (await fetch(`${base}/turnstile/status`)).json()) as StatusDoc;
const noticeLines = (t: TestTurnstile, match: string) => t.logLines.filter((l) => l.includes(match));

test("a start while ComfyUI runs a job and has another queued: image from the first answer, chats wait for both and the /free", async () => {
  const ids: string[] = [];
  s = await startStack({
    env: { LOGLEVEL: "warn" },
    beforeStart: async ({ comfy }) => {
      ids.push(await queueDirect(comfy!, 300), await queueDirect(comfy!, 100));
      await waitFor(() => comfy!.runningJob(), "ComfyUI running the first job");
    },
  });
  // probed resolved after the start decided: the very first answers already say image.
  expect(((await (await fetch(`${s.t.ollamaUrl}/healthz`)).json()) as { state: string }).state).toBe("image");
  const st = await statusOf(s.t.comfyUrl);
  expect(st.state).toBe("image");
  // One line at the default level names the jobs picked up.
  const line = noticeLines(s.t, "picked up 2 ComfyUI job(s)");
  expect(line).toHaveLength(1);
  expect(line[0]).toContain(`${ids[0]},${ids[1]}`);

  const res = await chat(s.t);
  expect(res.status).toBe(200);
  await res.text();
  const jobs = s.comfy!.jobs();
  expect(jobs.map((j) => j.state)).toEqual(["done", "done"]);
  // Ollama was loaded only after both jobs ended and ComfyUI's memory was back.
  const chatAt = callsTo(s.ollama!.calls, "/api/chat")[0]!.at;
  const freeAt = callsTo(s.comfy!.calls, "/free")[0]!.at;
  expect(freeAt).toBeGreaterThanOrEqual(Math.max(...jobs.map((j) => j.endedAt!)));
  expect(chatAt).toBeGreaterThan(freeAt);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
  expect(s.gpu.ledger.filter((h) => h.tenant === "ollama")).toHaveLength(1);
});

test("a start while ComfyUI has a job only pending picks it up too", async () => {
  let pendingId = "";
  s = await startStack({
    beforeStart: async ({ comfy }) => {
      await queueDirect(comfy!, 150);
      pendingId = await queueDirect(comfy!, 150);
      // The start's read sees only the pending one (the running one ended as it was read).
      const off = comfy!.override("GET", "/api/jobs", () => {
        off();
        return Response.json({ jobs: [{ id: pendingId, status: "pending" }] });
      });
    },
  });
  expect(s.t.lock.state).toBe("image");
  expect(noticeLines(s.t, "picked up 1 ComfyUI job(s)")[0]).toContain(pendingId);
  const res = await chat(s.t);
  expect(res.status).toBe(200);
  await res.text();
  expect(s.comfy!.jobs().find((j) => j.id === pendingId)?.state).toBe("done");
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("an older ComfyUI without the jobs API: its /queue is read instead", async () => {
  let id = "";
  s = await startStack({
    comfy: { legacy: true },
    beforeStart: async ({ comfy }) => {
      id = await queueDirect(comfy!, 200);
      await waitFor(() => comfy!.runningJob(), "ComfyUI running the job");
    },
  });
  expect(s.t.lock.state).toBe("image");
  expect(noticeLines(s.t, "picked up 1 ComfyUI job(s)")[0]).toContain(id);
  const res = await chat(s.t);
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("ComfyUI holding its checkpoint with an empty queue at start is freed before the first chat", async () => {
  s = await startStack({
    env: { LOGLEVEL: "warn" },
    beforeStart: async ({ comfy, gpu }) => {
      const id = await queueDirect(comfy!, 20);
      await waitFor(() => comfy!.jobs().find((j) => j.id === id)?.state === "done", "the job done, its checkpoint still loaded");
      expect(gpu.holding("comfy")).toBe(true);
    },
  });
  expect(noticeLines(s.t, "ComfyUI holds memory with an empty queue at start")).toHaveLength(1);
  const res = await chat(s.t);
  expect(res.status).toBe(200);
  await res.text();
  await s.t.settled();
  expect(noticeLines(s.t, "ComfyUI memory held at start is released")).toHaveLength(1);
  // The chat's model loaded only after ComfyUI's hold had ended.
  expect(s.gpu.overlaps()).toEqual([]);
  expect(s.gpu.ledger.find((h) => h.tenant === "comfy")!.end).not.toBeNull();
});

test("ComfyUI not running at start: a line says so, and the start goes on idle", async () => {
  s = await startStack({ env: { LOGLEVEL: "warn" }, beforeStart: ({ comfy }) => comfy!.crash() });
  expect(noticeLines(s.t, "ComfyUI is not running at start")).toHaveLength(1);
  expect(s.t.lock.state).toBe("idle");
  const res = await chat(s.t);
  expect(res.status).toBe(200);
  await res.text();
});

test("a lease outlives a restart: taken again with its id before anything else, the card emptied again, renewed and given back by its id", async () => {
  s = await startStack({ env: { STATE_DIR: stateDir, LOGLEVEL: "warn" } });
  const lease = (await (await postJson(`${s.t.comfyUrl}/turnstile/lease`, { holder: "train.py", ttl: "1m" })).json()) as { id: string };
  await s.t.close();
  // Meanwhile, with no turnstile in front, something loads a model beside the lease's holder.
  await (await postJson(`${s.ollama!.url}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false })).text();
  expect(s.ollama!.loadedModels()).toHaveLength(1);

  const t = (extra = startTestTurnstile({ OLLAMA_URL: s.ollama!.url, COMFY_URL: s.comfy!.url, STATE_DIR: stateDir, LOGLEVEL: "warn" }));
  await t.probed;
  expect(t.lock.state).toBe("lease");
  expect((await statusOf(t.ollamaUrl)).lease).toMatchObject({ id: lease.id, holder: "train.py" });
  expect(t.logLines.filter((l) => l.includes('GPU lease of "train.py" taken again after a restart'))).toHaveLength(1);
  await until(() => s!.ollama!.loadedModels().length === 0, "Ollama emptied again for the lease");

  const renewed = await fetch(`${t.ollamaUrl}/turnstile/lease/${lease.id}/renew`, { method: "POST" });
  expect(renewed.status).toBe(200);
  expect((await fetch(`${t.ollamaUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" })).status).toBe(200);
  expect(t.lock.state).toBe("idle");
  // Given back: nothing is kept for the next start.
  expect(readdirSync(stateDir)).toEqual([]);
});

test("a lease kept past its TTL is dropped at start, with a line", async () => {
  const guarded = { ollamaUrl: "", comfyUrl: "" };
  s = await startStack({ env: { STATE_DIR: stateDir, LOGLEVEL: "warn" } });
  Object.assign(guarded, { ollamaUrl: s.t.config.ollamaUrl, comfyUrl: s.t.config.comfyUrl });
  await s.t.close();
  const file = new LeaseFile(stateDir, guarded, { warn: () => {} });
  file.save({ id: "old", holder: "train.py", by: "127.0.0.1", since: Date.now() - 120_000, expires_at: Date.now() - 60_000, ttl_ms: 60_000 });

  const t = (extra = startTestTurnstile({ OLLAMA_URL: s.ollama!.url, COMFY_URL: s.comfy!.url, STATE_DIR: stateDir, LOGLEVEL: "warn" }));
  await t.probed;
  expect(t.lock.state).toBe("idle");
  expect(t.logLines.filter((l) => l.includes('GPU lease of "train.py" expired while gpu-turnstile was down: dropped'))).toHaveLength(1);
  expect(file.load()).toBeNull();
});

test("gpu-turnstile lease -- cmd keeps renewing the same lease across a restart of the turnstile", async () => {
  s = await startStack({ env: { STATE_DIR: stateDir, LOGLEVEL: "warn" } });
  const port = s.t.listener("ollama")!.port;
  const base = s.t.ollamaUrl;
  const said: string[] = [];
  // The command runs until the test lets it go: it waits for a file.
  const go = join(stateDir, "go");
  const running = leaseCommand({
    url: base,
    ttl: "600ms",
    holder: "train.py",
    command: ["sh", "-c", `while [ ! -e '${go}' ]; do sleep 0.02; done`],
    err: (t) => said.push(t),
  });
  try {
    const id = (await waitFor(async () => (await statusOf(base)).lease, "the lease granted")).id;
    await s.t.close();
    // Down for longer than a renewal period (200 ms), then back on the same port.
    await until(() => said.some((l) => l.includes("does not answer")), "a renewal that found no turnstile", 3000);
    const t = (extra = startTestTurnstile({
      OLLAMA_URL: s.ollama!.url,
      COMFY_URL: s.comfy!.url,
      STATE_DIR: stateDir,
      LOGLEVEL: "warn",
      LISTEN_OLLAMA: `127.0.0.1:${port}`,
    }));
    await t.probed;
    const kept = (await statusOf(base)).lease!;
    expect(kept.id).toBe(id);
    await until(() => said.some((l) => l.includes("answers again")), "a renewal after the restart", 3000);
    // Past the expiry it was taken again with: only renewals by its id keep it.
    const keptUntil = Date.parse(kept.expires_at);
    await until(() => Date.now() > keptUntil + 100, "the kept expiry passed", 3000);
    expect((await statusOf(base)).lease?.id).toBe(id);
  } finally {
    // Whatever failed above, the command ends and the lease is given back.
    writeFileSync(go, "");
    await running;
  }
  expect(await running).toBe(0);
  expect(extra!.lock.state).toBe("idle");
  expect(said.join("")).not.toContain("the lease has ended");
});

test("a job picked up at start and then force-released ends as interrupted, like one of the turnstile's own", async () => {
  let id = "";
  s = await startStack({
    env: { HISTORY_POLL_INTERVAL: "30ms", JOB_TIMEOUT: "60s" },
    beforeStart: async ({ comfy }) => {
      id = await queueDirect(comfy!, 30_000);
      await waitFor(() => comfy!.runningJob(), "ComfyUI running the job");
    },
  });
  expect(s.t.lock.state).toBe("image");
  const r = await fetch(`${s.t.comfyUrl}/turnstile/release`, { method: "POST" });
  expect(await r.json()).toMatchObject({ jobs_interrupted: [id] });
  await s.t.settled();
  expect(s.t.status.snapshot(false).recent.map((j) => [j.prompt_id, j.outcome])).toEqual([[id, "interrupted"]]);
  expect(s.gpu.overlaps()).toEqual([]);
});

test("jobs picked up at start are in ComfyUI's own queue already: the queue view through the turnstile adds no waiting entry for them", async () => {
  const ids: string[] = [];
  s = await startStack({
    beforeStart: async ({ comfy }) => {
      ids.push(await queueDirect(comfy!, 2_000), await queueDirect(comfy!, 100));
      await waitFor(() => comfy!.runningJob(), "ComfyUI running the first job");
    },
  });
  expect(s.t.lock.state).toBe("image");
  const q = (await (await fetch(`${s.t.comfyUrl}/queue`)).json()) as { queue_running: unknown[][]; queue_pending: unknown[][] };
  expect([...q.queue_running, ...q.queue_pending].map((i) => i[1])).toEqual(ids);
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});
