/**
 * An image job whose request is the job (IMAGE_KIND a1111's /sdapi/v1/txt2img, swarmui's
 * /API/GenerateText2Image): the image tenant answers when the picture is done.
 *
 *   enter the image session (the job that opens it hands the LLM side over, proven, then restores
 *   the image side: its driver knows what it dropped) → forward the request → relay the answer →
 *   when the answer has ended, failed or its client went: [interrupt] → leave the session; the
 *   last job out hands the image side over (drain its own work, release, verify) → the lock goes.
 *
 * JOB_TIMEOUT bounds each attempt, the answer's body included; past it the upstream request is cut
 * and the tenant asked to stop. A client that goes does not end the hold by itself: the tenant
 * may still be generating, so it is interrupted and its own busy count drained first.
 *
 * Fair turns and quotas (issue 30) as for ComfyUI's jobs (jobs/fair-admission.ts): the client is
 * its Bearer key, else its address (these kinds send no client_id; SwarmUI's session_id is not
 * one: a credential, and any client mints a new one per call with GetNewSession). A job past its
 * client's quota is refused on arrival in the tenant's own error shape; waiting jobs enter the
 * image session in the lock's fair order, one per client at a time, so another client's job waits
 * behind at most the one of each client already in the session.
 */
import { errorResponse } from "../http/dialect.ts";
import { forward, whenBodyDone, type Hold, type RequestTarget, type RetryPolicy } from "../http/forward.ts";
import type { JobEnd, JobListener, JobOutcome } from "../jobs/events.ts";
import { admitImageJob, type FairJobs } from "../jobs/fair-admission.ts";
import { takeJobId } from "../jobs/image-job.ts";
import type { ImageSessions, SessionTicket } from "../jobs/session.ts";
import type { JobTracker } from "../jobs/tracker.ts";
import type { StartLog } from "../jobs/start-read.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import { handOver } from "./hand-over.ts";
import type { ImageTenant, Released } from "./types.ts";

export interface SyncJobSettings {
  jobTimeoutMs: number;
  freeTimeoutMs: number;
  freePollIntervalMs: number;
  probeTimeoutMs: number;
  retry: RetryPolicy;
}

export interface SyncJobDeps {
  sessions: ImageSessions;
  image: ImageTenant;
  /** The LLM side's proven hand-over (tenants/hand-over.ts); absent when OLLAMA_URL is empty. */
  releaseLlm?: () => Promise<Released>;
  tracker: JobTracker;
  emit: JobListener;
  settings: SyncJobSettings;
  /** Issue 30: who each job is for, its fair turn and its client's quota; absent = first come, first served. */
  fair?: FairJobs;
}

/**
 * The image side may hold memory the turnstile put there (a restore ran, or a job may have reached
 * it): the session's end owes a release even if every job of the session left before being sent.
 */
const owes = new WeakSet<ImageTenant>();
/**
 * One sync job at a time goes to each image side. It runs one at a time anyway (A1111's queue
 * lock, one SwarmUI backend per card): waiting here, a job's JOB_TIMEOUT counts its own run, not
 * its wait behind another, and the interrupt (never per job on A1111 or SwarmUI) stops only it.
 */
const turns = new WeakMap<ImageTenant, Promise<void>>();

/** Waits for the image side's turn; the function gives it on. A client that goes while waiting gives its place on. */
async function takeTurn(image: ImageTenant, signal: AbortSignal): Promise<() => void> {
  const before = turns.get(image) ?? Promise.resolve();
  let done!: () => void;
  const mine = new Promise<void>((r) => (done = r));
  turns.set(image, before.then(() => mine));
  const gone = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
  try {
    await Promise.race([before, gone]);
  } catch (err) {
    void before.then(done);
    throw err;
  }
  return done;
}

export function handleSyncJob(req: Request, url: RequestTarget | undefined, clientIp: string | undefined, d: SyncJobDeps): Promise<Response> {
  const { emit, settings, image } = d;
  // Before anything is held: a job past its client's quota is refused, in the tenant's own shape.
  const fair = admitImageJob(d.fair ?? {}, { authorization: req.headers.get("authorization"), address: clientIp, headers: req.headers });
  if (!fair.ok) return Promise.resolve(errorResponse(image.dialect ?? "comfy", fair.reply));
  const jobId = takeJobId();
  // Such a job has no id of its own: the status and the log name it by its number and route.
  const pathname = url?.pathname ?? new URL(req.url).pathname;
  const promptId = `${req.method} ${pathname}`;
  const work = routeWord(pathname);
  emit({ phase: "received", jobId, promptId, minted: true, client: clientIp, work, who: fair.who });
  let ticket: SessionTicket | undefined;
  let acquiredAt = 0;
  let everHeld = false;
  let reached = false;
  let sentAt = 0;
  let timedOut: AbortSignal | undefined;
  let finished: Promise<void> | undefined;
  let endTracking!: () => void;
  const tracking = new Promise<void>((r) => (endTracking = r));

  /** Leaves the session; its last job out releases the image side when it owes that. */
  const giveBack = async (): Promise<boolean> => {
    const t = ticket;
    ticket = undefined;
    if (!t) return false;
    if (owes.has(image)) t.accepted();
    return t.leave(() => releaseImage(jobId, promptId, d));
  };
  let giveTurn: (() => void) | undefined;
  const reach = (now: boolean) => {
    reached = now;
    if (now) return;
    giveTurn?.();
    giveTurn = undefined;
  };

  /** The job's end, once: stop what may still run, leave the session, report. */
  const finish = (outcome: JobOutcome, reason?: string): Promise<void> =>
    (finished ??= (async () => {
      // Its interrupt stops whatever runs (A1111, SwarmUI): this job, as it has the turn.
      if (reached && outcome !== "completed" && outcome !== "failed" && image.interrupt) {
        await image.interrupt({ signal: AbortSignal.timeout(settings.probeTimeoutMs) }).catch(() => {});
      }
      // It may have run: the session's end owes the release (a retry's refused attempt does not).
      if (reached) {
        owes.add(image);
        emit({ phase: "finished", jobId, promptId, end: END_OF[outcome] ?? "error", durationMs: performance.now() - sentAt, work });
      }
      reach(false);
      fair.slot?.release();
      const gpuReleased = await giveBack();
      if (!everHeld) emit({ phase: "left", jobId });
      else emit({ phase: "released", jobId, promptId, outcome, heldMs: performance.now() - acquiredAt, gpuReleased, reason });
      endTracking();
    })());

  const acquire = async (): Promise<Hold> => {
    const t = await d.sessions.enter(req.signal, () => prepare(jobId, d), fair.turn(jobId));
    ticket = t;
    if (!everHeld) {
      acquiredAt = performance.now();
      // The job is tracked until its session's part is over (whenIdle, the shutdown's warning).
      void d.tracker.run({ jobId, promptId, since: Date.now() }, () => tracking);
    }
    everHeld = true;
    emit({ phase: "acquired", jobId, waitedMs: t.waitedMs, joined: !t.opensSession, cls: fair.who?.cls });
    await t.ready();
    try {
      req.signal.throwIfAborted();
      giveTurn = await takeTurn(image, req.signal);
      req.signal.throwIfAborted();
    } catch (err) {
      void finish("client_gone");
      throw err;
    }
    // From here the attempt may reach the tenant; a retry (onRetry) says it did not.
    reach(true);
    sentAt = performance.now();
    emit({ phase: "started", jobId, promptId });
    // Held until the answer ends (below), not per attempt.
    return { release() {} };
  };

  const started = performance.now();
  return forward(req, {
    upstream: image.base,
    url,
    signal: req.signal,
    // Per attempt: JOB_TIMEOUT starts when the job is sent, not while it waited for the card.
    fetchSignal: () => AbortSignal.any([req.signal, (timedOut = AbortSignal.timeout(settings.jobTimeoutMs))]),
    clientIp,
    retry: settings.retry,
    acquire,
    onRetry: (n) => {
      reach(false);
      void giveBack();
      emit({ phase: "retrying", jobId, ...n });
    },
  }).then(
    (result) => {
      if (!result.ok) {
        // Sent and unanswered may mean it runs: the release drains the tenant's own work first.
        const timeout = timedOut?.aborted === true;
        void finish(timeout ? "timeout" : "upstream_error", result.reason);
        return timeout
          ? errorResponse(image.dialect ?? "comfy", { status: 504, type: "upstream_timeout", message: `gpu-turnstile: ${image.label} did not answer within JOB_TIMEOUT (${settings.jobTimeoutMs} ms)` })
          : errorResponse(image.dialect ?? "comfy", { status: 502, type: "upstream_unreachable", message: `gpu-turnstile could not reach ${image.label}: ${result.reason}` });
      }
      const res = result.response;
      emit({ phase: "forwarded", jobId, status: res.status, durationMs: performance.now() - started });
      return whenBodyDone(res, req.signal, (end) => {
        const outcome: JobOutcome = !end.cut ? (res.status < 400 ? "completed" : "failed") : timedOut?.aborted ? "timeout" : req.signal.aborted ? "client_gone" : "upstream_error";
        void finish(outcome, end.cut ? String(end.cut) : undefined);
      });
    },
    (err: unknown) => {
      void finish(req.signal.aborted ? "client_gone" : "upstream_error", describeFetchError(err));
      throw err;
    },
  );
}

/** The session's opening: the LLM side handed over (proven), then the image side brought back. */
async function prepare(jobId: number, d: SyncJobDeps): Promise<void> {
  if (d.releaseLlm) {
    const r = await d.releaseLlm();
    d.emit({ phase: "unloaded", jobId, models: r.tried, durationMs: r.durationMs, complete: r.released, error: r.error, notRunning: r.notRunning });
  }
  // At every session's opening: a lease or a start may have released it too; the driver knows
  // whether anything is owed (A1111's reload-checkpoint only after its own unload).
  if (d.image.restore) {
    owes.add(d.image);
    await d.image.restore({ signal: AbortSignal.timeout(d.settings.freeTimeoutMs) }).catch(() => {});
  }
}

/** The session's end: the image side's own work drained (JOB_TIMEOUT), released and verified (FREE_TIMEOUT). */
async function releaseImage(jobId: number, promptId: string, d: SyncJobDeps): Promise<void> {
  const s = d.settings;
  const r = await handOver(d.image, { timeoutMs: s.freeTimeoutMs, pollMs: s.freePollIntervalMs, callTimeoutMs: s.probeTimeoutMs, drainTimeoutMs: s.jobTimeoutMs });
  owes.delete(d.image);
  d.emit({ phase: "freed", jobId, promptId, durationMs: r.durationMs, vramAfter: r.vramAfter, released: r.released, error: r.error, lied: r.lied });
}

/**
 * What the tenant calls the job, for the log: the route's last segment as the tenant names it
 * (A1111's `txt2img`, SwarmUI's `GenerateText2Image`), where ComfyUI's lines say "prompt".
 */
export function routeWord(pathname: string): string {
  const last = pathname.split("/").filter(Boolean).at(-1) ?? pathname;
  try {
    return decodeURIComponent(last);
  } catch {
    return last;
  }
}

/** How a sync job's end reads in the job log and metrics (the `finished` phase of a followed job). */
const END_OF: Partial<Record<JobOutcome, JobEnd>> = { completed: "success", failed: "error", timeout: "timeout", client_gone: "cancelled", upstream_error: "error" };

/** Never aborts: no client waits on work picked up at start. */
const NOBODY = new AbortController().signal;

/**
 * At start (SPEC "Restarts"): an image side that still generates (the turnstile restarted
 * mid-job) or holds memory with nothing running keeps the card — the LLM side emptied first —
 * until its own work has ended (JOB_TIMEOUT) and it is released, before the first LLM request.
 * The lock is taken before this returns; one that cannot be read is taken as not running.
 */
export async function pickUpSyncAtStart(d: SyncJobDeps, log: StartLog): Promise<void> {
  const { image } = d;
  const o = () => ({ signal: AbortSignal.timeout(d.settings.probeTimeoutMs) });
  let busy = 0;
  let held: boolean;
  try {
    busy = (await image.busy?.(o())) ?? 0;
    const h = await image.verify(o());
    held = h.held && !h.unreadable && !h.notRunning;
  } catch (err) {
    return log.warn(`${image.label} could not be read at start: starting idle`, { reason: describeFetchError(err) });
  }
  if (busy === 0 && !held) return log.debug(`${image.label} idle at start`);
  log.notice(`${image.label} ${busy > 0 ? `runs ${busy} job(s)` : "holds memory with nothing running"} at start: the GPU stays image until it is released`);
  const jobId = takeJobId();
  owes.add(image);
  const entered = d.sessions.enter(NOBODY, () => prepare(jobId, d));
  void d.tracker.run({ jobId, since: Date.now() }, async () => {
    const ticket = await entered;
    await ticket.ready();
    ticket.accepted();
    await ticket.leave(() => releaseImage(jobId, "picked up at start", d));
  });
}
