/**
 * The hand-off LLM → image and back for each LLM kind (issue 29): llama-server, llama-swap,
 * LM Studio and vLLM, each paired with ComfyUI, through a real turnstile (in this process, so the
 * simulators' call logs, the GPU ledger and the clients share one clock).
 *
 * One cycle: chat A streams; an image job is posted and waits for it; once /healthz shows the job
 * pending, chat B is sent and waits for the job. Measured:
 *
 *   LLM → image: (first call the turnstile makes to the LLM tenant after A's last byte reached its
 *     client − that moment) + (`/prompt` arrival at ComfyUI − the last call to the LLM tenant before
 *     it, the verify that saw the memory back). Excluded: first → last call, the tenant's own
 *     release time as the polls see it (its unload time rounded up to UNLOAD_POLL_INTERVAL; for
 *     vLLM the synchronous /sleep).
 *   image → LLM: B's arrival at the LLM tenant − the last `/system_stats` poll (the one that saw
 *     ComfyUI's memory back). For vLLM the wake-up it needs first is excluded: (B's arrival − the
 *     moment the simulated engine finished waking) + (`/wake_up` arrival − last `/system_stats`).
 *
 *   npx bun bench/tenant-handoff.ts [--cycles 20] [--kinds llama-server,vllm]
 */
import { buildConfig } from "../src/config/load.ts";
import { currentPlatform } from "../src/config/settings.ts";
import { createLogger } from "../src/observe/log.ts";
import { now } from "../src/sim/clock.ts";
import { SimGpu, startComfySim, type ComfySim } from "../src/sim/index.ts";
import { startLlamaServerSim } from "../src/sim/llama-server.ts";
import { startLlamaSwapSim } from "../src/sim/llama-swap.ts";
import type { LlmSim, LlmSimOptions } from "../src/sim/llm-server.ts";
import { startLmStudioSim } from "../src/sim/lmstudio.ts";
import { startVllmSim } from "../src/sim/vllm.ts";
import { startTurnstile, type Turnstile } from "../src/turnstile.ts";
import { VERSION } from "../src/version.ts";
import { summarize, type Summary } from "./lib/stats.ts";
import { DEFAULT_WORKFLOW } from "./scenarios/handoff.ts";

const MODEL = "qwen2.5-7b-instruct";
const TOKEN = "sk-lm-bench-0123456789";
/** The simulators' own times, stated with the results. */
export const SIM_LLM: LlmSimOptions = { loadMs: 50, unloadMs: 30, tokenDelayMs: 2, tokens: 10 };
export const SIM_COMFY = { jobMs: 40, freeDelayMs: 20 };
const POLL = { UNLOAD_POLL_INTERVAL: "10ms", FREE_POLL_INTERVAL: "10ms", HISTORY_POLL_INTERVAL: "10ms" };

interface KindCase {
  kind: string;
  start(o: LlmSimOptions): Promise<LlmSim>;
  env?: Record<string, string>;
  headers?: Record<string, string>;
  /** Paths of the turnstile's own calls to the tenant (release and verify), not the clients'. */
  own: RegExp;
}

const KINDS: KindCase[] = [
  { kind: "llama-server", start: startLlamaServerSim, own: /^\/models(\/unload)?$/ },
  { kind: "llama-swap", start: startLlamaSwapSim, own: /^\/(running|api\/models\/unload)$/ },
  {
    kind: "lmstudio",
    start: (o) => startLmStudioSim({ ...o, token: TOKEN }),
    env: { LMSTUDIO_TOKEN: TOKEN },
    headers: { Authorization: `Bearer ${TOKEN}` },
    own: /^\/api\/v1\/models(\/unload)?$/,
  },
  { kind: "vllm", start: startVllmSim, own: /^\/(is_sleeping|metrics|sleep)$/ },
];

interface Cycle {
  llmToImageMs: number;
  releaseWaitMs: number;
  imageToLlmMs: number;
  freeWaitMs: number;
  wakeMs?: number;
}

export interface KindResult {
  kind: string;
  ok: number;
  cycles: number;
  failures: string[];
  llmToImageMs: Summary;
  releaseWaitMs: Summary;
  imageToLlmMs: Summary;
  freeWaitMs: Summary;
  wakeMs?: Summary;
  overlaps: number;
}

async function until(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = now() + timeoutMs;
  while (!(await cond())) {
    if (now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(1);
  }
}

/** A streamed chat; resolves with the moment its last byte arrived. */
async function chat(base: string, headers: Record<string, string> = {}): Promise<{ status: number; endAt: number }> {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: "Why is the sky blue?" }] }),
  });
  await res.arrayBuffer();
  return { status: res.status, endAt: now() };
}

function turnstileFor(c: KindCase, llm: LlmSim, comfy: ComfySim): Turnstile {
  const { config } = buildConfig({
    entries: [],
    file: null,
    platform: currentPlatform(),
    env: {
      OLLAMA_URL: llm.url,
      COMFY_URL: comfy.url,
      LLM_KIND: c.kind,
      LISTEN_OLLAMA: "127.0.0.1:0",
      LISTEN_COMFY: "127.0.0.1:0",
      AUTO_UPDATE: "false",
      APP_VER: "dev",
      LOGLEVEL: "error",
      ...POLL,
      ...c.env,
    },
  });
  return startTurnstile({ config, log: createLogger({ level: "error", format: "text" }), version: VERSION });
}

async function oneCycle(c: KindCase, t: Turnstile, llm: LlmSim, comfy: ComfySim, wakes: number[]): Promise<Cycle> {
  const ollama = t.listener("ollama")!.url;
  const comfyUrl = t.listener("comfy")!.url;
  const health = async (): Promise<{ state: string; image_pending: boolean }> => (await fetch(`${ollama}/healthz`)).json() as never;
  await until(async () => (await health()).state === "idle", 10_000, "an idle lock");
  llm.clearCalls();
  comfy.clearCalls();
  wakes.length = 0;
  const a = chat(ollama, c.headers);
  await until(() => llm.inflight() > 0, 5000, "chat A running");
  const image = fetch(`${comfyUrl}/prompt`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, client_id: "bench" }),
  }).then(async (r) => ({ status: r.status, body: await r.text() }));
  await until(async () => (await health()).image_pending, 5000, "the image job to be pending");
  const b = chat(ollama, c.headers);
  const [ra, ri, rb] = await Promise.all([a, image, b]);
  if (ri.status !== 200) throw new Error(`/prompt answered ${ri.status}: ${ri.body.slice(0, 120)}`);
  if (ra.status !== 200 || rb.status !== 200) throw new Error(`chats answered ${ra.status}/${rb.status}`);
  await until(() => comfy.jobs().every((j) => j.state === "done" || j.state === "error"), 5000, "the job's end");

  const prompt = comfy.calls.find((x) => x.method === "POST" && x.path === "/prompt");
  const free = comfy.calls.find((x) => x.method === "POST" && x.path === "/free");
  const chats = llm.calls.filter((x) => x.path === "/v1/chat/completions");
  const bArrival = chats[1];
  if (!prompt || !free || !bArrival) throw new Error(`missing calls (prompt ${!!prompt}, free ${!!free}, chats ${chats.length})`);
  const own = llm.calls.filter((x) => c.own.test(x.path) && x.at >= ra.endAt && x.at <= prompt.at);
  const first = own[0];
  const last = own.at(-1);
  const stats = comfy.calls.filter((x) => x.path === "/system_stats" && x.at >= free.at && x.at <= bArrival.at);
  const statsN = stats.at(-1);
  if (!first || !last || !statsN) throw new Error(`no tenant calls (${own.length}) or /system_stats (${stats.length}) in the windows`);
  const wakeCall = llm.calls.find((x) => x.path === "/wake_up" && x.at >= statsN.at);
  const wokeAt = wakes.find((w) => wakeCall !== undefined && w >= wakeCall.at);
  const imageToLlmMs =
    wakeCall && wokeAt !== undefined ? wakeCall.at - statsN.at + (bArrival.at - wokeAt) : bArrival.at - statsN.at;
  return {
    llmToImageMs: first.at - ra.endAt + (prompt.at - last.at),
    releaseWaitMs: last.at - first.at,
    imageToLlmMs,
    freeWaitMs: statsN.at - free.at,
    ...(wakeCall && wokeAt !== undefined ? { wakeMs: wokeAt - wakeCall.at } : {}),
  };
}

export async function benchKind(c: KindCase, cycles: number): Promise<KindResult> {
  const gpu = new SimGpu();
  const llm = await c.start({ ...SIM_LLM, gpu });
  const comfy = await startComfySim({ ...SIM_COMFY, gpu });
  const wakes: number[] = [];
  gpu.on((e) => {
    if (e.kind === "loaded" && e.tenant === "ollama") wakes.push(e.at);
  });
  const t = turnstileFor(c, llm, comfy);
  const out: Cycle[] = [];
  const failures: string[] = [];
  try {
    for (let i = 0; i < cycles; i++) {
      try {
        out.push(await oneCycle(c, t, llm, comfy, wakes));
      } catch (err) {
        failures.push(err instanceof Error ? err.message : String(err));
      }
    }
  } finally {
    await t.stop(1000);
    await Promise.all([llm.stop(), comfy.stop()]);
  }
  const wakeList = out.flatMap((x) => (x.wakeMs === undefined ? [] : [x.wakeMs]));
  return {
    kind: c.kind,
    ok: out.length,
    cycles,
    failures,
    llmToImageMs: summarize(out.map((x) => x.llmToImageMs)),
    releaseWaitMs: summarize(out.map((x) => x.releaseWaitMs)),
    imageToLlmMs: summarize(out.map((x) => x.imageToLlmMs)),
    freeWaitMs: summarize(out.map((x) => x.freeWaitMs)),
    ...(wakeList.length ? { wakeMs: summarize(wakeList) } : {}),
    overlaps: gpu.overlaps().length,
  };
}

function table(rs: KindResult[]): string {
  const f = (n: number) => n.toFixed(3);
  const lines = [
    "| LLM_KIND | cycles | LLM→image p50 ms | max ms | excluded release wait p50 ms | image→LLM p50 ms | max ms | excluded free wait p50 ms | excluded wake p50 ms | ledger overlaps |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const r of rs) {
    lines.push(
      `| ${r.kind} | ${r.ok}/${r.cycles} | ${f(r.llmToImageMs.p50)} | ${f(r.llmToImageMs.max)} | ${r.releaseWaitMs.p50.toFixed(1)} | ${f(r.imageToLlmMs.p50)} | ${f(r.imageToLlmMs.max)} | ${r.freeWaitMs.p50.toFixed(1)} | ${r.wakeMs ? r.wakeMs.p50.toFixed(1) : "–"} | ${r.overlaps} |`,
    );
  }
  return lines.join("\n");
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  const arg = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const cycles = Number(arg("--cycles") ?? 20);
  const only = arg("--kinds")?.split(",");
  const results: KindResult[] = [];
  for (const c of KINDS.filter((k) => !only || only.includes(k.kind))) {
    const r = await benchKind(c, cycles);
    for (const f of r.failures) process.stderr.write(`${c.kind}: ${f}\n`);
    results.push(r);
  }
  process.stdout.write(`${table(results)}\n`);
  process.stdout.write(
    `\nsimulators: LLM load ${SIM_LLM.loadMs} ms, release ${SIM_LLM.unloadMs} ms, ${SIM_LLM.tokens} tokens × ${SIM_LLM.tokenDelayMs} ms; ComfyUI job ${SIM_COMFY.jobMs} ms, free ${SIM_COMFY.freeDelayMs} ms; turnstile polls ${POLL.UNLOAD_POLL_INTERVAL}\n`,
  );
}
