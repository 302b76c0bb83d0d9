/**
 * Issue 29: the hand-off LLM → image and back for IMAGE_KIND a1111 and swarmui, each paired with
 * the Ollama simulator, through the real turnstile (in this process, so the simulators, the
 * turnstile and this client read one clock). Only what the turnstile adds is counted; the
 * simulators' own unload, release, reload and poll waits are measured apart and excluded.
 *
 * One cycle: chat A (a model loads) → one generation (the turnstile unloads Ollama, proven by
 * /api/ps, [restores the checkpoint], forwards) → when its answer arrives, chat B (the turnstile
 * drains the image side's busy count, releases, polls the tenant's own report, forwards B).
 *
 *   LLM → image = (first /api/ps − generation sent) + (first image-side call − last /api/ps)
 *                 [+ (the generation's arrival − the restored checkpoint's "loaded")]
 *     excluded: first → last /api/ps (Ollama's unload and UNLOAD_POLL_INTERVAL), the restore
 *     call → "loaded" (the simulator's reload time).
 *   image → LLM = (first image-side call after the job − the simulator's job end)
 *                 + (chat B's arrival at Ollama − the verify reading that saw the memory back)
 *     excluded: that first call → that reading (the drain, the release, the simulator's unload
 *     and FREE_POLL_INTERVAL).
 *
 *   npx bun bench/tenant-image-handoff.ts [cycles=20]
 */
import { buildConfig } from "../src/config/load.ts";
import { createLogger } from "../src/observe/log.ts";
import type { GpuEvent } from "../src/sim/gpu.ts";
import { SimGpu } from "../src/sim/gpu.ts";
import { IMAGE_KIND_SIMS } from "../src/sim/image-kinds.ts";
import { startOllamaSim } from "../src/sim/ollama.ts";
import { startTurnstile } from "../src/turnstile.ts";
import { now } from "./lib/clock.ts";
import { summarize, type Summary } from "./lib/stats.ts";

const CYCLES = Number(process.argv[2] ?? 20);
/** The simulators' own times, stated with the results. */
const SIM = { jobMs: 200, loadMs: 300, reloadMs: 60, unloadMs: 40 };
const OLLAMA = { loadMs: 150, unloadMs: 40, tokenDelayMs: 2, tokens: 8 };
const POLL = { UNLOAD_POLL_INTERVAL: "10ms", FREE_POLL_INTERVAL: "10ms" };

/** The image-side calls that read the tenant's own report (the verify), by kind. */
const VERIFY_PATH = { a1111: "/sdapi/v1/memory", swarmui: "/API/ListBackends" } as const;
/** Calls the client itself makes, which are not the turnstile's. */
const CLIENT_PATHS = new Set(["/sdapi/v1/txt2img", "/API/GenerateText2Image", "/API/GetNewSession"]);

interface Cycle {
  llmToImage: number;
  unloadWait: number;
  restoreWait: number;
  imageToLlm: number;
  releaseWait: number;
}

async function runKind(kind: "a1111" | "swarmui"): Promise<{ cycles: Cycle[]; failed: string[] }> {
  const gpu = new SimGpu();
  const events: GpuEvent[] = [];
  gpu.on((e) => events.push(e));
  const ollama = await startOllamaSim({ gpu, ...OLLAMA });
  const sim = IMAGE_KIND_SIMS[kind];
  const image = await sim.start(gpu, SIM);
  const { config } = buildConfig({
    entries: [],
    file: null,
    env: { OLLAMA_URL: ollama.url, COMFY_URL: image.url, IMAGE_KIND: kind, LISTEN_OLLAMA: "127.0.0.1:0", LISTEN_COMFY: "127.0.0.1:0", AUTO_UPDATE: "false", APP_VER: "dev", LOGLEVEL: "warn", ...POLL },
    platform: { os: "linux", arch: "x64" },
  });
  const log = createLogger({ level: config.logLevel, format: config.logFormat, stream: { write: () => {} } });
  const t = startTurnstile({ config, log, version: "v0.0.0-bench" });
  const viaLlm = t.listener("ollama")!.url;
  const viaImage = t.listener("comfy")!.url;
  const chat = () =>
    fetch(`${viaLlm}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) }).then((r) => r.text());
  const cycles: Cycle[] = [];
  const failed: string[] = [];
  try {
    for (let i = 0; i < CYCLES + 1; i++) {
      await chat();
      await settle(t);
      ollama.clearCalls();
      image.clearCalls();
      const calls = image.calls;
      events.length = 0;
      const sent = now();
      const res = await sim.generate(viaImage);
      if (res.status !== 200) {
        failed.push(`generation ${res.status}`);
        continue;
      }
      await res.text();
      await chat();
      await settle(t);
      if (i === 0) continue; // the first cycle loads everything cold
      const ps = ollama.calls.filter((c) => c.path === "/api/ps");
      const chats = ollama.calls.filter((c) => c.path === "/api/chat");
      const chatB = chats.at(-1)!;
      const turnstileCalls = calls.filter((c) => !CLIENT_PATHS.has(c.path));
      const gen = calls.find((c) => c.path === "/sdapi/v1/txt2img" || c.path === "/API/GenerateText2Image")!;
      const before = turnstileCalls.filter((c) => c.at < gen.at);
      const after = turnstileCalls.filter((c) => c.at > gen.at);
      const psBefore = ps.filter((c) => c.at >= sent && c.at <= gen.at);
      const jobEnd = events.find((e) => e.kind === "job-end" && e.tenant === "comfy");
      const loaded = events.filter((e) => e.kind === "loaded" && e.at < gen.at).at(-1);
      const verifies = after.filter((c) => c.path === VERIFY_PATH[kind] && c.at <= chatB.at);
      if (!psBefore.length || !jobEnd || !after.length || !verifies.length) {
        failed.push(`cycle ${i}: missing calls (ps ${psBefore.length}, after ${after.length}, verify ${verifies.length}, job end ${!!jobEnd})`);
        continue;
      }
      const firstImageCall = before[0] ?? gen;
      const restoreWait = before.length && loaded ? loaded.at - before[0]!.at : 0;
      cycles.push({
        llmToImage: psBefore[0]!.at - sent + (firstImageCall.at - psBefore.at(-1)!.at) + (restoreWait ? gen.at - loaded!.at : 0),
        unloadWait: psBefore.at(-1)!.at - psBefore[0]!.at,
        restoreWait,
        imageToLlm: after[0]!.at - jobEnd.at + (chatB.at - verifies.at(-1)!.at),
        releaseWait: verifies.at(-1)!.at - after[0]!.at,
      });
    }
  } finally {
    await t.stop(1000);
    log.close();
    await Promise.all([ollama.stop(), image.stop()]);
  }
  return { cycles, failed };
}

async function settle(t: ReturnType<typeof startTurnstile>): Promise<void> {
  await t.tracker.settled();
  const end = now() + 10_000;
  while (t.lock.state !== "idle") {
    if (now() > end) throw new Error("lock never went idle");
    await Bun.sleep(1);
  }
}

const f = (x: number) => x.toFixed(3);
const row = (what: string, s: Summary, excluded: string) => `| ${what} | ${f(s.p50)} | ${f(s.max)} | ${excluded} |`;

for (const kind of ["a1111", "swarmui"] as const) {
  const { cycles, failed } = await runKind(kind);
  const s = (k: keyof Cycle) => summarize(cycles.map((c) => c[k]));
  console.log(`\n#### IMAGE_KIND=${kind} with Ollama — ${cycles.length}/${CYCLES} cycles${failed.length ? ` (${failed.join("; ")})` : ""}\n`);
  console.log("| hand-off | overhead p50 ms | overhead max ms | excluded wait p50 ms |");
  console.log("|---|---:|---:|---:|");
  const restore = s("restoreWait");
  console.log(row("generation sent → Ollama emptied → generation forwarded", s("llmToImage"), `${s("unloadWait").p50.toFixed(1)} (unload)${restore.p50 > 0 ? ` + ${restore.p50.toFixed(1)} (reload-checkpoint)` : ""}`));
  console.log(row("generation ended → image side released → waiting chat forwarded", s("imageToLlm"), `${s("releaseWait").p50.toFixed(1)} (drain, release, verify)`));
}
console.log(`\nSimulators: image job ${SIM.jobMs} ms, cold load ${SIM.loadMs} ms, reload from RAM ${SIM.reloadMs} ms, unload ${SIM.unloadMs} ms; Ollama load ${OLLAMA.loadMs} ms, unload ${OLLAMA.unloadMs} ms; polls every 10 ms.`);
