/**
 * Following one ComfyUI job until it ends (SPEC "Following a job"): `/api/jobs/{id}` where
 * ComfyUI has it, else /history says when it ended and /queue whether ComfyUI still knows it. A
 * job ComfyUI forgot (it restarted) is `lost` within a few polls; a job still running at
 * JOB_TIMEOUT is stopped with /interrupt (the watchdog), because /free does not stop a running
 * job and the GPU must not be handed on under it.
 */
import type { ComfyClient, JobEnd, JobLookup, QueueView } from "../comfy/client.ts";
import { sleep } from "../http/backoff.ts";
import type { Nudges } from "./nudge.ts";
import type { SharedQueue } from "./queue-share.ts";

/** Where /queue shows the job. */
export type Place = "running" | "pending" | "absent";

/** One poll. `undefined` = that read failed. */
export interface Sighting {
  /** ComfyUI's verdict on the job, or "open" while it has none. */
  history: JobEnd | "open" | undefined;
  place: Place | undefined;
  /** Pending while another job of this turnstile runs: its JOB_TIMEOUT clock is paused. */
  behindOurs: boolean;
  /** A client named this job in a cancel or queue delete since the last poll (proxy/comfy-cancels.ts). */
  named?: boolean;
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
    // An end while the queue still holds the id is an older job's entry under a reused id (or a
    // read that straddled the end; the next poll settles it): never "done" while ComfyUI has it.
    const inQueue = s.place === "running" || s.place === "pending";
    if ((s.history === "success" || s.history === "error" || s.history === "cancelled") && !inQueue) return s.history;

    if (s.history === undefined && s.place === undefined) {
      this.#wasDown = true;
    } else if (s.history === "open" && s.place === "absent") {
      // A client removed it from the queue (named it in a delete or cancel): it is over.
      if (s.named) return "cancelled";
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
  /** One /queue read for every follower, on a ComfyUI without the jobs API. */
  queue?: SharedQueue;
  /** Wakes the follower when a client cancels or deletes jobs (proxy/comfy-cancels.ts). */
  nudges?: Nudges;
  /**
   * ComfyUI did not know the id before the job was sent (it was checked, or minted). When it
   * could not be checked, an end the jobs API reports is believed only once /queue lacks the id.
   */
  fresh?: boolean;
}

export function placeOf(q: QueueView, promptId: string): Place {
  if (q.running.includes(promptId)) return "running";
  return q.pending.includes(promptId) ? "pending" : "absent";
}

/**
 * One look at the job: through `GET /api/jobs/{id}` where ComfyUI has it (one small read says
 * pending, running or how it ended), else /queue then /history. `jobsApi` is false once ComfyUI
 * has shown it has no jobs API.
 */
async function sight(comfy: ComfyClient, promptId: string, opts: FollowOptions, since: number, jobsApi: { on: boolean }): Promise<Sighting> {
  // Never a read from before ComfyUI announced a change: it would not show the change.
  const notBefore = Math.max(since, performance.now() - opts.pollMs / 2, opts.nudges?.announcedAt(promptId) ?? 0);
  const readQueue = () => (opts.queue ? opts.queue.read(notBefore) : comfy.queue().catch(() => undefined));
  if (jobsApi.on) {
    const job = await comfy.job(promptId).catch(() => undefined);
    if (job === "unsupported") jobsApi.on = false;
    else {
      const s = sightingOf(job, await (job === "pending" ? behindOurs(comfy, opts) : false));
      if (opts.fresh || (s.history !== "success" && s.history !== "error" && s.history !== "cancelled")) return s;
      const q = await readQueue();
      return { ...s, place: q && placeOf(q, promptId) };
    }
  }
  // /queue first: a job that leaves the queue between the two reads is then already in /history.
  const q = await readQueue();
  const history = await comfy.history(promptId).then(
    (h) => h ?? ("open" as const),
    () => undefined,
  );
  const place = q && placeOf(q, promptId);
  const behind = place === "pending" && q!.running.some((id) => id !== promptId && (opts.isOurs?.(id) ?? false));
  return { history, place, behindOurs: behind };
}

function sightingOf(job: JobLookup | undefined, behind: boolean): Sighting {
  switch (job) {
    case undefined:
      return { history: undefined, place: undefined, behindOurs: false };
    case "pending":
      return { history: "open", place: "pending", behindOurs: behind };
    case "in_progress":
      return { history: "open", place: "running", behindOurs: false };
    case "completed":
      return { history: "success", place: "absent", behindOurs: false };
    case "failed":
      return { history: "error", place: "absent", behindOurs: false };
    case "cancelled":
      return { history: "cancelled", place: "absent", behindOurs: false };
    default:
      return { history: "open", place: "absent", behindOurs: false };
  }
}

/** Whether the job running now is another of this turnstile's (a pending job's clock then pauses). */
async function behindOurs(comfy: ComfyClient, opts: FollowOptions): Promise<boolean> {
  if (!opts.isOurs) return false;
  const running = await comfy.jobs(["in_progress"]).catch(() => undefined);
  return Array.isArray(running) && running.some((j) => opts.isOurs!(j.id));
}

/** Poll until the watch decides; returns the end and where the job was last seen. */
export async function followJob(comfy: ComfyClient, promptId: string, opts: FollowOptions): Promise<{ end: WatchEnd; place: Place | undefined }> {
  const since = performance.now();
  const watch = new JobWatch(opts.timeoutMs, since);
  const jobsApi = { on: true };
  opts.nudges?.follow(promptId);
  try {
    for (;;) {
      const named = opts.nudges?.takeNamed(promptId) ?? false;
      // A job a client named (its queue edit was answered before the nudge) is judged on reads
      // made after it: a shared /queue read from before the delete still shows it pending, and
      // with the mark spent on that read the job was later missed twice and called lost.
      const s = await sight(comfy, promptId, opts, named ? performance.now() : since, jobsApi);
      if (s.place) opts.onPlace?.(s.place);
      const end = watch.see({ ...s, named }, performance.now());
      if (end) return { end, place: s.place };
      await (opts.nudges ? opts.nudges.wait(promptId, opts.pollMs) : sleep(opts.pollMs));
    }
  } finally {
    opts.nudges?.end(promptId);
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
    if ((await stillQueued(comfy, promptId)) === false) return true;
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await sleep(Math.min(opts.pollMs, left));
  }
}

/**
 * Whether ComfyUI still runs or queues the job: one small jobs-API read where ComfyUI has it,
 * else /queue. undefined when neither could be read.
 */
async function stillQueued(comfy: ComfyClient, promptId: string): Promise<boolean | undefined> {
  const job = await comfy.job(promptId).catch(() => undefined);
  if (job === "pending" || job === "in_progress") return true;
  if (job !== undefined && job !== "unsupported") return false;
  const q = await comfy.queue().catch(() => undefined);
  return q && placeOf(q, promptId) !== "absent";
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
