/**
 * Scenario 5: lock hand-off, turnstile only (a plain proxy has no lock to hand off).
 *
 * One cycle: chat A streams through the turnstile; while it runs, an image job is posted (it
 * waits for A to drain) and, once /healthz shows the image pending, chat B is sent (it waits
 * for the image job). All times come from the upstreams' own call logs (`calls[].at`) and
 * Ollama's `created_at` stamps — one process, one clock:
 *
 *   LLM → image:  (first /api/ps after A's final chunk was stamped − that stamp)
 *               + (/prompt arrival at ComfyUI − last /api/ps arrival)
 *     The unload wait excluded is first → last /api/ps (ask, unload, poll until empty), which
 *     depends on Ollama's unload time and UNLOAD_POLL_INTERVAL, not on the turnstile's speed.
 *   image → LLM:  B's /api/chat arrival at Ollama − the last /system_stats arrival (the poll
 *     that saw the memory back after /free). The free wait excluded is /free → that poll.
 */
import { now } from "../lib/clock.ts";
import { summarize, type Summary } from "../lib/stats.ts";
import type { CallStamp } from "../upstream-host.ts";
import { openChat } from "./chat-stream.ts";
import { CHAT_BODY } from "./types.ts";

/** ComfyUI's default text-to-image workflow (what its web UI posts). */
export const DEFAULT_WORKFLOW = {
  "3": { class_type: "KSampler", inputs: { seed: 156680208700286, steps: 20, cfg: 8, sampler_name: "euler", scheduler: "normal", denoise: 1, model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] } },
  "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "v1-5-pruned-emaonly-fp16.safetensors" } },
  "5": { class_type: "EmptyLatentImage", inputs: { width: 512, height: 512, batch_size: 1 } },
  "6": { class_type: "CLIPTextEncode", inputs: { text: "beautiful scenery nature glass bottle landscape, purple galaxy bottle,", clip: ["4", 1] } },
  "7": { class_type: "CLIPTextEncode", inputs: { text: "text, watermark", clip: ["4", 1] } },
  "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
  "9": { class_type: "SaveImage", inputs: { filename_prefix: "ComfyUI", images: ["8", 0] } },
};

export interface HandoffCycle {
  ok: boolean;
  why?: string;
  /** LLM → image overhead beyond the unload wait. */
  llmToImageMs?: number;
  /** Its two parts: lock release → first /api/ps, and last /api/ps → /prompt. */
  releaseToPsMs?: number;
  psToPromptMs?: number;
  unloadWaitMs?: number;
  /** image → LLM overhead beyond the free wait. */
  imageToLlmMs?: number;
  freeWaitMs?: number;
}

export interface HandoffResult {
  cycles: HandoffCycle[];
  llmToImageMs: Summary;
  releaseToPsMs: Summary;
  psToPromptMs: Summary;
  unloadWaitMs: Summary;
  imageToLlmMs: Summary;
  freeWaitMs: Summary;
}

export interface HandoffOptions {
  ollamaUrl: string;
  comfyUrl: string;
  ollamaName: string;
  comfyName: string;
  calls(name: string): Promise<CallStamp[]>;
  clear(name: string): Promise<void>;
  cycles: number;
  note: (s: string) => void;
}

async function until(cond: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = now() + timeoutMs;
  while (!(await cond())) {
    if (now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(1);
  }
}

async function health(base: string): Promise<{ state: string; llm_inflight: number; image_pending: boolean }> {
  const res = await fetch(`${base}/healthz`);
  return (await res.json()) as { state: string; llm_inflight: number; image_pending: boolean };
}

async function oneCycle(o: HandoffOptions): Promise<HandoffCycle> {
  await until(async () => (await health(o.ollamaUrl)).state === "idle", 10_000, "an idle lock");
  await o.clear(o.ollamaName);
  await o.clear(o.comfyName);

  const a = openChat(o.ollamaUrl, "/api/chat", CHAT_BODY("Why is the sky blue?", 10));
  await a.first;
  const image = fetch(`${o.comfyUrl}/prompt`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, client_id: "bench" }),
  }).then(async (r) => ({ status: r.status, body: await r.text() }));
  await until(async () => (await health(o.comfyUrl)).image_pending, 5000, "the image job to be pending");
  const b = openChat(o.ollamaUrl, "/api/chat", CHAT_BODY("And why are sunsets red?", 3));
  const [ra, ri, rb] = await Promise.all([a.finished, image, b.finished]);
  if (ri.status !== 200) return { ok: false, why: `/prompt answered ${ri.status}: ${ri.body.slice(0, 120)}` };
  if (ra.status !== 200 || rb.status !== 200) return { ok: false, why: `chat answered ${ra.status}/${rb.status}` };

  const ol = await o.calls(o.ollamaName);
  const co = await o.calls(o.comfyName);
  const llmEnd = ra.lines.at(-1)?.createdAt ?? NaN;
  const chats = ol.filter((c) => c.method === "POST" && c.path === "/api/chat");
  const prompt = co.find((c) => c.method === "POST" && (c.path === "/prompt" || c.path === "/api/prompt"));
  const free = co.find((c) => c.method === "POST" && (c.path === "/free" || c.path === "/api/free"));
  const bArrival = chats[1];
  if (!Number.isFinite(llmEnd) || !prompt || !free || !bArrival) {
    return { ok: false, why: `missing calls (chats ${chats.length}, prompt ${!!prompt}, free ${!!free})` };
  }
  const ps = ol.filter((c) => c.path === "/api/ps" && c.at >= llmEnd && c.at <= prompt.at);
  const stats = co.filter((c) => c.path.endsWith("/system_stats") && c.at >= free.at && c.at <= bArrival.at);
  const ps1 = ps[0];
  const psN = ps.at(-1);
  const statsN = stats.at(-1);
  if (!ps1 || !psN || !statsN) return { ok: false, why: `no /api/ps (${ps.length}) or /system_stats (${stats.length}) in the expected windows` };
  return {
    ok: true,
    llmToImageMs: ps1.at - llmEnd + (prompt.at - psN.at),
    releaseToPsMs: ps1.at - llmEnd,
    psToPromptMs: prompt.at - psN.at,
    unloadWaitMs: psN.at - ps1.at,
    imageToLlmMs: bArrival.at - statsN.at,
    freeWaitMs: statsN.at - free.at,
  };
}

export async function handoff(o: HandoffOptions): Promise<HandoffResult> {
  const cycles: HandoffCycle[] = [];
  for (let i = 0; i < o.cycles; i++) {
    let c: HandoffCycle;
    try {
      c = await oneCycle(o);
    } catch (err) {
      c = { ok: false, why: err instanceof Error ? err.message : String(err) };
    }
    cycles.push(c);
    if (!c.ok) o.note(`  cycle ${i + 1}: ${c.why}`);
  }
  const ok = cycles.filter((c) => c.ok);
  const res: HandoffResult = {
    cycles,
    llmToImageMs: summarize(ok.map((c) => c.llmToImageMs!)),
    releaseToPsMs: summarize(ok.map((c) => c.releaseToPsMs!)),
    psToPromptMs: summarize(ok.map((c) => c.psToPromptMs!)),
    unloadWaitMs: summarize(ok.map((c) => c.unloadWaitMs!)),
    imageToLlmMs: summarize(ok.map((c) => c.imageToLlmMs!)),
    freeWaitMs: summarize(ok.map((c) => c.freeWaitMs!)),
  };
  o.note(
    `  ${ok.length}/${cycles.length} cycles  LLM→image p50 ${res.llmToImageMs.p50.toFixed(3)} ms (unload wait ${res.unloadWaitMs.p50.toFixed(1)} ms)  image→LLM p50 ${res.imageToLlmMs.p50.toFixed(3)} ms (free wait ${res.freeWaitMs.p50.toFixed(1)} ms)`,
  );
  return res;
}
