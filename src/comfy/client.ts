/**
 * The calls the turnstile makes to ComfyUI itself: is the job done, free the memory, and is the
 * memory really back. ComfyUI's /free only raises a flag (api-facts C3): its worker unloads
 * afterwards, so "freed" is decided by /system_stats, never by /free's answer.
 */
import { callJson, isRecord, parseJson, UpstreamHttpError } from "../upstream/http.ts";

export type JobEnd = "success" | "error";

export interface QueueView {
  running: string[];
  pending: string[];
}

export class ComfyClient {
  /** Shown every good /system_stats answer (the status page's ComfyUI memory). */
  onStats: ((body: unknown) => void) | undefined;

  constructor(
    readonly base: URL,
    private readonly callTimeoutMs: number,
  ) {}

  /** The job's end state, or undefined while it is queued, running, or unknown (C2: `{}`). */
  async history(promptId: string, signal?: AbortSignal): Promise<JobEnd | undefined> {
    const path = `/history/${encodeURIComponent(promptId)}`;
    const { status, text } = await callJson(this.base, path, { timeoutMs: this.callTimeoutMs, signal });
    if (status !== 200) throw new UpstreamHttpError(status, text, `GET ${path}`);
    const body = parseJson(text);
    const entry = isRecord(body) ? body[promptId] : undefined;
    if (!isRecord(entry) || !isRecord(entry.status)) return undefined;
    if (entry.status.completed === true) return "success";
    if (entry.status.status_str === "error") return "error";
    return undefined;
  }

  /**
   * `GET /queue` (C5): the prompt ids ComfyUI is running and has pending. Items are
   * `[number, prompt_id, prompt, extra_data, outputs]`; only the id is read.
   */
  async queue(signal?: AbortSignal): Promise<QueueView> {
    const { status, text } = await callJson(this.base, "/queue", { timeoutMs: this.callTimeoutMs, signal });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /queue");
    const body = parseJson(text);
    if (!isRecord(body) || !Array.isArray(body.queue_running) || !Array.isArray(body.queue_pending)) {
      throw new Error("GET /queue: not a queue");
    }
    const ids = (items: unknown[]) => items.flatMap((i) => (Array.isArray(i) && typeof i[1] === "string" ? [i[1]] : []));
    return { running: ids(body.queue_running), pending: ids(body.queue_pending) };
  }

  /** `POST /interrupt {"prompt_id"}` (C7): stops that prompt if it is the one running, else nothing. */
  async interrupt(promptId: string): Promise<void> {
    const { status, text } = await callJson(this.base, "/interrupt", { timeoutMs: this.callTimeoutMs, body: { prompt_id: promptId } });
    if (status !== 200) throw new UpstreamHttpError(status, text, "POST /interrupt");
  }

  /** `POST /queue {"delete":[ids]}` (C5): drops pending prompts; a running one is untouched. */
  async deletePending(promptIds: string[]): Promise<void> {
    const { status, text } = await callJson(this.base, "/queue", { timeoutMs: this.callTimeoutMs, body: { delete: promptIds } });
    if (status !== 200) throw new UpstreamHttpError(status, text, "POST /queue");
  }

  async free(timeoutMs: number): Promise<void> {
    const { status, text } = await callJson(this.base, "/free", {
      timeoutMs,
      body: { unload_models: true, free_memory: true },
    });
    if (status !== 200) throw new UpstreamHttpError(status, text, "POST /free");
  }

  /** `/system_stats` (C4): ComfyUI's version and the bytes PyTorch holds reserved across all devices. */
  async systemStats(timeoutMs = this.callTimeoutMs): Promise<{ version: string; torchReserved: number }> {
    const { status, text } = await callJson(this.base, "/system_stats", { timeoutMs });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /system_stats");
    const body = parseJson(text);
    this.onStats?.(body);
    const system = isRecord(body) && isRecord(body.system) ? body.system : {};
    const devices = isRecord(body) && Array.isArray(body.devices) ? body.devices : [];
    let torchReserved = 0;
    for (const d of devices) if (isRecord(d) && typeof d.torch_vram_total === "number") torchReserved += d.torch_vram_total;
    return { version: String(system.comfyui_version ?? "unknown"), torchReserved };
  }

  async torchReserved(timeoutMs = this.callTimeoutMs): Promise<number> {
    return (await this.systemStats(timeoutMs)).torchReserved;
  }
}

/**
 * When ComfyUI counts as having let go of the GPU: its torch reservation is down to a tenth of
 * what it held before /free, or below 256 MiB (the CUDA context and allocator slack that
 * `empty_cache` never returns). Pure, so the rule is tested on its own.
 */
export const VRAM_RELEASED_FLOOR = 256 * 1024 * 1024;
export function vramReleased(before: number, now: number): boolean {
  return now <= VRAM_RELEASED_FLOOR || now <= before / 10;
}
