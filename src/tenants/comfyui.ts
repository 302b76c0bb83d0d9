/**
 * ComfyUI as an image-side tenant. Its jobs are asynchronous (`/prompt` queues; the job is followed
 * to its end by jobs/image-job.ts and jobs/follow.ts, unchanged); its release is /free, proven by
 * /system_stats' torch reservation falling (comfy/client.ts's `vramReleased`), never by /free's 200.
 * The client stays reachable (`client`) for the machinery only ComfyUI has.
 */
import { ComfyClient, vramReleased } from "../comfy/client.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import type { CallOptions, Holding, ImageTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

/** POST routes of ComfyUI that enqueue a job. ComfyUI serves every route under `/api` too. */
export const COMFY_IMAGE_PATHS: ReadonlySet<string> = new Set(["/prompt", "/api/prompt"]);

export class ComfyTenant implements ImageTenant {
  readonly kind = "comfyui";
  readonly side = "image";
  readonly label = "ComfyUI";
  readonly client: ComfyClient;
  /** The reservation read just before the last /free: verify compares against it. */
  #before: number | undefined;

  constructor(readonly base: URL, private readonly callTimeoutMs: number) {
    this.client = new ComfyClient(base, callTimeoutMs);
  }

  classify(method: string, path: string): WorkClass {
    return method === "POST" && COMFY_IMAGE_PATHS.has(path) ? "image-async" : "pass";
  }

  async release(_o: CallOptions): Promise<ReleaseCall> {
    this.#before ??= await this.client.torchReserved(this.callTimeoutMs).catch(() => undefined);
    try {
      await this.client.free(this.callTimeoutMs);
      return { tried: ["all"], accepted: true };
    } catch (err) {
      return { tried: ["all"], accepted: false, error: describeFetchError(err) };
    }
  }

  async verify(_o: CallOptions): Promise<Holding> {
    try {
      const now = await this.client.torchReserved(this.callTimeoutMs);
      const held = !vramReleased(this.#before ?? 0, now);
      if (!held) this.#before = undefined;
      return { held, vramBytes: now };
    } catch (err) {
      return { held: true, unreadable: `/system_stats unreadable: ${describeFetchError(err)}` };
    }
  }

  async resident(_o: CallOptions): Promise<Resident[]> {
    const bytes = await this.client.torchReserved(this.callTimeoutMs);
    return bytes > 0 ? [{ name: "", vramBytes: bytes }] : [];
  }

  async probe(timeoutMs: number): Promise<string> {
    return (await this.client.systemStats(timeoutMs)).version;
  }
}

export const comfyDriver: TenantDriver<ComfyTenant> = {
  kind: "comfyui",
  label: "ComfyUI",
  create: (ctx: TenantContext) => new ComfyTenant(ctx.base, ctx.config.probeTimeoutMs),
};
