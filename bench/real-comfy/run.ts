/**
 * The turnstile against a REAL ComfyUI server (issue 27 point 5), not our fakes: the scenarios
 * that found the defects of issue 27, replayed, with a table of what was seen. Not part of
 * `npm test`; README.md (this folder) says how to start ComfyUI and run this.
 *
 *   COMFY_URL=http://127.0.0.1:8190 npx bun bench/real-comfy/run.ts
 *
 * The turnstile runs as its own process (`bun src/main.ts`, so it can be killed with -9). Ollama
 * is the simulator (src/sim), in this process: its ledger says when a chat model held memory,
 * and ComfyUI's /history says when each job ran; no moment may have both.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SimGpu } from "../../src/sim/gpu.ts";
import { startOllamaSim } from "../../src/sim/ollama.ts";
import type { StatusDoc } from "../../src/status/model.ts";
import { startMain, type MainProcess } from "../../test/support/main-process.ts";

const COMFY = (process.env.COMFY_URL ?? "").replace(/\/+$/, "");
if (!COMFY) {
  console.error("set COMFY_URL to a real ComfyUI server (see bench/real-comfy/README.md)");
  process.exit(2);
}
/** FREE_TIMEOUT for the turnstile, short: on CPU ComfyUI's memory figure never drops (api-facts R1), and a build without issue 27 point 1 waits it out on every release. */
const FREE_TIMEOUT = process.env.REAL_COMFY_FREE_TIMEOUT ?? "3s";

// ---------------------------------------------------------------- helpers

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it gives a value, or throws naming `what` after `ms`. */
async function until<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, what: string, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url);
  return (await res.json()) as T;
}

function post(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

let color = Math.floor(Math.random() * 0xffff) * 64;
/**
 * The model-free workflow of ../shared/tools/real-comfy/workflows/mkwf.py: EmptyImage → blur /
 * sharpen × passes → SaveImage; about 0.6 s a pass at 1024² on 2 cores. A new colour each time:
 * ComfyUI caches node outputs, and an identical prompt would end at once.
 */
function workflow(passes: number, size = 1024): Record<string, unknown> {
  const p: Record<string, unknown> = { "1": { class_type: "EmptyImage", inputs: { width: size, height: size, batch_size: 1, color: color++ } } };
  let prev = "1";
  for (let i = 0; i < passes; i++) {
    const id = String(10 + i);
    p[id] =
      i % 2 === 0
        ? { class_type: "ImageBlur", inputs: { image: [prev, 0], blur_radius: 6, sigma: 3.0 } }
        : { class_type: "ImageSharpen", inputs: { image: [prev, 0], sharpen_radius: 6, sigma: 3.0, alpha: 1.0 } };
    prev = id;
  }
  p["9"] = { class_type: "SaveImage", inputs: { images: [prev, 0], filename_prefix: "real-comfy" } };
  return p;
}

interface QueueDoc {
  queue_running: [number, string, ...unknown[]][];
  queue_pending: [number, string, ...unknown[]][];
}
type HistoryEntry = { status?: { status_str?: string; messages?: [string, { timestamp?: number }][] } };

const realQueue = () => getJson<QueueDoc>(`${COMFY}/queue`);
const realHistory = async (id: string) => (await getJson<Record<string, HistoryEntry>>(`${COMFY}/history/${id}`))[id];
const isRunning = async (id: string) => (await realQueue()).queue_running.some((i) => i[1] === id);
const isPending = async (id: string) => (await realQueue()).queue_pending.some((i) => i[1] === id);

/** When ComfyUI ran a job (epoch ms), from its history messages. */
function ranBetween(h: HistoryEntry | undefined): { start?: number; end?: number; how?: string } {
  const m = h?.status?.messages ?? [];
  const start = m.find(([e]) => e === "execution_start")?.[1].timestamp;
  const last = m.at(-1);
  return { start, end: last?.[1].timestamp, how: h?.status?.status_str };
}

// ---------------------------------------------------------------- the stack

const gpu = new SimGpu();
const ollama = await startOllamaSim({ gpu, loadMs: 300, unloadMs: 100, tokenDelayMs: 5, tokens: 20 });
const cwd = mkdtempSync(join(tmpdir(), "real-comfy-bench-"));
const env = {
  OLLAMA_URL: ollama.url,
  COMFY_URL: COMFY,
  LISTEN_OLLAMA: "127.0.0.1:0",
  LISTEN_COMFY: "127.0.0.1:0",
  FREE_TIMEOUT,
  STATE_DIR: join(cwd, "state"),
  SHUTDOWN_TIMEOUT: "2s",
};
let proc: MainProcess = await startMain(cwd, env);
const comfyBase = () => proc.url("comfy");
const ollamaBase = () => proc.url("ollama");
const status = () => getJson<StatusDoc>(`${comfyBase()}/turnstile/status`);
/** A chat through the turnstile; `tokens` at 5 ms each says how long it holds the GPU. */
const chat = (tokens = 20) => post(`${ollamaBase()}/api/chat`, { model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }], options: { num_predict: tokens } });
/** The highest number ComfyUI has given (its history and queue), to check held jobs are numbered above it. */
async function comfyTopNumber(): Promise<number> {
  const history = await getJson<Record<string, { prompt?: [number] }>>(`${COMFY}/history`);
  const q = await realQueue();
  const numbers = [...Object.values(history).map((h) => h.prompt?.[0] ?? -1), ...q.queue_running.map((i) => i[0]), ...q.queue_pending.map((i) => i[0])];
  return Math.max(-1, ...numbers);
}

async function submit(passes: number, extra: Record<string, unknown> = {}): Promise<string> {
  const id = crypto.randomUUID();
  const res = await post(`${comfyBase()}/prompt`, { prompt: workflow(passes), prompt_id: id, client_id: "real-comfy-bench", ...extra });
  const body = (await res.json()) as { prompt_id?: string; number?: number };
  if (res.status !== 200 || body.prompt_id !== id) throw new Error(`/prompt answered ${res.status} ${JSON.stringify(body)}`);
  return id;
}

/** The turnstile's verdict on a job (status `recent`), once it has one. */
const outcome = (id: string, ms = 120_000) =>
  until(async () => (await status()).recent.find((j) => j.prompt_id === id), `the turnstile's outcome for ${id}`, ms);
const idle = () => until(async () => (await status()).state === "idle" || undefined, "the GPU idle", 120_000);

// ---------------------------------------------------------------- scenarios

interface Row {
  scenario: string;
  expected: string;
  seen: string;
  ok: boolean;
}
const rows: Row[] = [];
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** REAL_COMFY_ONLY=<words>: only the scenarios whose name has one of them (the overlap check always runs). */
const only = (process.env.REAL_COMFY_ONLY ?? "").split(",").filter(Boolean);

async function scenario(name: string, expected: string, run: () => Promise<{ seen: string; ok: boolean }>): Promise<void> {
  if (only.length > 0 && name !== "no overlap" && !only.some((w) => name.includes(w))) return;
  const t0 = Date.now();
  try {
    const r = await run();
    rows.push({ scenario: name, expected, ...r });
  } catch (err) {
    rows.push({ scenario: name, expected, seen: `ERROR: ${err instanceof Error ? err.message : String(err)}`, ok: false });
  }
  console.error(`  ${name}: ${rows.at(-1)!.ok ? "ok" : "NOT OK"} (${s(Date.now() - t0)})`);
  // What the turnstile said meanwhile, for the one who reads why.
  if (!rows.at(-1)!.ok) console.error(proc.stderr().split("\n").slice(-25).join("\n"));
  await idle().catch(() => {});
}

await scenario("a job with a chat waiting", "job completed; the chat loads its model only after the job's end", async () => {
  const id = await submit(4);
  await until(() => isRunning(id), "the job running");
  const res = await chat();
  const answered = Date.now();
  await res.text();
  const o = await outcome(id);
  const ran = ranBetween(await realHistory(id));
  const load = gpu.ledger.filter((h) => h.tenant === "ollama").at(-1)!;
  return {
    seen: `${o.outcome}; job ran ${s(ran.end! - ran.start!)}; chat model loaded ${s(load.start - ran.end!)} after its end, answered ${s(answered - ran.end!)} after`,
    ok: o.outcome === "completed" && res.status === 200 && load.start > ran.end!,
  };
});

await scenario("an interrupt through the turnstile", "cancelled; the GPU idle soon after ComfyUI stops the job", async () => {
  const id = await submit(8);
  await until(() => isRunning(id), "the job running");
  const t0 = Date.now();
  await (await post(`${comfyBase()}/interrupt`, {})).text();
  const o = await outcome(id);
  const ran = ranBetween(await realHistory(id));
  return { seen: `${o.outcome}; ComfyUI: ${ran.how} ${s(ran.end! - t0)} after /interrupt; GPU held ${s(o.held_ms)}`, ok: o.outcome === "cancelled" };
});

for (const [name, body] of [
  ["a delete of a pending job", (id: string) => ({ delete: [id] })],
  ["a clear of a pending job", () => ({ clear: true })],
] as const) {
  await scenario(name, "the pending job: cancelled (not lost), no history; the running one goes on", async () => {
    const running = await submit(8);
    await until(() => isRunning(running), "the first job running");
    const pending = await submit(2);
    await until(() => isPending(pending), "the second job pending in ComfyUI");
    await (await post(`${comfyBase()}/queue`, body(pending))).text();
    const o = await outcome(pending);
    const history = await realHistory(pending);
    const stillRuns = await isRunning(running);
    await (await post(`${comfyBase()}/interrupt`, { prompt_id: running })).text();
    const first = await outcome(running);
    return {
      seen: `pending: ${o.outcome}, history ${history ? "written" : "none"}; running one ${stillRuns ? "still ran" : "stopped"} (then interrupted: ${first.outcome})`,
      ok: o.outcome === "cancelled" && !history && stillRuns,
    };
  });
}

await scenario("a held job in /queue", "its prompt_id, workflow and a number above ComfyUI's; a delete answers its /prompt at once, never sent", async () => {
  // A long chat holds the GPU while the jobs are held (a build without issue 27 point 1 cannot take a lease on CPU).
  const long = chat(2000);
  await until(async () => (await status()).state === "llm" || undefined, "the chat holding the GPU");
  const deleted = crypto.randomUUID();
  const kept = crypto.randomUUID();
  const wfDeleted = workflow(1);
  const first = post(`${comfyBase()}/prompt`, { prompt: wfDeleted, prompt_id: deleted, client_id: "real-comfy-bench" });
  const heldIn = async (id: string) => (await getJson<QueueDoc>(`${comfyBase()}/queue`)).queue_pending.some((i) => i[1] === id) || undefined;
  await until(() => heldIn(deleted), "the first job held, in /queue");
  const second = post(`${comfyBase()}/prompt`, { prompt: workflow(1), prompt_id: kept, client_id: "real-comfy-bench" });
  await until(() => heldIn(kept), "the second job held, in /queue");
  const topNumber = await comfyTopNumber();
  const q = await getJson<QueueDoc>(`${comfyBase()}/queue`);
  const items = q.queue_pending.filter((i) => i[1] === deleted || i[1] === kept);
  const shown = items.length === 2 && items.every((i) => i[0] > topNumber) && JSON.stringify(items[0]![2]) === JSON.stringify(wfDeleted);
  const opened = JSON.stringify(await getJson(`${comfyBase()}/history/${deleted}`)) === "{}";
  const t0 = Date.now();
  await (await post(`${comfyBase()}/queue`, { delete: [deleted] })).text();
  const answer = await first;
  const answeredMs = Date.now() - t0;
  const err = (await answer.json()) as { error?: { type?: string } };
  const chatStillHeld = (await status()).state === "llm";
  await (await long).text();
  const second200 = (await second).status;
  const o = await outcome(kept);
  const neverSent = !(await realHistory(deleted)) && !(await isPending(deleted));
  return {
    seen: `numbers ${items.map((i) => i[0]).join(",")} (ComfyUI's top ${topNumber}), workflow ${shown ? "shown" : "NOT shown"}, /history {} ${opened}; delete → /prompt ${answer.status} ${err.error?.type} in ${answeredMs} ms${chatStillHeld ? " (chat still on the GPU)" : ""}; never sent: ${neverSent}; the other: ${second200} ${o.outcome}`,
    ok: shown && opened && chatStillHeld && answer.status === 400 && err.error?.type === "prompt_deleted" && neverSent && o.outcome === "completed",
  };
});

await scenario("adoption at start", "image from the first answer; the job followed to its end; a chat waits for it", async () => {
  await proc.kill("SIGTERM");
  // Sent straight to ComfyUI while no turnstile runs: this turnstile never saw it start.
  const id = crypto.randomUUID();
  await (await post(`${COMFY}/prompt`, { prompt: workflow(8), prompt_id: id })).text();
  await until(() => isRunning(id), "the job running");
  const t0 = Date.now();
  proc = await startMain(cwd, env);
  const first = (await getJson<{ state: string }>(`${ollamaBase()}/healthz`)).state;
  // The status names the job once Ollama is emptied for it (before, it is the session's opener).
  const running = await until(async () => (await status()).image.running?.prompt_id === id ? (await status()).image.running! : undefined, "the adopted job in the status");
  const sinceStart = Date.now() - t0;
  const res = await chat();
  await res.text();
  const o = await outcome(id);
  const ran = ranBetween(await realHistory(id));
  const load = gpu.ledger.filter((h) => h.tenant === "ollama").at(-1)!;
  return {
    seen: `first answer: ${first}; running ${running?.prompt_id === id ? "is the job" : "NOT the job"} (number ${running?.number}, age ${s(running?.age_ms ?? 0)} at ${s(sinceStart)} after start: v0.3.64 has no execution_start_time); ${o.outcome}; chat model loaded ${s(load.start - ran.end!)} after its end`,
    ok: first === "image" && running?.prompt_id === id && o.outcome === "completed" && load.start > ran.end!,
  };
});

await scenario("kill -9 mid-job", "picked up again; its age counts from ComfyUI's start (STATE_DIR); completed", async () => {
  const id = await submit(8);
  await until(async () => (await status()).image.running?.running_since, "the job seen running");
  await sleep(1500);
  await proc.kill("SIGKILL");
  proc = await startMain(cwd, env);
  const first = (await getJson<{ state: string }>(`${ollamaBase()}/healthz`)).state;
  const running = await until(async () => (await status()).image.running?.prompt_id === id ? (await status()).image.running! : undefined, "the adopted job in the status");
  const o = await outcome(id);
  const ran = ranBetween(await realHistory(id));
  const skew = (running?.running_since ?? 0) - ran.start!;
  return {
    seen: `first answer: ${first}; age after restart ${s(running?.age_ms ?? 0)}, start ${skew >= 0 ? "+" : ""}${skew} ms from ComfyUI's execution_start; ${o.outcome}`,
    ok: first === "image" && running?.prompt_id === id && Math.abs(skew) < 1500 && o.outcome === "completed",
  };
});

// ---------------------------------------------------------------- the GPU invariant

await scenario("no overlap", "no chat model held memory while ComfyUI ran a job", async () => {
  const all = await getJson<Record<string, HistoryEntry>>(`${COMFY}/history`);
  const runs = Object.values(all)
    .map(ranBetween)
    .filter((r) => r.start !== undefined && r.end !== undefined);
  const chats = gpu.ledger.filter((h) => h.tenant === "ollama");
  const overlaps = chats.filter((h) => runs.some((r) => h.start < r.end! && (h.end ?? Date.now()) > r.start!));
  return { seen: `${runs.length} ComfyUI runs, ${chats.length} chat model loads, ${overlaps.length} overlapping`, ok: overlaps.length === 0 };
});

await proc.kill("SIGTERM");
await ollama.stop();
rmSync(cwd, { recursive: true, force: true });

const version = (await getJson<{ system?: { comfyui_version?: string } }>(`${COMFY}/system_stats`)).system?.comfyui_version;
console.log(`real ComfyUI ${version} at ${COMFY}, FREE_TIMEOUT ${FREE_TIMEOUT}, Ollama simulated\n`);
console.log("| scenario | expected | seen | ok |");
console.log("|---|---|---|---|");
for (const r of rows) console.log(`| ${r.scenario} | ${r.expected} | ${r.seen} | ${r.ok ? "yes" : "**no**"} |`);
process.exit(rows.every((r) => r.ok) ? 0 : 1);
