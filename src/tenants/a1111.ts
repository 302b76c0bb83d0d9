/**
 * AUTOMATIC1111's stable-diffusion-webui (and Forge, and forks that keep its /sdapi/v1 API) as an
 * image-side tenant (IMAGE_KIND=a1111).
 *
 * - The job: txt2img and img2img are synchronous, so the request is the job (image-sync). The
 *   other routes that put weights on the card are jobs too (upscalers, interrogate, a checkpoint
 *   switch through POST /sdapi/v1/options, a reload).
 * - Release: POST /sdapi/v1/unload-checkpoint (the checkpoint goes to system RAM).
 * - Verify: GET /sdapi/v1/memory, the process's own torch figure `cuda.reserved.current` (what its
 *   caching allocator holds on the card, cache included). Released = at most RELEASED_MAX_BYTES.
 *   Not `cuda.system`: that is the whole card, the LLM tenant's memory included. A CUDA context of
 *   a few hundred MiB stays whatever torch says; no API call frees it short of ending the process.
 *   `cuda: {"error": "unavailable"}` is a torch without CUDA, which is not proof of an empty card:
 *   the DirectML forks for AMD cards on Windows use the GPU without it. No figure, no proof: the
 *   reading counts as unreadable and the card is held up to FREE_TIMEOUT, saying why.
 * - Forge answers unload-checkpoint with 200 and keeps VRAM full (#738): verify keeps saying held,
 *   hand-over.ts holds the card up to FREE_TIMEOUT and returns the "lied" verdict.
 * - Busy: /sdapi/v1/progress `state.job_count` (shared.state, so it sees generations started from
 *   A1111's own page too; begin() sets it to -1 before the count is known, so any non-zero counts).
 * - Restore: reload-checkpoint before the first image job after our unload. Worth it: the job
 *   would load the checkpoint anyway (no time lost), and A1111 may otherwise stay "stuck with last
 *   checkpoint" after an unload (A1111#12971).
 */
import { callJson, isRecord, parseJson, UpstreamHttpError } from "../upstream/http.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import type { CallOptions, Holding, ImageTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

/** What torch may keep reserved after an unload and still count as released (VAE/upscaler scraps, allocator slack). */
export const RELEASED_MAX_BYTES = 512 * 1024 * 1024;

/** POST routes that put work or weights on the card; the request is the job. */
export const A1111_GPU_PATHS: ReadonlySet<string> = new Set([
  "/sdapi/v1/txt2img",
  "/sdapi/v1/img2img",
  "/sdapi/v1/extra-single-image",
  "/sdapi/v1/extra-batch-images",
  "/sdapi/v1/interrogate",
  "/sdapi/v1/reload-checkpoint",
  "/sdapi/v1/options",
  "/sdapi/v1/train/embedding",
  "/sdapi/v1/train/hypernetwork",
]);

/** torch's `cuda.reserved.current` from /sdapi/v1/memory, or why there is none. */
export function cudaReserved(body: unknown): number | string {
  if (!isRecord(body) || !isRecord(body.cuda)) return "/sdapi/v1/memory has no cuda section";
  const cuda = body.cuda;
  if (typeof cuda.error === "string") return `/sdapi/v1/memory reports no CUDA figures (${cuda.error}): a release cannot be proven`;
  const reserved = isRecord(cuda.reserved) ? cuda.reserved.current : undefined;
  return typeof reserved === "number" && Number.isFinite(reserved) && reserved >= 0 ? reserved : "/sdapi/v1/memory has no cuda.reserved figure";
}

export class A1111Tenant implements ImageTenant {
  readonly kind = "a1111";
  readonly side = "image";
  readonly label = "AUTOMATIC1111/Forge";
  /** Our unload-checkpoint was accepted and nothing reloaded since: restore() reloads. */
  #unloaded = false;

  constructor(
    readonly base: URL,
    private readonly callTimeoutMs: number,
    private readonly local: boolean,
  ) {}

  classify(method: string, path: string): WorkClass {
    return method === "POST" && A1111_GPU_PATHS.has(path) ? "image-sync" : "pass";
  }

  private async call(path: string, o: CallOptions, method: "GET" | "POST" = "GET"): Promise<unknown> {
    const { status, text } = await callJson(this.base, path, { timeoutMs: this.callTimeoutMs, signal: o.signal, method });
    if (status !== 200) throw new UpstreamHttpError(status, text, `${method} ${path}`);
    return parseJson(text);
  }

  async release(o: CallOptions): Promise<ReleaseCall> {
    try {
      await this.call("/sdapi/v1/unload-checkpoint", o, "POST");
      this.#unloaded = true;
      return { tried: ["checkpoint"], accepted: true };
    } catch (err) {
      if (o.signal.aborted) throw err;
      return { tried: ["checkpoint"], accepted: false, error: describeFetchError(err) };
    }
  }

  async verify(o: CallOptions): Promise<Holding> {
    let body: unknown;
    try {
      body = await this.call("/sdapi/v1/memory", o);
    } catch (err) {
      if (this.local && isConnectionRefused(err)) return { held: false, notRunning: describeFetchError(err) };
      return { held: true, unreadable: `/sdapi/v1/memory unreadable: ${describeFetchError(err)}` };
    }
    const reserved = cudaReserved(body);
    if (typeof reserved === "string") return { held: true, unreadable: reserved };
    return { held: reserved > RELEASED_MAX_BYTES, vramBytes: reserved };
  }

  async busy(o: CallOptions): Promise<number> {
    const body = await this.call("/sdapi/v1/progress?skip_current_image=true", o);
    const state = isRecord(body) && isRecord(body.state) ? body.state : undefined;
    if (!state) throw new Error("/sdapi/v1/progress has no state");
    return state.job_count !== 0 && state.job_count !== undefined ? 1 : 0;
  }

  async restore(o: CallOptions): Promise<void> {
    if (!this.#unloaded) return;
    await this.call("/sdapi/v1/reload-checkpoint", o, "POST");
    this.#unloaded = false;
  }

  /** Stops the generation running now (shared.state.interrupt: whichever job holds the queue lock). */
  async interrupt(o: CallOptions): Promise<void> {
    await this.call("/sdapi/v1/interrupt", o, "POST");
  }

  async resident(o: CallOptions): Promise<Resident[]> {
    const [memory, options] = await Promise.all([this.call("/sdapi/v1/memory", o), this.call("/sdapi/v1/options", o).catch(() => undefined)]);
    const reserved = cudaReserved(memory);
    if (typeof reserved === "string") throw new Error(reserved);
    if (reserved <= RELEASED_MAX_BYTES) return [];
    const name = isRecord(options) && typeof options.sd_model_checkpoint === "string" ? options.sd_model_checkpoint : "";
    return [{ name, state: "loaded", vramBytes: reserved }];
  }

  async probe(timeoutMs: number): Promise<string> {
    await this.call("/sdapi/v1/progress?skip_current_image=true", { signal: AbortSignal.timeout(timeoutMs) });
    return "up";
  }
}

export const a1111Driver: TenantDriver<A1111Tenant> = {
  kind: "a1111",
  label: "AUTOMATIC1111/Forge",
  create: (ctx: TenantContext) => new A1111Tenant(ctx.base, ctx.config.probeTimeoutMs, ctx.local),
};
