/**
 * From the end of a ComfyUI job to the next chat (issue 27): how long after ComfyUI finishes a job
 * the turnstile sends `/free`, and how long until a chat that waited for the job gets its first
 * byte — median and p99 — on a card with memory of its own (`cuda`) and on one whose memory is the
 * system's (`cpu`). Not part of `bench/run.ts`: it compares two builds of the turnstile.
 *
 *   npx bun bench/comfy-end.ts [--root DIR] [--rounds N] [--label TEXT]
 *
 * `--root` is a checkout whose src/turnstile.ts is measured (default: this one), so the same
 * script measures main's code and a branch's: `git archive main | tar -x -C /tmp/main`, link
 * node_modules, then `--root /tmp/main`. The simulators always come from this checkout.
 *
 * One process, one clock (the simulators' `now()`): the job's end is ComfyUI's own (the simulator
 * stamps it when it writes the history entry and announces the queue change); "ComfyUI's own
 * free" is when /free was answered (`cpu`: nothing else to wait for) or when the memory was back
 * (`cuda`: the simulator's worker unloads 100 ms after it acts on the flag). Job lengths vary
 * (300–1300 ms) so the end falls anywhere between two polls. Settings are the defaults
 * (HISTORY_POLL_INTERVAL 1s, FREE_POLL_INTERVAL 250ms) except FREE_TIMEOUT 5s, so that a build
 * that waits it out on `cpu` does so in bounded time.
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { now } from "../src/sim/clock.ts";
import { SimGpu, startComfySim, startOllamaSim } from "../src/sim/index.ts";
import { summarize } from "./lib/stats.ts";
import { DEFAULT_WORKFLOW } from "./scenarios/handoff.ts";

const { values: args } = parseArgs({
  options: { root: { type: "string" }, rounds: { type: "string", default: "20" }, label: { type: "string" }, env: { type: "string", multiple: true } },
});
const root = resolve(args.root ?? join(import.meta.dir, ".."));
const rounds = Number(args.rounds);
const extraEnv = Object.fromEntries((args.env ?? []).map((kv) => kv.split("=", 2) as [string, string]));

const { startTurnstile } = (await import(join(root, "src/turnstile.ts"))) as typeof import("../src/turnstile.ts");
const { buildConfig } = (await import(join(root, "src/config/load.ts"))) as typeof import("../src/config/load.ts");
const { createLogger } = (await import(join(root, "src/observe/log.ts"))) as typeof import("../src/observe/log.ts");

interface Round {
  toFree: number;
  toFirstByte: number;
  /** First byte − ComfyUI's own free (answered on cpu, memory back on cuda). */
  beyondFree: number;
}

async function measure(device: "cuda" | "cpu"): Promise<Round[]> {
  const gpu = new SimGpu();
  // When ComfyUI's memory was last back on the card (the simulator's `freed` note).
  let lastFreed: number | undefined;
  gpu.on((e) => void (e.kind === "freed" && (lastFreed = e.at)));
  const ollama = await startOllamaSim({ gpu, loadMs: 5, unloadMs: 20, tokenDelayMs: 2, tokens: 3, recordCalls: false });
  const comfy = await startComfySim({ gpu, device, jobMs: 300, loadMs: 0, freeDelayMs: 100 });
  const env = { OLLAMA_URL: ollama.url, COMFY_URL: comfy.url, LISTEN_OLLAMA: "127.0.0.1:0", LISTEN_COMFY: "127.0.0.1:0", FREE_TIMEOUT: "5s", AUTO_UPDATE: "false", APP_VER: "dev", LOGLEVEL: "warn", ...extraEnv };
  const { config } = buildConfig({ entries: [], file: null, env, platform: { os: "linux", arch: "x64" } });
  const log = createLogger({ level: config.logLevel, format: config.logFormat, stream: { write: () => {} } });
  const t = startTurnstile({ config, log, version: "bench" });
  await t.probed;
  const ollamaUrl = t.listener("ollama")!.url;
  const comfyUrl = t.listener("comfy")!.url;
  const out: Round[] = [];
  try {
    for (let i = 0; i < rounds; i++) {
      comfy.clearCalls();
      lastFreed = undefined;
      const before = comfy.jobs().length;
      const jobMs = 300 + Math.random() * 1000;
      const res = await fetch(`${comfyUrl}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, prompt_id: crypto.randomUUID(), extra_data: { sim_job_ms: jobMs } }),
      });
      await res.text();
      const deadline = Date.now() + 10_000;
      while (!comfy.runningJob() && Date.now() < deadline) await Bun.sleep(2);
      const chat = await fetch(`${ollamaUrl}/api/chat`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }),
      });
      const reader = chat.body!.getReader();
      await reader.read();
      const firstByte = now();
      while (!(await reader.read()).done);
      await t.whenIdle();
      const job = comfy.jobs()[before]!;
      const free = comfy.calls.find((c) => c.path === "/free");
      const freed = device === "cuda" ? lastFreed : free?.at;
      if (!job.endedAt || !free || freed === undefined) throw new Error(`round ${i}: no job end or /free`);
      out.push({ toFree: free.at - job.endedAt, toFirstByte: firstByte - job.endedAt, beyondFree: firstByte - freed });
    }
  } finally {
    await t.stop(500);
    log.close();
    await Promise.all([ollama.stop(), comfy.stop()]);
  }
  if (gpu.overlaps().length > 0) throw new Error("the card was held by both tenants at once");
  return out;
}


const ms = (x: number) => `${Math.round(x)} ms`;
console.log(`root ${root}${args.label ? ` (${args.label})` : ""}; ${rounds} rounds per device${extraEnv && Object.keys(extraEnv).length ? `; ${JSON.stringify(extraEnv)}` : ""}`);
console.log("| device | end → /free p50 | p99 | end → chat's first byte p50 | p99 | beyond ComfyUI's own free p50 | p99 |");
console.log("|---|---:|---:|---:|---:|---:|---:|");
for (const device of ["cuda", "cpu"] as const) {
  const r = await measure(device);
  const [f, b, x] = [summarize(r.map((v) => v.toFree)), summarize(r.map((v) => v.toFirstByte)), summarize(r.map((v) => v.beyondFree))];
  console.log(`| \`${device}\` | ${ms(f.p50)} | ${ms(f.p99)} | ${ms(b.p50)} | ${ms(b.p99)} | ${ms(x.p50)} | ${ms(x.p99)} |`);
}
