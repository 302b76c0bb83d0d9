/**
 * A simulated AUTOMATIC1111 stable-diffusion-webui API (and Forge, `forge: true`) on loopback:
 * the image tenant behind IMAGE_KIND=a1111. Shapes follow modules/api/api.py: txt2img and img2img
 * are synchronous and answer with base64 images when the job ends; /sdapi/v1/memory reads torch's
 * own figures (the `cuda.system` part is the whole card, every process included); errors go
 * through api_middleware's handle_exception ({error, detail, body, errors}).
 *
 * Forge answers unload-checkpoint with 200 and keeps VRAM full (lllyasviel/stable-diffusion-webui-forge#738).
 */
import { SimGpu } from "./gpu.ts";
import { baseUrl, CallLog, loopbackOnly, type OverrideHandler, type RecordedCall, readBody, routedPath } from "./http.ts";
import {
  type CheckpointTiming,
  IMAGE_SIDE,
  type ImageLyingModes,
  jobMsOf,
  jsonObject,
  PNG_BASE64,
  SimCheckpoint,
  timingOf,
} from "./image-engine.ts";
import { Timers } from "./timers.ts";

export interface A1111SimOptions extends ImageLyingModes, Partial<CheckpointTiming> {
  gpu?: SimGpu;
  /** Forge: unload-checkpoint answers 200 and keeps the memory (#738). */
  forge?: boolean;
  /** Run time of one generation (default 300; `sim_job_ms` in the request body overrides). */
  jobMs?: number;
  /** The checkpoint's title (default "v1-5-pruned-emaonly.safetensors [6ce0161689]"). */
  checkpoint?: string;
  recordCalls?: boolean;
  hostname?: string;
  port?: number;
}

export interface A1111Sim {
  readonly url: string;
  readonly port: number;
  readonly gpu: SimGpu;
  readonly calls: RecordedCall[];
  readonly checkpoint: SimCheckpoint;
  /** Generations answered so far. */
  generations(): number;
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  stop(): Promise<void>;
}

const MIB = 1024 * 1024;
/** What torch keeps of its own on the card with no model (CUDA context not counted by torch). */
const IDLE_RESERVED = 2 * MIB;
const RAM_TOTAL = 25_769_803_776;

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

/** api_middleware's handle_exception shape. */
function apiError(status: number, error: string, detail: string, errors = `${status}: ${detail}`): Response {
  return json({ error, detail, body: "", errors }, status);
}

export async function startA1111Sim(opts: A1111SimOptions = {}): Promise<A1111Sim> {
  const hostname = loopbackOnly(opts.hostname);
  const gpu = opts.gpu ?? new SimGpu();
  const log = new CallLog(opts.recordCalls ?? true);
  const timers = new Timers();
  const title = opts.checkpoint ?? "v1-5-pruned-emaonly.safetensors [6ce0161689]";
  const timing: CheckpointTiming = timingOf(opts);
  const ckpt = new SimCheckpoint(gpu, timers, title, timing);
  const jobMs = opts.jobMs ?? 300;
  const keepsMemory = opts.forge === true || opts.releaseFreesNothing === true;
  let generated = 0;
  let peak = 0;
  /** shared.state as progressapi reads it. */
  const state = { job: "", job_count: 0, job_timestamp: "0", job_no: 0, sampling_step: 0, sampling_steps: 0, interrupted: false, started: 0 };

  async function generate(kind: "txt2img" | "img2img", body: Record<string, unknown>): Promise<Response> {
    if (kind === "img2img" && !Array.isArray(body.init_images)) return apiError(404, "HTTPException", "Init image not found");
    const steps = typeof body.steps === "number" && body.steps > 0 ? Math.floor(body.steps) : 20;
    const batch = typeof body.batch_size === "number" && body.batch_size > 0 ? Math.floor(body.batch_size) : 1;
    const ms = jobMsOf(body, jobMs);
    const sendImages = body.send_images !== false;
    return ckpt.generate(async (signal) => {
      Object.assign(state, {
        job: `scripts_${kind}`,
        job_count: 1,
        job_no: 0,
        job_timestamp: new Date().toISOString().replace(/\D/g, "").slice(0, 14),
        sampling_step: 0,
        sampling_steps: steps,
        interrupted: false,
        started: Date.now(),
      });
      gpu.note("job-start", IMAGE_SIDE, title);
      try {
        for (let s = 0; s < steps && !signal.aborted; s++) {
          await ckpt.step(ms / steps, signal);
          if (!signal.aborted) state.sampling_step = s + 1;
        }
      } finally {
        Object.assign(state, { job: "", job_count: 0, job_no: 0, sampling_step: 0, sampling_steps: 0 });
        gpu.note("job-end", IMAGE_SIDE, title);
      }
      generated++;
      peak = Math.max(peak, ckpt.vramBytes);
      const seed = typeof body.seed === "number" && body.seed >= 0 ? body.seed : Math.floor(Math.random() * 2 ** 32);
      const info = { prompt: body.prompt ?? "", all_prompts: [body.prompt ?? ""], seed, steps, sd_model_name: title, job_timestamp: state.job_timestamp };
      return json({
        images: sendImages ? Array.from({ length: batch }, () => PNG_BASE64) : [],
        parameters: body,
        info: JSON.stringify(info),
      });
    });
  }

  function memory(): Response {
    const free = Math.max(0, gpu.vramTotal - gpu.vramUsed());
    const reserved = ckpt.vramBytes + IDLE_RESERVED;
    const allocated = ckpt.vramBytes;
    peak = Math.max(peak, reserved);
    const rss = 3_221_225_472 + (ckpt.place === "ram" ? timing.bytes : 0);
    return json({
      ram: { free: RAM_TOTAL - rss, used: rss, total: RAM_TOTAL },
      cuda: {
        system: { free, used: gpu.vramTotal - free, total: gpu.vramTotal },
        active: { current: allocated, peak },
        allocated: { current: allocated, peak },
        reserved: { current: reserved, peak },
        inactive: { current: 0, peak: 4 * MIB },
        events: { retries: 0, oom: 0 },
      },
    });
  }

  function progress(): Response {
    const s = {
      skipped: false,
      interrupted: state.interrupted,
      stopping_generation: false,
      job: state.job,
      job_count: state.job_count,
      job_timestamp: state.job_timestamp,
      job_no: state.job_no,
      sampling_step: state.sampling_step,
      sampling_steps: state.sampling_steps,
    };
    if (state.job_count === 0) return json({ progress: 0, eta_relative: 0, state: s, current_image: null, textinfo: null });
    let p = 0.01;
    if (state.sampling_steps > 0) p += state.sampling_step / state.sampling_steps;
    const since = (Date.now() - state.started) / 1000;
    return json({ progress: Math.min(p, 1), eta_relative: since / p - since, state: s, current_image: null, textinfo: null });
  }

  async function unload(): Promise<Response> {
    if (opts.refuseWhileBusy && ckpt.running > 0) {
      return apiError(500, "RuntimeError", "", "Cannot unload the checkpoint while a generation is running");
    }
    if (keepsMemory) return json({});
    await ckpt.unload();
    return json({});
  }

  type Handler = (body: Record<string, unknown>) => Response | Promise<Response>;
  const routes: Record<string, Record<string, Handler>> = {
    "/sdapi/v1/txt2img": { POST: (b) => generate("txt2img", b) },
    "/sdapi/v1/img2img": { POST: (b) => generate("img2img", b) },
    "/sdapi/v1/progress": { GET: progress },
    "/sdapi/v1/interrupt": {
      POST: () => {
        if (ckpt.interrupt()) state.interrupted = true;
        return json({});
      },
    },
    "/sdapi/v1/unload-checkpoint": { POST: unload },
    "/sdapi/v1/reload-checkpoint": {
      POST: async () => {
        await ckpt.reload();
        return json({});
      },
    },
    "/sdapi/v1/memory": { GET: memory },
    "/sdapi/v1/options": { GET: () => json({ sd_model_checkpoint: title, samples_format: "png", sd_checkpoints_limit: 1 }) },
    "/sdapi/v1/sd-models": {
      GET: () => json([{ title, model_name: title.replace(/\.safetensors.*$/, ""), hash: "6ce0161689", sha256: null, filename: `/models/Stable-diffusion/${title.split(" ")[0]}`, config: null }]),
    },
    "/internal/ping": { GET: () => json({}) },
  };

  const server = Bun.serve({
    hostname,
    port: opts.port ?? 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const raw = await readBody(req);
      log.record(req, url, raw);
      const injected = await log.runOverrides(req, url, raw);
      if (injected) return injected;
      const path = routedPath(url.pathname);
      if (path === undefined) return json({ detail: "Not Found" }, 404);
      const route = routes[path];
      if (!route) return json({ detail: "Not Found" }, 404);
      const handler = route[req.method] ?? (req.method === "HEAD" ? route.GET : undefined);
      if (!handler) return json({ detail: "Method Not Allowed" }, 405);
      let body: Record<string, unknown> = {};
      if (req.method === "POST" && (path.endsWith("txt2img") || path.endsWith("img2img"))) {
        const parsed = jsonObject(new TextDecoder().decode(raw));
        // FastAPI's RequestValidationError: 422 with pydantic's list of problems.
        if (parsed === undefined) return json({ detail: [{ type: "json_invalid", loc: ["body", 0], msg: "JSON decode error", input: {}, ctx: { error: "Expecting value" } }] }, 422);
        body = parsed;
      }
      return handler(body);
    },
    error: () => apiError(500, "RuntimeError", "", "internal error"),
  });
  const port = server.port as number;
  let stopped: Promise<void> | undefined;
  return {
    url: baseUrl(hostname, port),
    port,
    gpu,
    calls: log.calls,
    checkpoint: ckpt,
    generations: () => generated,
    override: (m, p, h) => log.override(m, p, h),
    clearCalls: () => log.clear(),
    stop() {
      stopped ??= (async () => {
        timers.stopAll();
        await server.stop(true);
        ckpt.drop();
      })();
      return stopped;
    },
  };
}
