/**
 * `gpu-turnstile demo`: simulated Ollama and ComfyUI on one simulated 16 GiB GPU, the real
 * turnstile in front of them, a scripted mixed workload, and a live timeline of what the GPU is
 * doing and who waited why. `--without-turnstile` sends the same workload straight to the
 * simulators and shows what the turnstile prevents.
 */
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { untilStopped } from "./stop.ts";
import { join } from "node:path";
import { buildConfig } from "../config/load.ts";
import { currentPlatform } from "../config/settings.ts";
import type { ImageJobEvent } from "../jobs/events.ts";
import { createLogger } from "../observe/log.ts";
import { useColor } from "../runtime/color.ts";
import { startSimPair, type GpuEvent, type SimPair } from "../sim/index.ts";
import { startTurnstile, type Turnstile } from "../turnstile.ts";
import { VERSION } from "../version.ts";
import { gib, secs, Timeline } from "./timeline.ts";
import { runWorkload, type WorkloadResult } from "./workload.ts";
import { demoWorkflow } from "./workflow.ts";
import { watchLines } from "./pointers.ts";

export interface DemoOptions {
  once: boolean;
  withoutTurnstile: boolean;
  /** Where the timeline goes (default stdout). */
  out?: (s: string) => void;
  color?: boolean;
}

/** An RTX 5080: the card this project was written for. */
export const VRAM = 16 * 1024 ** 3;

/** One simulated card as the demo shows it: a 16 GiB GPU, a 7B chat model, a 10.5 GiB checkpoint. */
export function startDemoSims(): Promise<SimPair> {
  return startSimPair({
    vramBytes: VRAM,
    ollama: { loadMs: 700, unloadMs: 250, tokenDelayMs: 60, tokens: 24 },
    comfy: { jobMs: 1800, freeDelayMs: 300, modelBytes: 10.5 * 1024 ** 3 },
  });
}

export async function runDemo(opts: DemoOptions): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const color = opts.color ?? useColor(process.stdout);
  const tl = new Timeline(out, color);

  const sims = await startDemoSims();
  sims.gpu.on(gpuNarrator(tl));

  let turnstile: Turnstile | undefined;
  if (!opts.withoutTurnstile) turnstile = startDemoTurnstile(sims, tl);
  const targets = turnstile
    ? { ollama: turnstile.listener("ollama")!.url, comfy: turnstile.listener("comfy")!.url, nested: turnstile.listener("nested")!.url }
    : { ollama: sims.ollama.url, comfy: sims.comfy.url, nested: sims.ollama.url };

  tl.text(
    `gpu-turnstile ${VERSION} demo — simulated Ollama ${sims.ollama.url} and ComfyUI ${sims.comfy.url} on one ${gib(VRAM)} GPU`,
    "gpu",
  );
  tl.text(
    turnstile
      ? `clients talk to the turnstile: Ollama side ${targets.ollama}, ComfyUI side ${targets.comfy}, ComfyUI's prompt-enhancer ${targets.nested} (nested)\n`
      : "WITHOUT the turnstile: clients talk straight to the simulators\n",
    turnstile ? "plain" : "warn",
  );
  if (turnstile) {
    tl.text("watch the card while it runs:", "gpu");
    for (const l of watchLines(targets.ollama)) tl.text(l);
    tl.text("");
  }

  const result = await runWorkload(targets, tl);
  await turnstile?.tracker.settled();
  await waitUntilQuiet(sims);
  const overlaps = printSummary(tl, sims, result, !!turnstile);

  if (!opts.once) {
    const workflow = printTryIt(tl, targets, !!turnstile);
    await untilStopped();
    rmSync(workflow, { force: true });
  }
  await turnstile?.stop(1000);
  await sims.stop();
  // --without-turnstile exists to show the harm: overlaps are its expected result, not a failure.
  return opts.withoutTurnstile || overlaps === 0 ? 0 : 1;
}

/** `card`: CARD_NAME, and the prefix of every line about this card (demo --cards). */
export function startDemoTurnstile(sims: SimPair, tl: Timeline, card = ""): Turnstile {
  const on = card ? `${card} ` : "";
  const { config } = buildConfig({
    entries: [],
    file: null,
    platform: currentPlatform(),
    env: {
      OLLAMA_URL: sims.ollama.url,
      COMFY_URL: sims.comfy.url,
      LISTEN_OLLAMA: "127.0.0.1:0",
      LISTEN_COMFY: "127.0.0.1:0",
      LISTEN_OLLAMA_NESTED: "127.0.0.1:0",
      UNLOAD_POLL_INTERVAL: "50ms",
      HISTORY_POLL_INTERVAL: "100ms",
      FREE_POLL_INTERVAL: "50ms",
      AUTO_UPDATE: "false",
      APP_VER: "dev",
      LOGLEVEL: "error",
      ...(card ? { CARD_NAME: card } : {}),
    },
  });
  const t = startTurnstile({
    config,
    log: createLogger({ level: "error", format: "text" }),
    version: VERSION,
    onJobEvent: jobNarrator(tl, on),
  });
  t.lock.onEvent((e) => {
    if (e.type !== "transition") return;
    const s = e.snapshot;
    const why =
      e.to === "image" ? "an image job has the GPU" : e.to === "llm" ? `${s.llmInflight} LLM request(s) running` : "nothing running";
    const queued = [s.imageWaiting && `${s.imageWaiting} image job(s) queued`, s.llmWaiting && `${s.llmWaiting} LLM request(s) waiting`]
      .filter(Boolean)
      .join(", ");
    tl.event(`${on}GPU`, `${e.from} → ${e.to}: ${why}${queued ? ` (${queued})` : ""}`, "gpu");
  });
  t.lock.onEvent((e) => {
    if (e.type === "acquired" && e.kind === "llm" && e.waitedMs > 50) tl.event(`${on}turnstile`, `an LLM request waited ${secs(e.waitedMs)} for the image jobs`, "wait");
    if (e.type === "abandoned") tl.event(`${on}turnstile`, `a waiting ${e.kind} request left after ${secs(e.waitedMs)}; nothing to undo`, "wait");
  });
  return t;
}

function jobNarrator(tl: Timeline, on = ""): (e: ImageJobEvent) => void {
  return (e) => {
    const who = `${on}image job ${"jobId" in e ? e.jobId : ""}`.trim();
    switch (e.phase) {
      case "acquired":
        return tl.event(who, e.joined ? `joined the image session after ${secs(e.waitedMs)}` : `got the GPU after waiting ${secs(e.waitedMs)}`, "image");
      case "unloaded":
        return tl.event(who, `Ollama emptied (${e.models.join(", ") || "nothing loaded"}) in ${secs(e.durationMs)}`, "image");
      case "forwarded":
        return tl.event(who, `forwarded to ComfyUI, which answered ${e.status}`, "image");
      case "finished":
        return tl.event(who, `ComfyUI reports the job ${e.end} after ${secs(e.durationMs)}`, "image");
      case "freed":
        return tl.event(
          who,
          e.released
            ? `ComfyUI freed its VRAM (${gib(e.vramBefore ?? 0)} → ${gib(e.vramAfter ?? 0)}) in ${secs(e.durationMs)}`
            : `VRAM release not confirmed: ${e.error}`,
          e.released ? "image" : "warn",
        );
      case "released":
        return tl.event(who, e.gpuReleased ? `GPU released after ${secs(e.heldMs)} (${e.outcome})` : `done after ${secs(e.heldMs)} (${e.outcome}); the session goes on`, "image");
      default:
        return;
    }
  };
}

/** Narrates what the simulated card sees: loads, jobs, and — the point — any overlap. */
export function gpuNarrator(tl: Timeline, card = ""): (e: GpuEvent) => void {
  const on = card ? `${card} ` : "";
  return (e) => {
    const used = `[VRAM ${gib(e.vramUsed)}]`;
    switch (e.kind) {
      case "loaded":
        return e.tenant === "comfy" ? tl.event(`${on}comfyui`, `checkpoint loaded (cold) ${used}`, "dim") : tl.event(`${on}ollama`, `loaded ${e.detail} ${used}`, "dim");
      case "unloaded":
        return tl.event(`${on}ollama`, `unloaded ${e.detail} ${used}`, "dim");
      case "job-start":
        return tl.event(`${on}comfyui`, `job ${e.detail.slice(0, 8)} running`, "dim");
      case "hold":
        return e.tenant === "comfy" ? tl.event(`${on}comfyui`, `loading its checkpoint ${used}`, "dim") : undefined;
      case "freed":
        return tl.event(`${on}comfyui`, `models unloaded ${used}`, "dim");
      case "overlap-start":
        if (e.nested) return tl.event(`${on}GPU`, `shared by choice: the prompt-enhancer's ${e.detail} loads beside the image job that asked for it ${used}`, "image");
        return tl.event(`${on}GPU`, `OVERLAP: Ollama and ComfyUI both hold VRAM ${used}`, "warn");
      case "oversubscribed":
        return tl.event(`${on}GPU`, `OVERSUBSCRIBED: ${gib(e.vramUsed)} asked of a ${gib(VRAM)} card — the driver spills to system RAM or OOMs`, "warn");
      default:
        return;
    }
  };
}

/** Models stay loaded for their keep-alive; the summary is about the workload, so stop waiting once nothing runs. */
export async function waitUntilQuiet(sims: SimPair): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && (sims.ollama.inflight() > 0 || sims.comfy.runningJob())) await Bun.sleep(50);
}

function printSummary(tl: Timeline, sims: SimPair, r: WorkloadResult, withTurnstile: boolean): number {
  const served = r.chats.filter((c) => c.r.ok).length;
  const gaveUp = r.chats.filter((c) => c.r.aborted).length;
  const failed = r.chats.filter((c) => !c.r.ok && !c.r.aborted).length;
  const firsts = r.chats.filter((c) => c.r.firstTokenMs !== undefined).map((c) => c.r.firstTokenMs!);
  const images = r.images.filter((i) => i.r.ok).length;
  // What the nested listener does by design is reported apart, never hidden in or taken from the count.
  const overlaps = sims.gpu.overlaps({ excuseNested: true });
  const nestedOverlaps = sims.gpu.overlaps().length - overlaps.length;
  const nestedCalls = sims.ollama.calls.filter((c) => c.headers["x-gpu-turnstile-nested"] !== undefined).length;
  const over = sims.gpu.oversubscriptions;
  tl.text("");
  tl.text(`summary (${withTurnstile ? "with" : "WITHOUT"} the turnstile)`, "gpu");
  tl.text(`  chats answered:       ${served} of ${r.chats.length}${gaveUp ? `, ${gaveUp} client gave up while waiting` : ""}${failed ? `, ${failed} failed` : ""}`);
  tl.text(`  embedding batches:    ${r.embeds.ok} ok${r.embeds.failed ? `, ${r.embeds.failed} failed` : ""}`);
  tl.text(`  images generated:     ${images} of ${r.images.length}`);
  if (firsts.length) {
    const note = withTurnstile ? " (the longest waited for the image jobs)" : "";
    tl.text(`  first token after:    ${secs(Math.min(...firsts))} … ${secs(Math.max(...firsts))}${note}`);
  }
  const longestWait = Math.max(0, ...r.chats.map((c) => c.r.firstTokenMs ?? (c.r.aborted ? c.r.totalMs : 0)));
  tl.text(`  longest LLM wait:     ${secs(longestWait)} until the first token`);
  tl.text(`  makespan:             ${secs(r.makespanMs)}`);
  tl.text(`  checkpoint loads:     ${sims.comfy.checkpointLoads()}, /free calls: ${sims.comfy.calls.filter((c) => /^(\/api)?\/free$/.test(c.path)).length}`);
  tl.text(`  VRAM oversubscribed:  ${over.length} time(s)`, over.length ? "warn" : "ok");
  if (withTurnstile) {
    tl.text(`  nested LLM calls:     ${nestedCalls} served during image jobs, sharing the card by the operator's choice (${nestedOverlaps} such overlap(s))`);
  }
  tl.text(`  GPU overlaps: ${overlaps.length}`, overlaps.length ? "warn" : "ok");
  return overlaps.length;
}

/** Prints curl lines to try by hand; returns the workflow file it wrote for them. */
export function printTryIt(tl: Timeline, t: { ollama: string; comfy: string }, withTurnstile: boolean): string {
  tl.text("");
  tl.text(`still running — try it by hand (Ctrl-C to stop):`, "gpu");
  tl.text(`  curl -N ${t.ollama}/api/chat -d '{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}'`);
  const workflow = join(tmpdir(), `gpu-turnstile-demo-workflow-${process.pid}.json`);
  writeFileSync(workflow, JSON.stringify(demoWorkflow("a cat made of clouds", 1, "by-hand"), null, 2));
  tl.text(`  curl ${t.comfy}/prompt -H 'content-type: application/json' -d @${workflow}`);
  if (withTurnstile) {
    for (const l of watchLines(t.ollama)) tl.text(l);
    tl.text(`  curl ${t.ollama}/healthz`);
    tl.text(`  curl ${t.comfy}/metrics`);
  }
  return workflow;
}
