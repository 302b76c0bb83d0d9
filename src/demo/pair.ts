/**
 * `gpu-turnstile demo --llm <kind> --image <kind>`: any pair of tenant kinds on one simulated
 * 16 GiB card (their simulators, src/demo/tenant-sims.ts), the real turnstile in front with
 * LLM_KIND and IMAGE_KIND set, a short mixed workload of streamed chats (OpenAI API, which every
 * LLM kind serves) and images, and the ledger's verdict. `--without-turnstile` sends the same
 * workload straight at the simulators and shows the overlap the turnstile prevents.
 */
import { buildConfig } from "../config/load.ts";
import { currentPlatform } from "../config/settings.ts";
import { IMAGE_KIND_ALIASES, IMAGE_KINDS, LLM_KINDS, type ImageKind, type LlmKind } from "../config/tenant-kinds.ts";
import { createLogger } from "../observe/log.ts";
import { useColor } from "../runtime/color.ts";
import { SimGpu } from "../sim/gpu.ts";
import { startTurnstile, type Turnstile } from "../turnstile.ts";
import { VERSION } from "../version.ts";
import { streamChat } from "./clients.ts";
import { VRAM } from "./run.ts";
import { untilStopped } from "./stop.ts";
import { IMAGE_DEMO_SIMS, LLM_DEMO_SIMS, type RunningSim } from "./tenant-sims.ts";
import { gib, secs, Timeline } from "./timeline.ts";

export interface PairDemoOptions {
  llm: string;
  image: string;
  once: boolean;
  withoutTurnstile: boolean;
  out?: (s: string) => void;
  color?: boolean;
}

/** The kinds asked for, or the message that names the flag and lists the kinds. */
export function pickPair(llm: string, asked: string): { llm: LlmKind; image: ImageKind } | string {
  // As IMAGE_KIND reads it: forge is a1111.
  const image = Object.hasOwn(IMAGE_KIND_ALIASES, asked) ? IMAGE_KIND_ALIASES[asked]! : asked;
  if (!(LLM_KINDS as readonly string[]).includes(llm)) return `--llm ${llm}: unknown kind (one of ${LLM_KINDS.join(", ")})`;
  if (!(IMAGE_KINDS as readonly string[]).includes(image)) return `--image ${image}: unknown kind (one of ${IMAGE_KINDS.join(", ")})`;
  if (!IMAGE_DEMO_SIMS[image as ImageKind]) return `--image ${image}: this build has no simulator for it yet`;
  return { llm: llm as LlmKind, image: image as ImageKind };
}

export async function runPairDemo(opts: PairDemoOptions): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const picked = pickPair(opts.llm, opts.image);
  if (typeof picked === "string") {
    process.stderr.write(`demo: ${picked}\n`);
    return 2;
  }
  const tl = new Timeline(out, opts.color ?? useColor(process.stdout));
  const llmSim = LLM_DEMO_SIMS[picked.llm];
  const imageSim = IMAGE_DEMO_SIMS[picked.image]!;
  const gpu = new SimGpu({ vramBytes: VRAM });
  const narrate = (): unknown => gpu.on((e) => {
    const who = e.tenant === "ollama" ? llmSim.label : imageSim.label;
    const used = `[VRAM ${gib(e.vramUsed)}]`;
    if (e.kind === "hold") tl.event(who, `takes VRAM for ${e.detail} ${used}`, "dim");
    else if (e.kind === "free") tl.event(who, `gives VRAM back (${e.detail}) ${used}`, "dim");
    else if (e.kind === "overlap-start") tl.event("GPU", `OVERLAP: ${llmSim.label} and ${imageSim.label} both hold VRAM ${used}`, "warn");
  });
  const started: RunningSim[] = [];
  let turnstile: Turnstile | undefined;
  try {
    const l = await llmSim.start(gpu);
    started.push(l);
    const i = await imageSim.start(gpu);
    started.push(i);
    if (!opts.withoutTurnstile) turnstile = startPairTurnstile(picked, l, i);
    const targets = turnstile ? { llm: turnstile.listener("ollama")!.url, image: turnstile.listener("comfy")!.url } : { llm: l.url, image: i.url };
    tl.text(`gpu-turnstile ${VERSION} demo — simulated ${llmSim.label} ${l.url} and ${imageSim.label} ${i.url} on one ${gib(VRAM)} GPU`, "gpu");
    tl.text(
      turnstile
        ? `clients talk to the turnstile (LLM_KIND=${picked.llm}, IMAGE_KIND=${picked.image}): LLM side ${targets.llm}, image side ${targets.image}\n`
        : "WITHOUT the turnstile: clients talk straight to the simulators\n",
      turnstile ? "plain" : "warn",
    );
    narrate();
    const t0 = performance.now();
    const at = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms - (performance.now() - t0))));
    let chatsOk = 0;
    let imagesOk = 0;
    const chat = async (who: string, startMs: number) => {
      await at(startMs);
      tl.event(who, `asks ${llmSim.model} (POST /v1/chat/completions, streaming)`, "llm");
      const r = await streamChat(targets.llm, { model: llmSim.model, prompt: "Tell me about GPUs.", api: "openai" });
      if (r.ok) chatsOk++;
      tl.event(who, r.ok ? `answered: first token after ${secs(r.firstTokenMs ?? 0)}, ${r.tokens} tokens` : `failed: HTTP ${r.status} ${r.error ?? ""}`, r.ok ? "ok" : "warn");
    };
    const image = async (who: string, startMs: number) => {
      await at(startMs);
      tl.event(who, `asks ${imageSim.label} for an image`, "image");
      const r = await imageSim.generate(targets.image);
      if (r.ok) imagesOk++;
      tl.event(who, r.ok ? `image ready after ${secs(r.ms)}` : "image failed", r.ok ? "ok" : "warn");
    };
    await Promise.all([chat("alice", 0), chat("bob", 300), image("open-webui", 1200), image("n8n", 1500), chat("carol", 1800), image("batch-ui", 2400)]);
    const overlaps = gpu.overlaps();
    tl.text("");
    tl.text(`summary (${turnstile ? "with" : "WITHOUT"} the turnstile): ${llmSim.label} + ${imageSim.label}`, "gpu");
    tl.text(`  chats answered:      ${chatsOk} of 3`);
    tl.text(`  images generated:    ${imagesOk} of 3`);
    tl.text(`  VRAM oversubscribed: ${gpu.oversubscriptions.length} time(s)`, gpu.oversubscriptions.length ? "warn" : "ok");
    tl.text(`  GPU overlaps: ${overlaps.length}`, overlaps.length ? "warn" : "ok");
    if (!opts.once) {
      tl.text("");
      tl.text("still running — try it by hand (Ctrl-C to stop):", "gpu");
      tl.text(`  curl -N ${targets.llm}/v1/chat/completions -d '{"model":"${llmSim.model}","stream":true,"messages":[{"role":"user","content":"hi"}]}'`);
      if (turnstile) tl.text(`  open ${targets.llm}/turnstile/`);
      await untilStopped();
    }
    return opts.withoutTurnstile || overlaps.length === 0 ? 0 : 1;
  } finally {
    await turnstile?.stop(1000);
    await Promise.all(started.map((s) => s.stop()));
  }
}

function startPairTurnstile(kinds: { llm: LlmKind; image: ImageKind }, llm: RunningSim, image: RunningSim): Turnstile {
  const { config } = buildConfig({
    entries: [],
    file: null,
    platform: currentPlatform(),
    env: {
      OLLAMA_URL: llm.url,
      COMFY_URL: image.url,
      LLM_KIND: kinds.llm,
      IMAGE_KIND: kinds.image,
      LISTEN_OLLAMA: "127.0.0.1:0",
      LISTEN_COMFY: "127.0.0.1:0",
      UNLOAD_POLL_INTERVAL: "50ms",
      HISTORY_POLL_INTERVAL: "100ms",
      FREE_POLL_INTERVAL: "50ms",
      AUTO_UPDATE: "false",
      APP_VER: "dev",
      LOGLEVEL: "error",
      ...llm.env,
      ...image.env,
    },
  });
  return startTurnstile({ config, log: createLogger({ level: "error", format: "text" }), version: VERSION });
}
