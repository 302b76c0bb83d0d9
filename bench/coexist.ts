/**
 * COEXIST (issue 31): embeddings every 2 s during a stream of image jobs, with co-residency off and
 * on. What an Open WebUI user feels (each embedding's wait, median and worst) and what the image
 * side pays (each job from /prompt to the card handed back). Not part of `bench/run.ts`.
 *
 *   npx bun bench/coexist.ts [--jobs N] [--job-ms MS]
 *
 * One process: simulated Ollama and ComfyUI on one simulated 24 GiB card and the turnstile
 * in-process. Ollama loads nomic-embed-text in 500 ms and unloads in 100 ms; ComfyUI loads its
 * checkpoint cold in 1 s (after each session's /free) and runs a job in `--job-ms` (3 s) with 4 GB
 * of working memory; jobs follow each other with 300 ms between them. The first job of the run is
 * the workflow's exclusive, measured run in both modes. The ledger's memory invariant is checked at
 * the end of each run (and, off, the no-overlap rule).
 */
import { parseArgs } from "node:util";
import { buildConfig } from "../src/config/load.ts";
import { createLogger } from "../src/observe/log.ts";
import { SimGpu, startComfySim, startOllamaSim } from "../src/sim/index.ts";
import { startTurnstile } from "../src/turnstile.ts";
import { summarize } from "./lib/stats.ts";
import { DEFAULT_WORKFLOW } from "./scenarios/handoff.ts";

const { values: args } = parseArgs({ options: { jobs: { type: "string", default: "8" }, "job-ms": { type: "string", default: "3000" } } });
const JOBS = Number(args.jobs);
const JOB_MS = Number(args["job-ms"]);
const EMBED_EVERY_MS = 2000;

interface Run {
  embedWaits: number[];
  jobTimes: number[];
  admissions: number;
}

async function run(coexist: boolean): Promise<Run> {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ gpu, loadMs: 500, unloadMs: 100, tokenDelayMs: 2, tokens: 3, recordCalls: false });
  const comfy = await startComfySim({ gpu, jobMs: JOB_MS, loadMs: 1000, freeDelayMs: 100, workBytes: 4e9, recordCalls: false });
  const env = {
    OLLAMA_URL: ollama.url,
    COMFY_URL: comfy.url,
    LISTEN_OLLAMA: "127.0.0.1:0",
    LISTEN_COMFY: "127.0.0.1:0",
    AUTO_UPDATE: "false",
    APP_VER: "dev",
    LOGLEVEL: "warn",
    LLM_WAIT_TIMEOUT: "5m",
    COEXIST: String(coexist),
    COEXIST_MODELS: "nomic-embed-text",
  };
  const { config } = buildConfig({ entries: [], file: null, env, platform: { os: "linux", arch: "x64" } });
  const log = createLogger({ level: config.logLevel, format: config.logFormat, stream: { write: () => {} } });
  const t = startTurnstile({ config, log, version: "bench" });
  await t.probed;
  const ollamaUrl = t.listener("ollama")!.url;
  const comfyUrl = t.listener("comfy")!.url;
  const post = (url: string, body: unknown) => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const out: Run = { embedWaits: [], jobTimes: [], admissions: 0 };
  let streaming = true;
  // The embedder: one request every 2 s whatever the last one's wait (Open WebUI's indexing).
  const pending: Promise<void>[] = [];
  const embedder = (async () => {
    while (streaming) {
      pending.push(
        (async () => {
          const t0 = performance.now();
          const res = await post(`${ollamaUrl}/api/embed`, { model: "nomic-embed-text", input: "a paragraph of a document" });
          await res.text();
          if (res.status !== 200) throw new Error(`embed answered ${res.status}`);
          out.embedWaits.push(performance.now() - t0);
        })(),
      );
      await Bun.sleep(EMBED_EVERY_MS);
    }
  })();
  try {
    for (let i = 0; i < JOBS; i++) {
      const t0 = performance.now();
      const workflow = structuredClone(DEFAULT_WORKFLOW) as Record<string, { inputs: Record<string, unknown> }>;
      for (const node of Object.values(workflow)) if ("seed" in node.inputs) node.inputs.seed = i;
      const res = await post(`${comfyUrl}/prompt`, { prompt: workflow, prompt_id: crypto.randomUUID() });
      await res.text();
      if (res.status !== 200) throw new Error(`/prompt answered ${res.status}`);
      // The job's end, then the card handed back (after /free and its check).
      while (comfy.jobs()[i]?.endedAt === undefined) await Bun.sleep(5);
      await t.whenIdle();
      out.jobTimes.push(performance.now() - t0);
      await Bun.sleep(300);
    }
  } finally {
    streaming = false;
    await embedder;
    await Promise.all(pending);
    const metrics = await (await fetch(`${ollamaUrl}/metrics`)).text();
    out.admissions = Number(/^gpu_turnstile_coexist_admissions_total(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? 0);
    await t.stop(500);
    log.close();
    await Promise.all([ollama.stop(), comfy.stop()]);
  }
  const broken = gpu.violations({ coexist });
  if (broken.length > 0) throw new Error(`the card's invariant broke: ${broken.join("; ")}`);
  return out;
}

const ms = (x: number) => `${Math.round(x)} ms`;
console.log(`${JOBS} image jobs of ${JOB_MS} ms, an embedding every ${EMBED_EVERY_MS} ms`);
console.log("| COEXIST | embeddings | wait p50 | p90 | max | image job p50 | max | admissions |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const on of [false, true]) {
  const r = await run(on);
  const [e, j] = [summarize(r.embedWaits), summarize(r.jobTimes)];
  console.log(`| ${on ? "on" : "off"} | ${e.n} | ${ms(e.p50)} | ${ms(e.p90)} | ${ms(e.max)} | ${ms(j.p50)} | ${ms(j.max)} | ${r.admissions} |`);
}
