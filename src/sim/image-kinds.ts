/**
 * The image simulators by IMAGE_KIND name, with the one thing a client does with each (send one
 * generation and read its answer), so the demo, the end-to-end tests, the chaos run and the
 * benchmarks can take the image kind as a parameter. ComfyUI (the default kind) has its own
 * richer fixtures (comfy.ts, demo/workflow.ts) and is not listed here.
 */
import { type A1111SimOptions, startA1111Sim } from "./a1111.ts";
import type { SimGpu } from "./gpu.ts";
import type { RecordedCall } from "./http.ts";
import type { SimCheckpoint } from "./image-engine.ts";
import { startSwarmSim, type SwarmSimOptions } from "./swarmui.ts";

export interface ImageSimHandle {
  readonly url: string;
  /** The checkpoints on the card (one per SwarmUI backend). */
  readonly checkpoints: readonly SimCheckpoint[];
  /** Every call the simulator received, with its arrival time on the ledger's clock. */
  readonly calls: RecordedCall[];
  clearCalls(): void;
  generations(): number;
  stop(): Promise<void>;
}

/** What every image simulator takes: timings, size and the lying modes. */
export type ImageSimOptions = Omit<A1111SimOptions & SwarmSimOptions, "gpu" | "hostname" | "port">;

export interface ImageKindSim {
  /** The server's name for humans. */
  readonly label: string;
  start(gpu: SimGpu, o?: ImageSimOptions): Promise<ImageSimHandle>;
  /**
   * One generation sent to `url` (the simulator, or the turnstile in front of it) as a client
   * sends it; resolves with the generation's answer. `jobMs` is the simulator's run time for it;
   * `prompt` its text (default "a lighthouse at dusk"); `headers` go with every call (a client's key).
   */
  generate(url: string, o?: GenerateOptions): Promise<Response>;
}

export interface GenerateOptions {
  jobMs?: number;
  signal?: AbortSignal;
  prompt?: string;
  headers?: Record<string, string>;
}

const post = (url: string, body: unknown, o: GenerateOptions): Promise<Response> =>
  fetch(url, { method: "POST", headers: { ...o.headers, "content-type": "application/json" }, body: JSON.stringify(body), signal: o.signal });

const PROMPT = "a lighthouse at dusk";

export const IMAGE_KIND_SIMS: Readonly<Record<"a1111" | "swarmui", ImageKindSim>> = {
  a1111: {
    label: "AUTOMATIC1111",
    async start(gpu, o = {}) {
      const s = await startA1111Sim({ ...o, gpu });
      return { url: s.url, checkpoints: [s.checkpoint], calls: s.calls, clearCalls: s.clearCalls, generations: s.generations, stop: s.stop };
    },
    generate(url, o = {}) {
      return post(`${url}/sdapi/v1/txt2img`, { prompt: o.prompt ?? PROMPT, steps: 8, ...(o.jobMs === undefined ? {} : { sim_job_ms: o.jobMs }) }, o);
    },
  },
  swarmui: {
    label: "SwarmUI",
    async start(gpu, o = {}) {
      const s = await startSwarmSim({ ...o, gpu });
      return { url: s.url, checkpoints: s.backends, calls: s.calls, clearCalls: s.clearCalls, generations: s.generations, stop: s.stop };
    },
    async generate(url, o = {}) {
      const session = await post(`${url}/API/GetNewSession`, {}, o);
      if (session.status !== 200) return session;
      const { session_id } = (await session.json()) as { session_id: string };
      const body = { session_id, images: 1, prompt: o.prompt ?? PROMPT, model: "OfficialStableDiffusion/sd_xl_base_1.0", ...(o.jobMs === undefined ? {} : { sim_job_ms: o.jobMs }) };
      return post(`${url}/API/GenerateText2Image`, body, o);
    },
  },
};
