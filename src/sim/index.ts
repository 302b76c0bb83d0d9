/**
 * Simulated Ollama and ComfyUI sharing one simulated GPU: the fakes of the end-to-end tests and
 * the tenants of `gpu-turnstile demo` (one implementation for both).
 */
import { type ComfySim, type ComfySimOptions, startComfySim } from "./comfy.ts";
import { SimGpu } from "./gpu.ts";
import { type OllamaSim, type OllamaSimOptions, startOllamaSim } from "./ollama.ts";

export { type ComfySim, type ComfySimOptions, startComfySim } from "./comfy.ts";
export type { JobInfo, JobState } from "./comfy-worker.ts";
export {
  DEFAULT_VRAM_BYTES,
  type GpuEvent,
  type GpuEventKind,
  type GpuListener,
  type Hold,
  type Overlap,
  type OverlapOptions,
  type Oversubscription,
  SimGpu,
  type SimGpuOptions,
  type Tenant,
} from "./gpu.ts";
export type { OverrideHandler, RecordedCall } from "./http.ts";
export { type OllamaSim, type OllamaSimOptions, startOllamaSim } from "./ollama.ts";
export { DEFAULT_MODELS, type ModelSpec } from "./ollama-models.ts";
export { BIG_FILE } from "./comfy-files.ts";

export interface SimPairOptions {
  /** VRAM budget of the shared GPU (default 25386352640, an RTX 4090). */
  vramBytes?: number;
  ollama?: Omit<OllamaSimOptions, "gpu">;
  comfy?: Omit<ComfySimOptions, "gpu">;
}

export interface SimPair {
  gpu: SimGpu;
  ollama: OllamaSim;
  comfy: ComfySim;
  stop(): Promise<void>;
}

/** Starts both simulators on one shared GPU. */
export async function startSimPair(opts: SimPairOptions = {}): Promise<SimPair> {
  const gpu = new SimGpu({ vramBytes: opts.vramBytes });
  const ollama = await startOllamaSim({ ...opts.ollama, gpu });
  let comfy: ComfySim;
  try {
    comfy = await startComfySim({ ...opts.comfy, gpu });
  } catch (e) {
    await ollama.stop();
    throw e;
  }
  return {
    gpu,
    ollama,
    comfy,
    async stop() {
      await Promise.all([ollama.stop(), comfy.stop()]);
    },
  };
}
