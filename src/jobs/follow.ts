/**
 * Following one ComfyUI job until it ends (SPEC "Following a job"): /history says when it ended,
 * /queue says whether ComfyUI still knows it. A job ComfyUI forgot (it restarted) is `lost` within
 * a few polls; a job still running at JOB_TIMEOUT is stopped with /interrupt (the watchdog),
 * because /free does not stop a running job and the GPU must not be handed on under it.
 */
import type { ComfyClient, JobEnd, QueueView } from "../comfy/client.ts";
import { sleep } from "../http/backoff.ts";

/** Where /queue shows the job. */
export type Place = "running" | "pending" | "absent";

/** One poll. `undefined` = that read failed. */
export interface Sighting {
  /** /history: the job's end, or "open" while it has none. */
  history: JobEnd | "open" | undefined;
  place: Place | undefined;
  /** Pending while another job of this turnstile runs: its JOB_TIMEOUT clock is paused. */
  behindOurs: boolean;
}

export type WatchEnd = JobEnd | "lost" | "overrun" | "timeout";

/** Polls in a row that must miss the job (neither queued, running nor in history) before it is lost. */
export const MISSES_FOR_LOST = 2;

/**
 * The pure part of following a job: fed one sighting per poll, it says when the job has ended
 * and how. No I/O and no clock of its own, so every rule is tested without sockets.
 */
export class JobWatch {
  #misses = 0;
  #wasDown = false;
  #elapsed = 0;
  #last: number;

  constructor(
    private readonly timeoutMs: number,
    startedAt: number,
  ) {
    this.#last = startedAt;
  }

  /** Time counted against JOB_TIMEOUT so far. */
  get elapsedMs(): number {
    return this.#elapsed;
  }

  see(s: Sighting, now: number): WatchEnd | undefined {
    // A job queued behind another of ours is not using the GPU yet: that one's own clock runs.
    if (!(s.place === "pending" && s.behindOurs)) this.#elapsed += now - this.#last;
    this.#last = now;
    if (s.history === "success" || s.history === "error") return s.history;

    if (s.history === undefined && s.place === undefined) {
      this.#wasDown = true;
    } else if (s.history === "open" && s.place === "absent") {
      // ComfyUI writes history before it drops the job from the queue, so one miss can be a
      // read that straddled the job's end; two in a row cannot. After an outage one is enough:
      // a ComfyUI that came back without the job has restarted.
      if (this.#wasDown || ++this.#misses >= MISSES_FOR_LOST) return "lost";
    } else {
      this.#misses = 0;
      if (s.history !== undefined && s.place !== undefined) this.#wasDown = false;
    }

    if (this.#elapsed < this.timeoutMs) return undefined;
    return s.place === "running" || s.place === "pending" ? "overrun" : "timeout";
  }
}

export interface FollowOptions {
  timeoutMs: number;
  pollMs: number;
  /** Whether a prompt id belongs to this turnstile (a job of the same image session). */
  isOurs?: (promptId: string) => boolean;
  /** Told where each poll found the job (the status page tells ComfyUI's queue from its run). */
  onPlace?: (place: Place) => void;
}

export function placeOf(q: QueueView, promptId: string): Place {
  if (q.running.includes(promptId)) return "running";
  return q.pending.includes(promptId) ? "pending" : "absent";
}

/** Poll /queue then /history until the watch decides; returns the end and where the job was last seen. */
export async function followJob(comfy: ComfyClient, promptId: string, opts: FollowOptions): Promise<{ end: WatchEnd; place: Place | undefined }> {
  const watch = new JobWatch(opts.timeoutMs, performance.now());
  for (;;) {
    // /queue first: a job that leaves the queue between the two reads is then already in /history.
    const q = await comfy.queue().catch(() => undefined);
    const history = await comfy.history(promptId).then(
      (h) => h ?? ("open" as const),
      () => undefined,
    );
    const place = q && placeOf(q, promptId);
    if (place) opts.onPlace?.(place);
    const behindOurs = place === "pending" && q!.running.some((id) => id !== promptId && (opts.isOurs?.(id) ?? false));
    const end = watch.see({ history, place, behindOurs }, performance.now());
    if (end) return { end, place };
    await sleep(opts.pollMs);
  }
}

export interface StopOptions {
  /** How long ComfyUI gets to drop the job after /interrupt (FREE_TIMEOUT). */
  stopTimeoutMs: number;
  pollMs: number;
}

/**
 * The watchdog's stop: /interrupt the prompt, delete it if it is still pending, and wait until
 * /queue no longer shows it. True when it is gone within `stopTimeoutMs`. Never throws.
 */
export async function stopJob(comfy: ComfyClient, promptId: string, place: Place | undefined, opts: StopOptions): Promise<boolean> {
  const deadline = performance.now() + opts.stopTimeoutMs;
  await comfy.interrupt(promptId).catch(() => {});
  if (place !== "running") await comfy.deletePending([promptId]).catch(() => {});
  for (;;) {
    const q = await comfy.queue().catch(() => undefined);
    if (q && placeOf(q, promptId) === "absent") return true;
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await sleep(Math.min(opts.pollMs, left));
  }
}

/**
 * After a refused interrupt: keep the GPU while the job still shows in /queue, repeating the
 * interrupt every `stopTimeoutMs`, for at most `graceMs` (one more JOB_TIMEOUT). True when the job
 * left the queue within that time. Never throws.
 */
export async function awaitStubbornJob(comfy: ComfyClient, promptId: string, graceMs: number, opts: StopOptions): Promise<boolean> {
  const deadline = performance.now() + graceMs;
  while (performance.now() < deadline) {
    const left = deadline - performance.now();
    if (await stopJob(comfy, promptId, "running", { ...opts, stopTimeoutMs: Math.min(opts.stopTimeoutMs, left) })) return true;
  }
  return false;
}
