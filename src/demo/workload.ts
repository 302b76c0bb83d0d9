/**
 * The scripted workload, the same with or without the turnstile: streaming chats from several
 * clients, an embedding batch, an image job arriving mid-chat, a second one queued behind it, a
 * burst of three more from a batch UI, a chat that arrives while the images run, a client that
 * gives up while waiting, and a workflow whose prompt-enhancer step asks Ollama mid-job (on the
 * nested listener).
 */
import { embed, generateImage, streamChat, type ChatResult, type ImageResult } from "./clients.ts";
import { secs, type Timeline } from "./timeline.ts";
import { demoWorkflow, enhancerWorkflow } from "./workflow.ts";

export interface Targets {
  ollama: string;
  comfy: string;
  /**
   * Where ComfyUI's prompt-enhancer node calls Ollama: the nested listener (or Ollama itself,
   * without the turnstile). Absent (several cards behind a balancer): no prompt-enhancer job.
   */
  nested?: string;
}

/** The prompt-enhancer's model: small enough to share the card with the image job that asks for it. */
const ENHANCER_MODEL = "llama3.2";

export interface WorkloadResult {
  chats: { who: string; r: ChatResult }[];
  embeds: { ok: number; failed: number };
  images: { who: string; r: ImageResult }[];
  /** From the first request to the last answer. */
  makespanMs: number;
}

const CHAT_MODEL = "qwen2.5:7b";
const EMBED_MODEL = "nomic-embed-text";

export async function runWorkload(t: Targets, tl: Timeline): Promise<WorkloadResult> {
  const at = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms - tl.elapsed())));
  const chats: WorkloadResult["chats"] = [];
  const images: WorkloadResult["images"] = [];

  const chat = async (who: string, startMs: number, api: "ollama" | "openai", opts: { giveUpMs?: number } = {}) => {
    await at(startMs);
    tl.event(who, `asks ${CHAT_MODEL} (${api === "ollama" ? "POST /api/chat" : "POST /v1/chat/completions"}, streaming)`, "llm");
    const signal = opts.giveUpMs ? AbortSignal.timeout(opts.giveUpMs) : undefined;
    const r = await streamChat(t.ollama, { model: CHAT_MODEL, prompt: "Tell me about GPUs.", api, signal });
    chats.push({ who, r });
    if (r.aborted) tl.event(who, `gave up after ${secs(r.totalMs)} without an answer`, "warn");
    else if (!r.ok) tl.event(who, `failed: HTTP ${r.status} ${r.error ?? ""}`, "warn");
    else {
      tl.event(who, `answered: first token after ${secs(r.firstTokenMs ?? 0)}, ${r.tokens} tokens in ${secs(r.totalMs)}`, "ok");
    }
  };

  const image = async (who: string, startMs: number, text: string, seed: number, enhance = false) => {
    await at(startMs);
    if (enhance) tl.event(who, `queues an image whose prompt-enhancer step asks ${ENHANCER_MODEL} mid-job, on the nested listener: "${text}"`, "image");
    else tl.event(who, `queues an image: "${text}" (POST /prompt)`, "image");
    const workflow = enhance ? enhancerWorkflow(text, seed, `demo-${who}`, t.nested!, ENHANCER_MODEL) : demoWorkflow(text, seed, `demo-${who}`);
    const r = await generateImage(t.comfy, workflow, (id, ms) =>
      tl.event(who, `ComfyUI accepted prompt ${id.slice(0, 8)} after ${secs(ms)}`, "image"),
    );
    images.push({ who, r });
    if (r.ok) tl.event(who, `image ready after ${secs(r.doneMs ?? 0)}`, "ok");
    else tl.event(who, `image failed: HTTP ${r.status} ${r.error ?? ""}`, "warn");
  };

  const embeds = { ok: 0, failed: 0 };
  const indexer = async (startMs: number) => {
    await at(startMs);
    tl.event("rag-indexer", `embeds 4 batches of documents with ${EMBED_MODEL}`, "llm");
    const t0 = tl.elapsed();
    const rs = await Promise.all([0, 1, 2, 3].map((i) => embed(t.ollama, EMBED_MODEL, [`document ${i}a`, `document ${i}b`])));
    for (const r of rs) r.ok ? embeds.ok++ : embeds.failed++;
    tl.event("rag-indexer", `${embeds.ok} batches embedded in ${secs(tl.elapsed() - t0)}`, embeds.failed ? "warn" : "ok");
  };

  const t0 = tl.elapsed();
  await Promise.all([
    chat("alice", 0, "ollama"),
    chat("bob", 300, "openai"),
    indexer(600),
    image("open-webui", 1200, "a lighthouse at dusk, oil painting", 42),
    image("n8n", 1500, "a red bicycle in the rain", 7),
    chat("carol", 1800, "ollama"),
    chat("impatient", 2000, "openai", { giveUpMs: 2500 }),
    ...["a fox in the snow", "a fox in the desert", "a fox in the city"].map((text, i) => image("batch-ui", 2400, text, 100 + i)),
    t.nested !== undefined && image("enhancer-flow", 2600, "a fox, but make it epic", 200, true),
  ]);
  return { chats, embeds, images, makespanMs: tl.elapsed() - t0 };
}
