/**
 * Seeded chaos: one simulated GPU shared by both simulators, the turnstile in front, and a random
 * mix of concurrent chats (streamed and not), embeddings, OpenAI SSE, image jobs (some failing in
 * ComfyUI), ComfyUI 400s and client aborts at random moments. Whatever the interleaving:
 *
 * - the GPU ledger shows no moment where Ollama and ComfyUI both held memory;
 * - every prompt ComfyUI accepted reached it exactly once, and every 200 the client saw is one;
 * - the turnstile ends idle, nothing in flight, nothing pending, every job reported once;
 * - an abuser beside the traffic (zstd bodies inflating to megabytes, a bomb, a cut frame, idle connections, /ws
 *   clients that never read) leaves /healthz answering throughout and every body answered;
 * - and, so the ledger check is known to be able to fail, the same workload sent straight at the
 *   simulators does overlap.
 *
 * And a restart storm: the turnstile, a real process, killed (`kill -9` or SIGTERM) and started
 * again at random moments while the same kind of traffic runs; whatever it was doing when it died,
 * the next process picks up what the card is doing.
 *
 * Reproduce a failure with CHAOS_SEED=<seed printed in the failure> (CHAOS_OPS to resize).
 */
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SimGpu, startComfySim, startOllamaSim, type ComfySim, type OllamaSim } from "../../../src/sim/index.ts";
import { mulberry32 } from "../../support/prng.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { freePort } from "../../support/dead-port.ts";
import { type MainProcess, startMain } from "../../support/main-process.ts";
import { abuse, abuseBodies } from "./abuse-actor.ts";
import { jobCounts, newPromptId, promptBody, type Stack, startStack, total, until } from "./helpers.ts";

const SEED = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const OPS = Number(process.env.CHAOS_OPS ?? 2000);
const CONCURRENCY = 24;

const prng = mulberry32;

type Kind = "chat" | "chat_stream" | "generate_stream" | "embed" | "openai_sse" | "tags" | "image" | "image_fail" | "image_400";

const MIX: [Kind, number][] = [
  ["chat", 20],
  ["chat_stream", 20],
  ["generate_stream", 10],
  ["embed", 12],
  ["openai_sse", 15],
  ["tags", 8],
  // Image jobs serialise the GPU (tens of ms each): their share sets the run time.
  ["image", 6],
  ["image_fail", 2],
  ["image_400", 4],
];

interface Op {
  kind: Kind;
  /** ms after which the client aborts, or undefined to let it finish. */
  abortAfter: number | undefined;
  model: string;
  promptId: string;
  jobMs: number;
}

interface OpResult {
  op: Op;
  status?: number;
  body?: string;
  aborted: boolean;
  error?: string;
}

function plan(seed: number, n: number): Op[] {
  const rand = prng(seed);
  const weightSum = MIX.reduce((a, [, w]) => a + w, 0);
  const pick = (): Kind => {
    let r = rand() * weightSum;
    for (const [k, w] of MIX) if ((r -= w) < 0) return k;
    return "chat";
  };
  return Array.from({ length: n }, () => {
    const kind = pick();
    return {
      kind,
      abortAfter: rand() < 0.12 ? Math.floor(rand() * 25) : undefined,
      model: rand() < 0.6 ? "llama3.2" : "qwen2.5:7b",
      promptId: newPromptId(),
      jobMs: 5 + Math.floor(rand() * 16),
    };
  });
}

/** The simulator sleeps once per sampler step; 20 sub-millisecond sleeps would each round up to a timer tick. */
function fewSteps(p: Record<string, unknown>): void {
  (p["3"] as { inputs: { steps: number } }).inputs.steps = 2;
}

/** Three clients of different classes (issue 30): each sends its key, and its ComfyUI client_id. */
const CLIENTS = [
  { name: "alice", cls: "interactive", key: "sk-chaos-alice-0123456789" },
  { name: "bob", cls: "normal", key: "sk-chaos-bob-0123456789" },
  { name: "night", cls: "batch", key: "sk-chaos-night-0123456789" },
] as const;
const CLIENTS_TEXT = CLIENTS.map((c) => `${c.name} ${c.cls} key=${c.key} client_id=${c.name}-`).join("\n");

function request(op: Op, ollama: string, comfy: string, who?: (typeof CLIENTS)[number]): { url: string; init: RequestInit } {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (who) headers.authorization = `Bearer ${who.key}`;
  const post = (url: string, body: unknown): { url: string; init: RequestInit } => {
    let text = typeof body === "string" ? body : JSON.stringify(body);
    if (who && url.startsWith(comfy)) text = JSON.stringify({ ...JSON.parse(text), client_id: `${who.name}-${op.promptId.slice(0, 8)}` });
    return { url, init: { method: "POST", headers, body: text } };
  };
  const messages = [{ role: "user", content: "why is the sky blue?" }];
  switch (op.kind) {
    case "chat":
      return post(`${ollama}/api/chat`, { model: op.model, messages, stream: false });
    case "chat_stream":
      return post(`${ollama}/api/chat`, { model: op.model, messages });
    case "generate_stream":
      return post(`${ollama}/api/generate`, { model: op.model, prompt: "why is the sky blue?" });
    case "embed":
      return post(`${ollama}/api/embed`, { model: "nomic-embed-text", input: ["a", "b"] });
    case "openai_sse":
      return post(`${ollama}/v1/chat/completions`, { model: op.model, messages, stream: true });
    case "tags":
      return { url: `${ollama}/api/tags`, init: { headers } };
    case "image":
      return post(`${comfy}/prompt`, promptBody(op.promptId, { sim_job_ms: op.jobMs }, fewSteps));
    case "image_fail":
      return post(`${comfy}/api/prompt`, promptBody(op.promptId, { sim_job_ms: op.jobMs, sim_fail: true }, fewSteps));
    case "image_400":
      return post(
        `${comfy}/prompt`,
        promptBody(op.promptId, {}, (p) => ((p["3"] as { class_type: string }).class_type = "NoSuchSampler")),
      );
  }
}

async function runOne(op: Op, ollama: string, comfy: string, who?: (typeof CLIENTS)[number]): Promise<OpResult> {
  const { url, init } = request(op, ollama, comfy, who);
  const ac = new AbortController();
  const timer = op.abortAfter === undefined ? undefined : setTimeout(() => ac.abort(), op.abortAfter);
  try {
    const res = await fetch(url, { ...init, signal: ac.signal });
    const body = await res.text();
    return { op, status: res.status, body, aborted: false };
  } catch (err) {
    if (ac.signal.aborted) return { op, aborted: true };
    return { op, aborted: false, error: err instanceof Error ? err.message : String(err) };
  } finally {
    clearTimeout(timer);
  }
}

/** `clients`: op i comes from CLIENTS[i % 3]; otherwise every op is anonymous (one address). */
async function runWorkload(ops: Op[], ollama: string, comfy: string, clients = false): Promise<OpResult[]> {
  const results: OpResult[] = [];
  let next = 0;
  const worker = async () => {
    while (next < ops.length) {
      const i = next++;
      results.push(await runOne(ops[i]!, ollama, comfy, clients ? CLIENTS[i % CLIENTS.length] : undefined));
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return results;
}

const SIM_TIMINGS = {
  ollama: { loadMs: 3, unloadMs: 3, tokenDelayMs: 1, tokens: 3 },
  comfy: { jobMs: 10, freeDelayMs: 3 },
};

let s: Stack | undefined;
let direct: { ollama: OllamaSim; comfy: ComfySim } | undefined;
afterEach(async () => {
  await s?.stop();
  await direct?.ollama.stop();
  await direct?.comfy.stop();
  s = direct = undefined;
});

/** Failures carry the seed, so any run can be replayed. */
async function withSeed(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    throw new Error(`chaos failed with CHAOS_SEED=${SEED} CHAOS_OPS=${OPS}\n${msg}`, { cause: err });
  }
}

const CHAOS_ENV = {
  LOGLEVEL: "warn",
  UNLOAD_POLL_INTERVAL: "2ms",
  HISTORY_POLL_INTERVAL: "2ms",
  FREE_POLL_INTERVAL: "2ms",
  LLM_WAIT_TIMEOUT: "60s",
  JOB_TIMEOUT: "20s",
  UNLOAD_TIMEOUT: "10s",
  FREE_TIMEOUT: "10s",
  // Image sessions on (the default): image jobs join a running session.
  IMAGE_SESSION_MAX: "5m",
};

test(`seeded chaos through the turnstile: no GPU overlap, every job forwarded once, back to idle (seed ${SEED})`, async () => {
  await withSeed(async () => {
    s = await startStack({ ollama: SIM_TIMINGS.ollama, comfy: SIM_TIMINGS.comfy, env: CHAOS_ENV });
    const ops = plan(SEED, OPS);
    const bodies = abuseBodies();
    const work = runWorkload(ops, s.t.ollamaUrl, s.t.comfyUrl);
    // Beside the traffic, the abuser of issue 26 (abuse-actor.ts).
    const abused = abuse(s.t.ollamaUrl, s.t.comfyUrl, bodies, work);
    const results = await work;
    const abuseReport = await abused;
    await s.t.settled();
    // The service kept answering: /healthz on time throughout, every zstd body answered as its kind asks.
    expect(abuseReport.healthzAsked).toBeGreaterThan(10);
    // Here the simulators, the traffic and the turnstile share one process (and, in the suite, the
    // machine with other test files), so their CPU counts against /healthz: the bound is loose. The
    // 1 s bound of issue 26 is zstd-flood.test.ts's, with the simulators in a process of their own.
    expect(abuseReport.worstHealthzMs).toBeLessThan(5000);
    const expected = { cloud: 200, local: 200, bomb: 413, cut: 400 } as const;
    expect(abuseReport.zstd.filter((z) => z.status !== expected[z.kind])).toEqual([]);
    expect(abuseReport.zstd).toHaveLength(10);

    await checkChaos(s, results);
  });
}, 30_000);

test(`seeded chaos with three clients of different classes (CLIENTS_FILE, fair turns): the same guarantees (seed ${SEED})`, async () => {
  const dir = mkdtempSync(join(tmpdir(), "gt-chaos-clients-"));
  try {
    const file = join(dir, "clients");
    writeFileSync(file, CLIENTS_TEXT);
    await withSeed(async () => {
      s = await startStack({ ollama: SIM_TIMINGS.ollama, comfy: SIM_TIMINGS.comfy, env: { ...CHAOS_ENV, CLIENTS_FILE: file } });
      const ops = plan(SEED, OPS);
      const results = await runWorkload(ops, s.t.ollamaUrl, s.t.comfyUrl, true);
      await s.t.settled();
      await checkChaos(s, results);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 30_000);

async function checkChaos(s: Stack, results: OpResult[]): Promise<void> {
  const comfy = s.comfy!;

  // Nothing the turnstile did made a request fail: each op finished as its upstream meant it
  // to, or was aborted by us.
  const unexpected = results.filter((r) => {
    if (r.aborted) return false;
    if (r.error !== undefined) return true;
    return r.status !== (r.op.kind === "image_400" ? 400 : 200);
  });
  expect(unexpected.map((r) => ({ kind: r.op.kind, status: r.status, error: r.error, body: r.body?.slice(0, 200) }))).toEqual([]);

  // The invariant, on the shared ledger.
  expect(s.gpu.overlaps()).toEqual([]);
  expect(s.gpu.ledger.filter((h) => h.tenant === "comfy").length).toBeGreaterThan(10);
  expect(s.gpu.ledger.filter((h) => h.tenant === "ollama").length).toBeGreaterThan(10);

  // Every prompt reached ComfyUI at most once; every 200 the client saw is one of them.
  const forwarded = comfy.calls.filter((c) => c.method === "POST" && /\/prompt$/.test(c.path)).map((c) => JSON.parse(c.bodyText).prompt_id as string);
  expect(forwarded.length).toBe(new Set(forwarded).size);
  const accepted = results.filter((r) => r.status === 200 && r.op.kind.startsWith("image"));
  for (const r of accepted) expect(JSON.parse(r.body!).prompt_id).toBe(r.op.promptId);
  const forwardedSet = new Set(forwarded);
  expect(accepted.filter((r) => !forwardedSet.has(r.op.promptId)).map((r) => r.op.promptId)).toEqual([]);
  expect(accepted.length).toBeGreaterThan(20);

  // Back at rest, and every job that held the GPU reported exactly once.
  expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
  expect(s.t.tracker.active()).toEqual([]);
  const jobs = comfy.jobs();
  expect(jobs.filter((j) => j.state === "queued" || j.state === "running")).toEqual([]);
  const counts = await jobCounts(s.t);
  expect({ timeout: counts.timeout, lost: counts.lost, upstream_error: counts.upstream_error, no_prompt_id: counts.no_prompt_id }).toEqual({
    timeout: 0,
    lost: 0,
    upstream_error: 0,
    no_prompt_id: 0,
  });
  expect(counts.completed).toBe(jobs.filter((j) => j.state === "done").length);
  expect(counts.failed).toBe(jobs.filter((j) => j.state === "error").length);
  expect(counts.rejected).toBe(forwarded.length - jobs.length);
  expect(total(counts)).toBe(forwarded.length + counts.client_gone);
  const imageOps = results.filter((r) => r.op.kind.startsWith("image")).length;
  expect(total(counts)).toBeLessThanOrEqual(imageOps);
  // Sessions really happened: fewer sessions (and /free calls) than jobs ComfyUI ran.
  const sessions = sampleValue(parseExposition(await (await fetch(`${s.t.comfyUrl}/metrics`)).text()), "gpu_turnstile_image_sessions_total", {})!;
  expect(sessions).toBeGreaterThan(0);
  expect(sessions).toBeLessThan(jobs.length);
  expect(comfy.calls.filter((c) => c.path === "/free").length).toBe(sessions);
}

test(`the same workload straight at the simulators does overlap, so the check above can fail (seed ${SEED})`, async () => {
  await withSeed(async () => {
    const gpu = new SimGpu();
    direct = {
      ollama: await startOllamaSim({ ...SIM_TIMINGS.ollama, gpu, recordCalls: false }),
      comfy: await startComfySim({ ...SIM_TIMINGS.comfy, gpu, recordCalls: false }),
    };
    await runWorkload(plan(SEED, 300), direct.ollama.url, direct.comfy.url);
    expect(gpu.overlaps().length).toBeGreaterThan(0);
  });
});

// ---------------------------------------------------------------- the outside probe's method (issue 18)

type ProbeKind = "chat" | "image" | "minted" | "bad_id" | "duplicate" | "cross_site" | "cancel";

interface ProbeOp {
  kind: ProbeKind;
  promptId: string;
  /** For `duplicate` and `cancel`: the image op whose id it reuses. */
  of?: number;
  headers?: Record<string, string>;
}

const BAD_IDS = ["", "job", "x".repeat(70_000), "y".repeat(9_000), "job\ud800", "5B0A1E3C-8D4F-4F7E-9A51-2C6B9E7D3F10", "../../free"];
const CROSS_SITE: Record<string, string>[] = [{ origin: "http://evil.example" }, { origin: "http://localhost:3000" }, { "sec-fetch-site": "cross-site" }];

function probePlan(seed: number, n: number): ProbeOp[] {
  const rand = prng(seed ^ 0x5eed);
  const ops: ProbeOp[] = [];
  const images: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = rand();
    const any = images.length > 0 ? images[Math.floor(rand() * images.length)]! : undefined;
    if (r < 0.35) ops.push({ kind: "chat", promptId: "" });
    else if (r < 0.55 || any === undefined) {
      images.push(ops.length);
      ops.push({ kind: "image", promptId: newPromptId() });
    } else if (r < 0.62) ops.push({ kind: "minted", promptId: "" });
    else if (r < 0.72) ops.push({ kind: "bad_id", promptId: BAD_IDS[Math.floor(rand() * BAD_IDS.length)]! });
    else if (r < 0.82) ops.push({ kind: "duplicate", promptId: ops[any]!.promptId, of: any });
    else if (r < 0.92) ops.push({ kind: "cross_site", promptId: newPromptId(), headers: CROSS_SITE[Math.floor(rand() * CROSS_SITE.length)] });
    else ops.push({ kind: "cancel", promptId: ops[any]!.promptId, of: any });
  }
  return ops;
}

async function runProbeOp(op: ProbeOp, ollama: string, comfy: string): Promise<number> {
  const json = { "content-type": "application/json" };
  const prompt = (id: string | undefined, headers: Record<string, string> = {}) => {
    const body = JSON.parse(promptBody(id ?? "", { sim_job_ms: 8 }, fewSteps));
    if (id === undefined) delete body.prompt_id;
    return fetch(`${comfy}/prompt`, { method: "POST", headers: { ...json, ...headers }, body: JSON.stringify(body) });
  };
  let res: Response;
  switch (op.kind) {
    case "chat":
      res = await fetch(`${ollama}/api/chat`, { method: "POST", headers: json, body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }) });
      break;
    case "minted":
      res = await prompt(undefined);
      break;
    case "cross_site":
      res = await prompt(op.promptId, op.headers);
      break;
    case "cancel":
      res = await fetch(`${comfy}/api/jobs/${op.promptId}/cancel`, { method: "POST" });
      break;
    default:
      res = await prompt(op.promptId);
  }
  await res.text();
  return res.status;
}

test(`the probe's method mixed into the traffic: bad ids, duplicates, cross-site posts and cancels never hand the card on early (seed ${SEED})`, async () => {
  await withSeed(async () => {
    // An older ComfyUI accepts any string as an id: the worst case for the turnstile's own checks.
    s = await startStack({
      ollama: SIM_TIMINGS.ollama,
      comfy: { ...SIM_TIMINGS.comfy, legacy: true },
      env: { LOGLEVEL: "warn", UNLOAD_POLL_INTERVAL: "2ms", HISTORY_POLL_INTERVAL: "2ms", FREE_POLL_INTERVAL: "2ms", LLM_WAIT_TIMEOUT: "60s", JOB_TIMEOUT: "20s", FREE_TIMEOUT: "10s" },
    });
    const ops = probePlan(SEED, Math.min(OPS, 400));
    const statuses: number[] = new Array(ops.length);
    let next = 0;
    const worker = async () => {
      while (next < ops.length) {
        const i = next++;
        statuses[i] = await runProbeOp(ops[i]!, s!.t.ollamaUrl, s!.t.comfyUrl);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    await s.t.settled();

    expect(s.gpu.overlaps()).toEqual([]);
    const by = (k: ProbeKind) => ops.flatMap((o, i) => (o.kind === k ? [statuses[i]] : []));
    expect(new Set(by("bad_id"))).toEqual(new Set([400]));
    expect(new Set(by("cross_site"))).toEqual(new Set([403]));
    expect(new Set(by("minted"))).toEqual(new Set([200]));
    expect(new Set(by("chat"))).toEqual(new Set([200]));
    // Of an id and its duplicates, exactly one got in (whichever came first).
    const groups = new Map<string, number[]>();
    ops.forEach((o, i) => (o.kind === "image" || o.kind === "duplicate") && groups.set(o.promptId, [...(groups.get(o.promptId) ?? []), statuses[i]!]));
    for (const [id, got] of groups) expect({ id, accepted: got.filter((x) => x === 200).length, refused: got.filter((x) => x === 400).length }).toEqual({ id, accepted: 1, refused: got.length - 1 });

    // ComfyUI got only canonical ids, each once, and never a cross-site prompt.
    const forwarded = s.comfy!.calls.filter((c) => c.method === "POST" && c.path === "/prompt");
    const ids = forwarded.map((c) => JSON.parse(c.bodyText).prompt_id as string);
    expect(ids.filter((id) => !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id))).toEqual([]);
    expect(ids.length).toBe(new Set(ids).size);
    expect(forwarded.filter((c) => c.headers.origin !== undefined || c.headers["sec-fetch-site"] !== undefined)).toEqual([]);
    expect(s.t.health()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
    expect(s.t.tracker.active()).toEqual([]);
  });
}, 30_000);

/** Kills in the storm: few, so the whole test stays within a few seconds. */
const RESTARTS = 4;

let storm: { procs: MainProcess[]; ollama: OllamaSim; comfy: ComfySim } | undefined;
let stateDir: string;
beforeAll(() => {
  stateDir = mkdtempSync(join(tmpdir(), "turnstile-storm-"));
});
afterAll(async () => {
  await Promise.all(storm?.procs.map((p) => p.kill("SIGKILL")) ?? []);
  await storm?.ollama.stop();
  await storm?.comfy.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

test(`restart storm: the turnstile killed and restarted at random moments while traffic runs, no GPU overlap (seed ${SEED})`, async () => {
  await withSeed(async () => {
    const rand = prng(SEED ^ 0x5a5a5a5a);
    const gpu = new SimGpu();
    const ollama = await startOllamaSim({ ...SIM_TIMINGS.ollama, gpu, recordCalls: false });
    const comfy = await startComfySim({ ...SIM_TIMINGS.comfy, gpu });
    storm = { procs: [], ollama, comfy };
    const [po, pc] = [freePort(), freePort()];
    const env = {
      OLLAMA_URL: ollama.url,
      COMFY_URL: comfy.url,
      LISTEN_OLLAMA: `127.0.0.1:${po}`,
      LISTEN_COMFY: `127.0.0.1:${pc}`,
      UNLOAD_POLL_INTERVAL: "2ms",
      HISTORY_POLL_INTERVAL: "2ms",
      FREE_POLL_INTERVAL: "2ms",
      PROBE_TIMEOUT: "1s",
      SHUTDOWN_TIMEOUT: "100ms",
      HEALTH_INTERVAL: "0",
      IMAGE_SESSION_MAX: "5m",
      STATE_DIR: stateDir,
    };
    const start = async () => storm!.procs.push(await startMain(stateDir, env));
    await start();
    const urls = { ollama: `http://127.0.0.1:${po}`, comfy: `http://127.0.0.1:${pc}` };

    // Traffic runs through the whole storm; each image op gets a fresh prompt_id.
    const ops = plan(SEED, 200);
    const results: OpResult[] = [];
    let storming = true;
    let next = 0;
    const worker = async () => {
      while (storming) {
        const op = { ...ops[next++ % ops.length]!, promptId: newPromptId() };
        results.push(await runOne(op, urls.ollama, urls.comfy));
      }
    };
    const traffic = Promise.all(Array.from({ length: 8 }, worker));
    const comfyHolds = () => gpu.ledger.filter((h) => h.tenant === "comfy").length;
    for (let i = 0; i < RESTARTS; i++) {
      // Each life serves at least one image job before it dies (a life that never does is wedged);
      // on a loaded machine a random lifetime alone sometimes ended before any image got in.
      const held = comfyHolds();
      await until(() => comfyHolds() > held, `an image job served in life ${i + 1}`, 15_000);
      // Then a random moment: this is the chaos, not a wait for some state.
      await new Promise((r) => setTimeout(r, 50 + rand() * 300));
      await storm.procs.at(-1)!.kill(rand() < 0.7 ? "SIGKILL" : "SIGTERM");
      await start();
    }
    await new Promise((r) => setTimeout(r, 100 + rand() * 200));
    storming = false;
    await traffic;

    // The last process brings the card to rest: ComfyUI done and freed, the GPU idle.
    const health = async () => (await (await fetch(`${urls.ollama}/healthz`)).json()) as { state: string };
    await until(async () => (await health()).state === "idle" && !comfy.jobs().some((j) => j.state === "queued" || j.state === "running"), "the card at rest", 10_000);
    expect(gpu.overlaps()).toEqual([]);
    // Traffic really ran on both sides, through every life of the turnstile.
    expect(results.filter((r) => r.status === 200).length).toBeGreaterThan(20);
    expect(comfyHolds()).toBeGreaterThanOrEqual(RESTARTS);
    // A dying turnstile cuts requests or refuses connections; it never answers with its own 500.
    expect(results.filter((r) => r.status === 500).map((r) => r.body?.slice(0, 200))).toEqual([]);
  });
}, 30_000);
