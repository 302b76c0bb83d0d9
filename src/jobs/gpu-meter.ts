/**
 * The GPU-seconds quota at work (issue 30, QUOTA_GPU_SECONDS): what each client's work held the
 * card, fed to the ledger (fair/gpu-time.ts), and the refusal of new work past it.
 *
 * What counts: an image job's run — ComfyUI runs one prompt at a time, so a job runs from when it
 * was sent or the image job before it ended, whichever is later, to its end (seen running or not:
 * a short job may finish between two polls); a synchronous kind's job (A1111, SwarmUI) from its
 * request to its answer's end. An LLM request from each grant of its slot to its end (a retry's
 * backoff does not count). Work that was refused or never reached the card counts nothing.
 * Refusal happens on arrival only: work once accepted always runs to its end.
 */
import { formatDuration } from "../config/duration.ts";
import type { GpuSpan, GpuTime } from "../fair/gpu-time.ts";
import type { Identity } from "../fair/identity.ts";
import type { ErrorReply } from "../http/dialect.ts";
import type { ImageJobEvent } from "./events.ts";

export type GpuWork = "image" | "llm";

export interface GpuMeterDeps {
  readonly ledger: GpuTime<Identity>;
  /** A client's GPU seconds per window; 0 = no limit. */
  limitS(who: Identity): number;
  /** Monotonic ms. */
  now(): number;
  onRefused(who: Identity, work: GpuWork, usedS: number, limitS: number): void;
}

/** An LLM request's hold on the card, told as it goes. */
export interface LlmMeter {
  granted(): void;
  /** The slot was given back for a retry's backoff. */
  paused(): void;
  /** Idempotent. */
  ended(): void;
}

/** A client's GPU time in the window, for the status. */
export interface GpuUseView {
  client: string;
  class: string;
  used_s: number;
  /** Its GPU seconds per window; 0 = no limit. */
  quota_s: number;
  /** Its work holding the card now. */
  running: number;
}

interface Job {
  readonly who: Identity;
  sentAt?: number;
  span?: GpuSpan;
  /** Its run was counted (a job followed by two ids reports two ends). */
  counted?: boolean;
}

export class GpuMeter {
  readonly #jobs = new Map<number, Job>();
  /** When the last image job's run ended: the next one queued in the image server began then. */
  #lastImageEnd = -Infinity;

  constructor(private readonly d: GpuMeterDeps) {}

  /** The answer for new work of `who` past its GPU seconds (status 429 is the caller's), else undefined. */
  refusal(who: Identity, work: GpuWork): Omit<ErrorReply, "status"> | undefined {
    const limitS = this.d.limitS(who);
    if (limitS <= 0) return undefined;
    const { ledger } = this.d;
    const now = this.d.now();
    const used = ledger.usedMs(who.client, now);
    if (used < limitS * 1000) return undefined;
    const retryAfterS = Math.max(1, Math.ceil(ledger.retryAfterMs(who.client, limitS * 1000, now) / 1000));
    const usedS = Math.floor(used / 1000);
    this.d.onRefused(who, work, usedS, limitS);
    return {
      type: "quota_exceeded",
      message: `gpu-turnstile: client ${who.client} used ${usedS} s of GPU time in the last ${formatDuration(ledger.windowMs)} (its quota: ${limitS} s); retry in ${retryAfterS} s`,
      headers: { "retry-after": String(retryAfterS) },
    };
  }

  /** Image jobs' runs, from their events (a job with no client name is not metered). */
  onJob(e: ImageJobEvent): void {
    if (e.phase === "received") {
      if (e.who !== undefined) this.#jobs.set(e.jobId, { who: e.who });
      return;
    }
    if (!("jobId" in e)) return;
    const job = this.#jobs.get(e.jobId);
    if (!job) return;
    const now = this.d.now();
    switch (e.phase) {
      case "forwarded":
      case "started":
        job.sentAt ??= now;
        if (e.phase === "started" && !job.span && !job.counted) job.span = this.d.ledger.begin(job.who.client, this.#ranFrom(job, now), job.who);
        break;
      case "retrying":
        // The card is given back for the backoff; the next attempt is sent anew.
        job.span?.end(now);
        job.span = undefined;
        job.sentAt = undefined;
        break;
      case "finished":
        if (job.counted) break;
        job.counted = true;
        // Never seen running and cancelled or lost: it most likely left the queue without running.
        if (!job.span && (e.end === "cancelled" || e.end === "lost")) break;
        (job.span ?? this.d.ledger.begin(job.who.client, this.#ranFrom(job, now), job.who)).end(now);
        job.span = undefined;
        this.#lastImageEnd = now;
        break;
      case "released":
      case "left":
        job.span?.end(now);
        this.#jobs.delete(e.jobId);
        break;
    }
  }

  /** Each client's use in the window, most first; `viewer`: only that client's. */
  uses(viewer?: string): GpuUseView[] {
    return this.d.ledger
      .uses(this.d.now())
      .filter((u) => viewer === undefined || u.client === viewer)
      .map((u) => ({ client: u.client, class: u.tag.cls, used_s: Math.floor(u.usedMs / 100) / 10, quota_s: this.d.limitS(u.tag), running: u.running }));
  }

  /**
   * When a job found running (or ended) at `now` began: when it was sent or the job before it
   * ended. Another job still counted as running has just ended, its end not yet heard (each job's
   * follower hears on its own): then this one began about now.
   */
  #ranFrom(job: Job, now: number): number {
    for (const other of this.#jobs.values()) if (other !== job && other.span) return now;
    return Math.min(now, Math.max(job.sentAt ?? now, this.#lastImageEnd));
  }

  /** An LLM request of `who`: metered from each grant to its end. */
  llm(who: Identity): LlmMeter {
    const { ledger, now } = this.d;
    let span: GpuSpan | undefined;
    let over = false;
    const stop = () => {
      span?.end(now());
      span = undefined;
    };
    return {
      granted: () => {
        if (!over && !span) span = ledger.begin(who.client, now(), who);
      },
      paused: stop,
      ended: () => {
        over = true;
        stop();
      },
    };
  }
}
