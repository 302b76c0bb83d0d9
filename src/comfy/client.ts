/**
 * The calls the turnstile makes to ComfyUI itself: is the job done, free the memory, and is the
 * memory really back. ComfyUI's /free only raises a flag (api-facts C3): its worker unloads
 * afterwards, so "freed" is decided by /system_stats, never by /free's answer.
 */
import { callJson, isRecord, parseJson, UpstreamHttpError } from "../upstream/http.ts";
import { cardFigures } from "./card-memory.ts";
import { deviceMemory } from "./device-memory.ts";

/** How ComfyUI says a job ended: an interrupted or cancelled one is `cancelled` (C8's mapping). */
export type JobEnd = "success" | "error" | "cancelled";

export interface QueueView {
  running: string[];
  pending: string[];
  /** What ComfyUI said of each job besides its place, where it said it (read at start, adopt.ts). */
  detail?: ReadonlyMap<string, QueuedDetail>;
}

/** A queued or running job's `number` (the queue item's first field, the jobs API's `priority`) and run start (epoch ms, jobs API only). */
export interface QueuedDetail {
  number?: number;
  startedAt?: number;
}

/** A job's status in the jobs API (api-facts C8). */
export type JobStatus = "pending" | "in_progress" | "completed" | "failed" | "cancelled";
export const JOB_STATUSES: readonly JobStatus[] = ["pending", "in_progress", "completed", "failed", "cancelled"];

/**
 * What `GET /api/jobs/{id}` says: a status, `unknown` (ComfyUI's own 404 `{"error":"Job not
 * found"}`), or `unsupported` (a ComfyUI older than the jobs API: the route itself is missing,
 * and aiohttp answers its plain-text "404: Not Found").
 */
export type JobLookup = JobStatus | "unknown" | "unsupported";

export interface JobSummary extends QueuedDetail {
  id: string;
  status: JobStatus;
}

const isJobStatus = (v: unknown): v is JobStatus => JOB_STATUSES.includes(v as JobStatus);

/**
 * Whether a 404 came from a jobs route that exists (its JSON `{"error": …}`) or from a server
 * that has no such route (aiohttp's text "404: Not Found", or anything else that is not that JSON).
 */
function routeExists(text: string): boolean {
  const body = parseJson(text);
  return isRecord(body) && typeof body.error === "string";
}

export class ComfyClient {
  /** Shown every good /system_stats answer (the status page's ComfyUI memory). */
  onStats: ((body: unknown) => void) | undefined;
  /**
   * ComfyUI was started with `--enable-cors-header` (its argv in /system_stats, last read): it
   * then lets any Origin through, so the turnstile does not apply ComfyUI's cross-site rule either.
   */
  corsEnabled = false;
  /**
   * Told the device type when a /system_stats read first shows ComfyUI's memory is the system's
   * (cpu, mps, DirectML), and `undefined` when a later read shows a card of its own again.
   */
  onSharedMemory: ((device: string | undefined) => void) | undefined;
  /** The last read's shared-memory device (device-memory.ts); null before the first read. */
  #shared: string | undefined | null = null;

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
    if (entry.status.status_str !== "error") return undefined;
    // Failed and interrupted jobs differ only in their last message (api-facts S3).
    const messages = Array.isArray(entry.status.messages) ? entry.status.messages : [];
    const last = messages.at(-1);
    return Array.isArray(last) && last[0] === "execution_interrupted" ? "cancelled" : "error";
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
    const detail = new Map<string, QueuedDetail>();
    for (const i of [...body.queue_running, ...body.queue_pending]) {
      if (Array.isArray(i) && typeof i[1] === "string" && typeof i[0] === "number") detail.set(i[1], { number: i[0] });
    }
    return { running: ids(body.queue_running), pending: ids(body.queue_pending), detail };
  }

  /**
   * The `number` of the job ComfyUI finished last (`GET /history?max_items=1`: its entry's
   * `prompt[0]`), or undefined when it has no history. ComfyUI numbers jobs in the order sent.
   */
  async lastNumber(signal?: AbortSignal): Promise<number | undefined> {
    const { status, text } = await callJson(this.base, "/history?max_items=1", { timeoutMs: this.callTimeoutMs, signal });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /history");
    const body = parseJson(text);
    if (!isRecord(body)) return undefined;
    const entry = Object.values(body)[0];
    const item = isRecord(entry) && Array.isArray(entry.prompt) ? entry.prompt : undefined;
    return typeof item?.[0] === "number" ? item[0] : undefined;
  }

  /** `GET /api/jobs/{id}` (C8): one read tells pending, running, or how the job ended. */
  async job(promptId: string, signal?: AbortSignal): Promise<JobLookup> {
    const path = `/api/jobs/${encodeURIComponent(promptId)}`;
    const { status, text } = await callJson(this.base, path, { timeoutMs: this.callTimeoutMs, signal });
    if (status === 404 || status === 405) return routeExists(text) ? "unknown" : "unsupported";
    if (status !== 200) throw new UpstreamHttpError(status, text, `GET ${path}`);
    const body = parseJson(text);
    if (!isRecord(body) || !isJobStatus(body.status)) throw new Error(`GET ${path}: not a job`);
    return body.status;
  }

  /**
   * `GET /api/jobs?status=…` (C8): every job in those states (no `limit`, so one page holds them
   * all), or `unsupported` on a ComfyUI without the jobs API.
   */
  async jobs(statuses: readonly JobStatus[], signal?: AbortSignal): Promise<JobSummary[] | "unsupported"> {
    const path = `/api/jobs?status=${statuses.join(",")}`;
    const { status, text } = await callJson(this.base, path, { timeoutMs: this.callTimeoutMs, signal });
    if (status === 404 || status === 405) return "unsupported";
    if (status !== 200) throw new UpstreamHttpError(status, text, `GET ${path}`);
    const body = parseJson(text);
    if (!isRecord(body) || !Array.isArray(body.jobs)) throw new Error(`GET ${path}: not a job list`);
    const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
    return body.jobs.flatMap((j): JobSummary[] => {
      if (!isRecord(j) || typeof j.id !== "string" || !isJobStatus(j.status)) return [];
      const s: JobSummary = { id: j.id, status: j.status };
      const number = num(j.priority);
      const startedAt = num(j.execution_start_time);
      if (number !== undefined) s.number = number;
      if (startedAt !== undefined) s.startedAt = startedAt;
      return [s];
    });
  }

  /**
   * What ComfyUI runs and has pending: through its jobs API (C8) where it has one, else /queue
   * (also when the jobs API fails: the queue may still answer).
   */
  async work(signal?: AbortSignal): Promise<QueueView> {
    const jobs = await this.jobs(["in_progress", "pending"], signal).catch(() => "unsupported" as const);
    if (jobs === "unsupported") return this.queue(signal);
    const of = (status: JobStatus) => jobs.flatMap((j) => (j.status === status ? [j.id] : []));
    const detail = new Map(jobs.map((j) => [j.id, { number: j.number, startedAt: j.startedAt }]));
    return { running: of("in_progress"), pending: of("pending"), detail };
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

  /**
   * `/system_stats` (C4): ComfyUI's version and the bytes PyTorch holds reserved on the card.
   * `shared` names the device when its memory is the system's (R1): `torchReserved` is then 0,
   * as nothing of the card's is held.
   */
  async systemStats(
    timeoutMs = this.callTimeoutMs,
  ): Promise<{ version: string; torchReserved: number; shared: string | undefined; totalBytes: number; freeBytes: number }> {
    const { status, text } = await callJson(this.base, "/system_stats", { timeoutMs });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /system_stats");
    const body = parseJson(text);
    this.onStats?.(body);
    const system = isRecord(body) && isRecord(body.system) ? body.system : {};
    const { torchReserved, shared } = deviceMemory(body);
    const { totalBytes, freeBytes } = cardFigures(body);
    if (shared !== this.#shared && (this.#shared !== null || shared !== undefined)) this.onSharedMemory?.(shared);
    this.#shared = shared;
    if (Array.isArray(system.argv)) this.corsEnabled = system.argv.some((a) => typeof a === "string" && a.startsWith("--enable-cors-header"));
    return { version: String(system.comfyui_version ?? "unknown"), torchReserved, shared, totalBytes, freeBytes };
  }

  /** What PyTorch holds on the card; 0 where ComfyUI's memory is the system's (nothing to wait for). */
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
