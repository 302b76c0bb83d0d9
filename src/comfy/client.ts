/**
 * The calls the turnstile makes to ComfyUI itself: is the job done, free the memory, and is the
 * memory really back. ComfyUI's /free only raises a flag (api-facts C3): its worker unloads
 * afterwards, so "freed" is decided by /system_stats, never by /free's answer.
 */
import { sleep } from "../proxy/backoff.ts";
import { callJson, isRecord, parseJson, UpstreamHttpError } from "../upstream/http.ts";

export type JobEnd = "success" | "error";

export class ComfyClient {
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
   * Poll history until the job ends or the deadline passes ("timeout": ComfyUI restarted and
   * forgot the job, or it simply runs longer than JOB_TIMEOUT). A failing poll is retried at the
   * next interval: ComfyUI being briefly unreachable must not end the wait early.
   */
  async waitJob(
    promptId: string,
    opts: { deadline: number; pollMs: number; signal?: AbortSignal; onPollError?: (err: unknown) => void },
  ): Promise<JobEnd | "timeout"> {
    for (;;) {
      try {
        const end = await this.history(promptId, opts.signal);
        if (end) return end;
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        opts.onPollError?.(err);
      }
      const left = opts.deadline - Date.now();
      if (left <= 0) return "timeout";
      await sleep(Math.min(opts.pollMs, left), opts.signal);
    }
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
