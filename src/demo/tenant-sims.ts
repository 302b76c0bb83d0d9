/**
 * The simulated tenant of each kind, as `demo --llm <kind> --image <kind>` runs it: how to start
 * it on the demo's card and how one of its clients asks for work. One table per side, one line
 * per kind (the image kinds other than ComfyUI are filled in by their drivers' branch).
 */
import type { ImageKind, LlmKind } from "../config/tenant-kinds.ts";
import type { SimGpu } from "../sim/gpu.ts";
import { startComfySim, startOllamaSim } from "../sim/index.ts";
import { startLlamaServerSim } from "../sim/llama-server.ts";
import { startLlamaSwapSim } from "../sim/llama-swap.ts";
import type { LlmSimOptions } from "../sim/llm-server.ts";
import { startLmStudioSim } from "../sim/lmstudio.ts";
import { startVllmSim } from "../sim/vllm.ts";
import { IMAGE_KIND_SIMS } from "../sim/image-kinds.ts";
import { generateImage } from "./clients.ts";
import { demoWorkflow } from "./workflow.ts";

export interface RunningSim {
  url: string;
  stop(): Promise<void>;
  /** Settings the turnstile needs for this tenant beyond its URL and kind. */
  env?: Record<string, string>;
}

export interface LlmDemoSim {
  label: string;
  /** The model the demo's chats ask for (through /v1/chat/completions, which every LLM kind serves). */
  model: string;
  start(gpu: SimGpu): Promise<RunningSim>;
}

export interface ImageDemoSim {
  label: string;
  start(gpu: SimGpu): Promise<RunningSim>;
  /** One client's image, from asking to the picture (or the failure). */
  generate(base: string, signal?: AbortSignal): Promise<{ ok: boolean; ms: number }>;
}

/** The demo's pace: a 7B model loads in 0.7 s and answers 24 tokens at 60 ms each. */
const LLM_PACE = { loadMs: 700, unloadMs: 250, tokenDelayMs: 60, tokens: 24 };
const OPENAI_MODEL = "qwen2.5-7b-instruct";

function llm(label: string, start: (o: LlmSimOptions) => Promise<RunningSim>): LlmDemoSim {
  return { label, model: OPENAI_MODEL, start: (gpu) => start({ ...LLM_PACE, gpu }) };
}

export const LLM_DEMO_SIMS: Record<LlmKind, LlmDemoSim> = {
  ollama: { label: "Ollama", model: "qwen2.5:7b", start: (gpu) => startOllamaSim({ ...LLM_PACE, gpu }) },
  "llama-server": llm("llama-server", startLlamaServerSim),
  "llama-swap": llm("llama-swap", startLlamaSwapSim),
  lmstudio: llm("LM Studio", startLmStudioSim),
  vllm: llm("vLLM", startVllmSim),
};

export const IMAGE_DEMO_SIMS: Record<ImageKind, ImageDemoSim | undefined> = {
  comfyui: {
    label: "ComfyUI",
    start: (gpu) => startComfySim({ gpu, jobMs: 1800, freeDelayMs: 300, modelBytes: 10.5 * 1024 ** 3 }),
    async generate(base) {
      const t0 = performance.now();
      const r = await generateImage(base, demoWorkflow("a lighthouse at dusk, oil painting", 42, "demo-pair"), () => {});
      return { ok: r.ok, ms: performance.now() - t0 };
    },
  },
  // AUTOMATIC1111 and Forge (tenants-image)
  a1111: syncImage("a1111"),
  // SwarmUI (tenants-image)
  swarmui: syncImage("swarmui"),
};

/** A1111 and SwarmUI at the demo's pace (an SDXL picture in 1.8 s, a 10.5 GiB checkpoint): the request is the job. */
function syncImage(kind: "a1111" | "swarmui"): ImageDemoSim {
  const sim = IMAGE_KIND_SIMS[kind];
  return {
    label: sim.label,
    start: (gpu) => sim.start(gpu, { jobMs: 1800, loadMs: 900, reloadMs: 300, unloadMs: 300, bytes: 10.5 * 1024 ** 3, checkpoint: "sd_xl_base_1.0.safetensors [31e35c80fc]" }),
    async generate(base, signal) {
      const t0 = performance.now();
      const r = await sim.generate(base, { signal }).catch(() => undefined);
      const ok = r !== undefined && r.status === 200 && (await r.text().catch(() => "")).includes('"images"');
      return { ok, ms: performance.now() - t0 };
    },
  };
}
