/**
 * When each image job in flight began running, kept under STATE_DIR (issue 27), so a job picked
 * up after a restart shows its age from ComfyUI's start of it, not from the restart. ComfyUI's jobs
 * API says so itself (`execution_start_time`); ComfyUI v0.3.64 and older do not, and this file is
 * then all there is. Small: only jobs not yet ended, written whole (beside, then renamed), mode 0600.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { normalizeUpstream } from "../runtime/card-claim.ts";
import type { ImageJobEvent } from "./events.ts";

export interface JobStartsLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/** `jobs-<16 hex>.json`: one file per ComfyUI guarded. */
export function jobStartsFileName(comfyUrl: string): string {
  let key = comfyUrl;
  try {
    key = normalizeUpstream(comfyUrl);
  } catch {}
  return `jobs-${new Bun.CryptoHasher("sha256").update(key).digest("hex").slice(0, 16)}.json`;
}

export class JobStarts {
  readonly path: string;
  /** prompt_id → epoch ms it began running, as kept by the last run and this one. */
  readonly #started = new Map<string, number>();
  readonly #promptOf = new Map<number, string>();
  #warned = false;

  constructor(
    dir: string,
    comfyUrl: string,
    private readonly log: JobStartsLog,
  ) {
    this.path = join(dir, jobStartsFileName(comfyUrl));
    try {
      const body = JSON.parse(readFileSync(this.path, "utf8")) as { started?: Record<string, unknown> };
      for (const [id, at] of Object.entries(body.started ?? {})) if (typeof at === "number" && Number.isFinite(at)) this.#started.set(id, at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") this.#warn("the kept image-job start times are unreadable; ignored", err);
    }
  }

  /** When the last run saw this job begin running (epoch ms), if it did. */
  startedAt(promptId: string): number | undefined {
    return this.#started.get(promptId);
  }

  observe(e: ImageJobEvent): void {
    switch (e.phase) {
      case "started":
        this.#promptOf.set(e.jobId, e.promptId);
        this.#started.set(e.promptId, Date.now());
        return this.#save();
      case "adopted":
        this.#promptOf.set(e.jobId, e.promptId);
        if (e.startedAt === undefined || this.#started.get(e.promptId) === e.startedAt) return;
        this.#started.set(e.promptId, e.startedAt);
        return this.#save();
      case "released": {
        const id = this.#promptOf.get(e.jobId);
        this.#promptOf.delete(e.jobId);
        if (id !== undefined && this.#started.delete(id)) this.#save();
        return;
      }
    }
  }

  /** Jobs the last run kept that ComfyUI no longer has are dropped with the next write. */
  forgetAllBut(promptIds: readonly string[]): void {
    const keep = new Set(promptIds);
    for (const id of [...this.#started.keys()]) if (!keep.has(id)) this.#started.delete(id);
  }

  #save(): void {
    try {
      if (this.#started.size === 0) return void rmSync(this.path, { force: true });
      mkdirSync(join(this.path, ".."), { recursive: true, mode: 0o700 });
      const tmp = `${this.path}.${process.pid}.tmp`;
      rmSync(tmp, { force: true });
      writeFileSync(tmp, `${JSON.stringify({ started: Object.fromEntries(this.#started) })}\n`, { mode: 0o600, flag: "wx" });
      renameSync(tmp, this.path);
    } catch (err) {
      this.#warn("could not keep image-job start times on disk: a job picked up after a restart will show its age from the restart", err);
    }
  }

  #warn(msg: string, err: unknown): void {
    if (this.#warned) return;
    this.#warned = true;
    this.log.warn(msg, { file: this.path, reason: err instanceof Error ? err.message : String(err) });
  }
}
