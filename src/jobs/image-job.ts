/**
 * One image job, start to release, as one sequence (SPEC "Image job flow"):
 *
 *   enter the image session (the job that opens it empties Ollama and waits until /api/ps is
 *   empty; a joiner waits for that) → forward /prompt once → pass ComfyUI's answer back →
 *   (200 + prompt_id) follow the job in /queue and /history (interrupting it past JOB_TIMEOUT) →
 *   leave the session: the last job out calls /free and waits until /system_stats shows the VRAM
 *   is back, then the lock is released → optionally warm a chat model.
 *
 * The GPU is held until ComfyUI has really finished and really let go of the memory, not until
 * /prompt returned (which only means "queued"). Every path leaves the session exactly once.
 */
import type { ComfyClient } from "../comfy/client.ts";
import { vramReleased } from "../comfy/client.ts";
import type { OllamaClient } from "../ollama/client.ts";
import { sleep } from "../http/backoff.ts";
import { errorResponse } from "../http/dialect.ts";
import { forward, relayResponse, type Hold, type RetryPolicy } from "../http/forward.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import { captureHead, findNumber, findPromptId } from "./capture.ts";
import type { JobEnd, JobListener, JobOutcome } from "./events.ts";
import { awaitStubbornJob, followJob, stopJob } from "./follow.ts";
import type { HeldPrompts } from "./held-prompts.ts";
import type { JobStarts } from "./job-starts.ts";
import type { Nudges } from "./nudge.ts";
import { admitPrompt } from "./prompt-admission.ts";
import { comfyKnows, type PromptIds } from "./prompt-ids.ts";
import type { SharedQueue } from "./queue-share.ts";
import type { Coexistence } from "./coexist.ts";
import type { ImageSessions, SessionTicket } from "./session.ts";
import type { JobTracker } from "./tracker.ts";
import { admitImageJob, type FairJobs } from "./fair-admission.ts";
import { workflowKeyOfBody } from "./workflow-key.ts";

/** The part of the GPU lock an image job uses directly (the image side goes through `sessions`). */
export interface ImageLock {
  tryAcquireLLM(): { release(): void } | null;
  readonly state: string;
}

export interface ImageJobSettings {
  probeTimeoutMs: number;
  jobTimeoutMs: number;
  historyPollIntervalMs: number;
  freeTimeoutMs: number;
  freePollIntervalMs: number;
  promptCaptureLimit: number;
  warmModel: string;
  warmTimeoutMs: number;
  retry: RetryPolicy;
}

/** `identify`, `fairTurns`, `quota` (FairJobs): issue 30's fair turns and quotas. */
export interface ImageJobDeps extends FairJobs {
  lock: ImageLock;
  sessions: ImageSessions;
  comfy: ComfyClient;
  /** The LLM side's proven hand-over (tenants/hand-over.ts); absent when OLLAMA_URL is empty. Never throws. */
  /** `keep`: a model COEXIST admitted to stay (Ollama's hand-over spares it). */
  releaseLlm?: (keep?: string) => Promise<{ tried: string[]; released: boolean; durationMs: number; error?: string; notRunning?: string }>;
  /** WARM_MODEL's Ollama; absent when OLLAMA_URL is empty or another LLM_KIND. */
  ollama: OllamaClient | undefined;
  settings: ImageJobSettings;
  tracker: JobTracker;
  emit: JobListener;
  /** prompt_ids in use or used recently: a reused one is refused. */
  promptIds: PromptIds;
  /** One /queue read per poll for all followers (a ComfyUI without the jobs API). */
  queue?: SharedQueue;
  /** Wakes followers when a client cancels its jobs (proxy/comfy-cancels.ts). */
  nudges?: Nudges;
  /** Prompts not yet sent, shown in ComfyUI's /queue; a queue edit may remove them (held-prompts.ts). */
  held?: HeldPrompts;
  /** When jobs began running, kept under STATE_DIR for the jobs a restart picks up (job-starts.ts). */
  starts?: JobStarts;
  /** COEXIST: a model may stay beside the session's jobs (coexist.ts); absent when off. */
  coexist?: Coexistence;
}

let nextJobId = 1;
/** A job number for the logs and the status, shared with the jobs picked up at start (adopt.ts). */
export const takeJobId = (): number => nextJobId++;

export async function handleImageJob(incoming: Request, clientIp: string | undefined, deps: ImageJobDeps): Promise<Response> {
  const { sessions, settings, emit } = deps;
  // Before the GPU: ComfyUI's cross-site rule, and a prompt_id this job can be followed by.
  const admission = await admitPrompt(incoming, { comfy: deps.comfy, ids: deps.promptIds });
  if (!admission.ok) return errorResponse("comfy", admission.reply);
  const req = admission.request;
  const sentId = admission.body.promptId;
  const clientId = admission.body.clientId;
  const fresh = admission.fresh;
  const fair = admitImageJob(deps, { authorization: incoming.headers.get("authorization"), clientId, address: clientIp, headers: incoming.headers });
  if (!fair.ok) {
    deps.promptIds.forget(sentId);
    return errorResponse("comfy", fair.reply);
  }
  const { who, slot } = fair;
  const jobId = takeJobId();
  const { coexist } = deps;
  const workflow = coexist ? workflowKeyOfBody(admission.body.bytes) : undefined;
  emit({ phase: "received", jobId, promptId: sentId, minted: admission.body.minted, clientId, client: clientIp, who });
  // Until it is sent, the prompt shows in ComfyUI's /queue, and a client's delete there ends its
  // wait as the client's own leaving would (the GPU is given back, nothing reaches ComfyUI).
  const deleted = new AbortController();
  const held = deps.held?.hold(sentId, admission.body.bytes, clientId, () => deleted.abort());
  const clientSignal = held ? AbortSignal.any([req.signal, deleted.signal]) : req.signal;
  const gone = (): JobOutcome => (deleted.signal.aborted ? "cancelled" : "client_gone");
  let lease: SessionTicket | undefined;
  let acquiredAt = 0;
  let heldMs = 0;
  let everHeld = false;
  let reported = false;
  // Why ComfyUI was never reached, for the job's summary line (the retries' give-up above all).
  let failure: string | undefined;

  // Leaves the image session; idempotent. Between attempts (ComfyUI refused the connection) that
  // is all — unless this job is the session's last and ComfyUI ran others in it: then it frees
  // ComfyUI first. Resolves true when the GPU was handed on.
  let left: Promise<boolean> = Promise.resolve(false);
  const giveBack = (): Promise<boolean> => {
    if (!lease) return left;
    const l = lease;
    lease = undefined;
    left = l.leave(() => freeComfy(jobId, sentId, deps)).then((ended) => {
      if (ended) coexist?.sessionEnded();
      heldMs = performance.now() - acquiredAt;
      return ended;
    });
    // A last job out may free ComfyUI first: that is work the turnstile still owes.
    void deps.tracker.run({ jobId, promptId: sentId, since: Date.now() }, () => left.then(() => {}));
    return left;
  };
  // The job's end: reported once per job, not once per attempt — a job that found ComfyUI down
  // five times and then completed was counted as five upstream_error jobs plus one completed.
  // A client that left before the GPU was ever granted leaves no trace.
  const release = async (outcome: JobOutcome): Promise<boolean> => {
    const gpuReleased = await giveBack();
    slot?.release();
    if (!everHeld && !reported) {
      reported = true;
      emit({ phase: "left", jobId });
    }
    if (!everHeld || reported) return gpuReleased;
    reported = true;
    emit({ phase: "released", jobId, promptId: sentId, outcome, heldMs, gpuReleased, reason: failure });
    return gpuReleased;
  };

  // Taken before every attempt to reach ComfyUI. If ComfyUI is down the attempt fails, the GPU is
  // given back for the backoff sleep, and the next attempt takes it (and empties Ollama) again.
  const acquire = async (): Promise<Hold> => {
    const prepare = coexist ? () => coexist.prepare(workflow, (keep) => unloadOllamaKeeping(jobId, deps, keep)) : () => unloadOllama(jobId, deps);
    const l = await sessions.enter(clientSignal, prepare, fair.turn(jobId));
    lease = l;
    everHeld = true;
    acquiredAt = performance.now();
    emit({ phase: "acquired", jobId, waitedMs: l.waitedMs, joined: !l.opensSession, cls: who?.cls });
    await l.ready();
    await coexist?.beforeJob(workflow, () => unloadOllama(jobId, deps));
    if (clientSignal.aborted) {
      release(gone());
      throw clientSignal.reason;
    }
    held?.sending();
    // Not given back when the attempt fails: a failure after the /prompt went out may hide a queued
    // job, so the answer decides (below); before a retry, onRetry gives it back for the backoff.
    return { release: () => {} };
  };

  // Once the body is on its way ComfyUI may queue the job whatever the client does, so the
  // upstream request is not tied to the client's signal; JOB_TIMEOUT bounds a ComfyUI that hangs.
  // The timeout starts per attempt: one made on arrival had often expired by the time a job that
  // queued behind others got the GPU, and that job got a 502 without reaching ComfyUI.
  // The attempt whose /prompt is on its way, until it is given up for a backoff: if it ends with
  // no answer, that is ComfyUI's doing (JOB_TIMEOUT, or a cut), whether or not the client stayed.
  let sent: AbortSignal | undefined;
  const fetchSignal = () => (sent = AbortSignal.timeout(settings.jobTimeoutMs));
  const noAnswer = (s: AbortSignal): JobOutcome => (s.aborted ? "timeout" : "upstream_error");
  const started = performance.now();
  let result;
  try {
    result = await forward(req, {
      upstream: deps.comfy.base,
      signal: clientSignal,
      fetchSignal,
      clientIp,
      retry: settings.retry,
      acquire,
      onRetry: (n) => {
        sent = undefined;
        held?.waiting();
        void giveBack();
        emit({ phase: "retrying", jobId, ...n });
      },
    });
  } catch (err) {
    held?.done();
    // A client that left before its prompt went out may send the same id again.
    if (!sent) {
      deps.promptIds.forget(sentId);
      release(gone());
      if (deleted.signal.aborted && !req.signal.aborted) return deletedAnswer(sentId);
    } else void unanswered(noAnswer(sent));
    throw err;
  }
  held?.done();

  if (!result.ok) {
    failure = result.reason;
    const outcome = noAnswer(sent!);
    await unanswered(outcome);
    if (outcome === "timeout") {
      return errorResponse("comfy", {
        status: 504,
        type: "upstream_timeout",
        message: `gpu-turnstile: ComfyUI did not answer /prompt within JOB_TIMEOUT (${settings.jobTimeoutMs} ms)`,
      });
    }
    return errorResponse("comfy", {
      status: 502,
      type: "upstream_unreachable",
      message: `gpu-turnstile could not reach ComfyUI: ${result.reason}`,
    });
  }

  const res = result.response;
  const forwarded = (status: number, answeredPromptId?: string) =>
    emit({ phase: "forwarded", jobId, status, promptId: sentId, answeredPromptId, clientId, durationMs: performance.now() - started });
  if (res.status !== 200 || res.body === null) {
    forwarded(res.status);
    // A 4xx queued nothing: the GPU goes back at once, and the id may be sent again. Any other
    // answer (a 5xx from ComfyUI or a proxy in front of it) may hide a queued job: ComfyUI is asked,
    // and one that cannot say is followed too (a slow ComfyUI behind a gateway's 504 did queue it);
    // following an id ComfyUI never had ends in two polls.
    if (res.status < 500 && res.status !== 200) deps.promptIds.forget(sentId);
    if ((res.status >= 500 || res.status === 200) && (await comfyKnows(deps.comfy, sentId)) !== "unknown") {
      followAll([sentId]);
      return relayResponse(res);
    }
    release("rejected");
    return relayResponse(res);
  }

  // The job is followed by the id that was sent; ComfyUI's answer is still read, and an answer
  // naming another id (a ComfyUI or plugin that rewrites ids) gets that one followed as well.
  const captured = captureHead(res.body, settings.promptCaptureLimit);
  void captured.head.then((head) => {
    const number = findNumber(head);
    if (number !== undefined) deps.held?.sawNumber(number);
    const answered = findPromptId(head);
    const other = answered !== undefined && answered !== sentId ? answered : undefined;
    forwarded(res.status, other);
    followAll(other ? [sentId, other] : [sentId]);
  });
  return relayResponse(res, captured.body);

  /**
   * A /prompt that was out and got no answer: ComfyUI may have queued it and lost only its answer.
   * One that says so is followed; so is one that went silent with the request (timeout) and cannot
   * say. A ComfyUI that refused the connection cannot say either: that one releases at once.
   */
  async function unanswered(outcome: JobOutcome): Promise<void> {
    const known = await comfyKnows(deps.comfy, sentId);
    if (known === "known" || (outcome === "timeout" && known === "unchecked")) followAll([sentId]);
    else void release(outcome);
  }

  function followAll(ids: string[]): void {
    lease?.accepted();
    void deps.tracker.run({ jobId, promptId: sentId, since: Date.now() }, async () => {
      let outcome: JobOutcome = "failed";
      const followed = ids.map((id) => sessions.follow(id));
      try {
        for (const id of ids) outcome = await followToEnd(jobId, id, deps, fresh && id === sentId);
      } finally {
        if (ids.some((id) => deps.tracker.interrupted.delete(id))) outcome = "interrupted";
        for (const f of followed) f.done();
      }
      coexist?.jobEnded(workflow, outcome === "completed" || outcome === "failed" ? outcome : "other");
      if (await release(outcome)) await warm(deps);
    });
  }
}

/**
 * The answer to a /prompt deleted from the queue while it waited for the GPU: ComfyUI's own 400
 * shape for a prompt it did not queue, so a client (the frontend's dialog, an SDK's exception)
 * shows why, and does not wait for a job that will never run.
 */
function deletedAnswer(promptId: string): Response {
  return errorResponse("comfy", {
    status: 400,
    type: "prompt_deleted",
    message: `gpu-turnstile: prompt ${promptId} was deleted from the queue while it waited for the GPU; it was not run`,
  });
}

/** Empty the LLM side (Ollama's: ollama/unload.ts, through its driver). Never throws: a misbehaving neighbour must not fail the user's image request. */
export async function unloadOllama(jobId: number, deps: ImageJobDeps): Promise<void> {
  await unloadOllamaKeeping(jobId, deps);
}

/** The same, sparing `keep` (a model COEXIST admitted to stay, Ollama only); the result says what was sent. */
export async function unloadOllamaKeeping(jobId: number, deps: ImageJobDeps, keep?: string): Promise<{ tried: string[] } | undefined> {
  if (!deps.releaseLlm) return undefined;
  const r = await deps.releaseLlm(keep);
  deps.emit({ phase: "unloaded", jobId, models: r.tried, durationMs: r.durationMs, complete: r.released, error: r.error, notRunning: r.notRunning });
  return r;
}

const OUTCOME_OF: Record<JobEnd, JobOutcome> = {
  success: "completed",
  error: "failed",
  cancelled: "cancelled",
  lost: "lost",
  timeout: "timeout",
  interrupted: "timeout",
  not_stopped: "timeout",
};

/**
 * Wait until ComfyUI is done with the job. Past JOB_TIMEOUT a job it still runs or queues is
 * interrupted (the watchdog); one that will not stop keeps the GPU for one more JOB_TIMEOUT with
 * the interrupt repeated, and is then handed on with an error line: bounded either way.
 */
export async function followToEnd(jobId: number, promptId: string, deps: ImageJobDeps, fresh = false): Promise<JobOutcome> {
  const { comfy, settings, emit, sessions } = deps;
  const t0 = performance.now();
  let running = false;
  const seen = await followJob(comfy, promptId, {
    timeoutMs: settings.jobTimeoutMs,
    pollMs: settings.historyPollIntervalMs,
    isOurs: (id) => sessions.owns(id),
    onPlace: (place) => {
      if (place !== "running" || running) return;
      running = true;
      emit({ phase: "started", jobId, promptId });
    },
    queue: deps.queue,
    nudges: deps.nudges,
    fresh,
  });
  let end: JobEnd;
  if (seen.end === "overrun") {
    const stop = { stopTimeoutMs: settings.freeTimeoutMs, pollMs: settings.historyPollIntervalMs };
    if (await stopJob(comfy, promptId, seen.place, stop)) end = "interrupted";
    else {
      emit({ phase: "unstoppable", jobId, promptId, graceMs: settings.jobTimeoutMs });
      end = (await awaitStubbornJob(comfy, promptId, settings.jobTimeoutMs, stop)) ? "interrupted" : "not_stopped";
    }
  } else end = seen.end;
  emit({ phase: "finished", jobId, promptId, end, durationMs: performance.now() - t0 });
  return OUTCOME_OF[end];
}

/**
 * /free, then poll /system_stats until the VRAM is back or FREE_TIMEOUT passes. When it is not
 * back, ComfyUI's queue is read before the card is handed on: while it still holds any job
 * (ours, or one queued around the turnstile) ComfyUI is working, so the card stays held (and the
 * log says so) until the queue is empty, for at most JOB_TIMEOUT; then memory gets one more
 * FREE_TIMEOUT. Never throws.
 */
export async function freeComfy(jobId: number, promptId: string | undefined, deps: ImageJobDeps): Promise<void> {
  const { comfy, settings, emit } = deps;
  const f0 = performance.now();
  let r = await freeAndVerify(comfy, settings);
  if (!r.released) {
    const busy = await queuedJobs(comfy);
    if (busy.length > 0) {
      emit({ phase: "still_busy", jobId, promptIds: busy.slice(0, 10), jobs: busy.length, boundMs: settings.jobTimeoutMs });
      const emptied = await queueEmptied(comfy, settings.jobTimeoutMs, settings.freePollIntervalMs);
      if (!emptied) r = { ...r, error: `ComfyUI still had jobs queued after JOB_TIMEOUT (${settings.jobTimeoutMs} ms); ${r.error}` };
      else r = await freeAndVerify(comfy, settings);
    }
  }
  emit({ phase: "freed", jobId, promptId, durationMs: performance.now() - f0, ...r });
}

/** The ids ComfyUI runs or has pending; [] when it has none or cannot say. */
async function queuedJobs(comfy: ComfyClient): Promise<string[]> {
  const q = await comfy.work().catch(() => undefined);
  return q ? [...q.running, ...q.pending] : [];
}

/** Polls ComfyUI's work until it has none (true) or `boundMs` passes (false). */
async function queueEmptied(comfy: ComfyClient, boundMs: number, pollMs: number): Promise<boolean> {
  const deadline = performance.now() + boundMs;
  for (;;) {
    if ((await queuedJobs(comfy)).length === 0) return true;
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await sleep(Math.min(pollMs, left));
  }
}

interface FreeResult {
  vramBefore?: number;
  vramAfter?: number;
  /** ComfyUI's device when its memory is the system's (cpu, mps, DirectML): nothing was measured. */
  shared?: string;
  released: boolean;
  error?: string;
}

async function freeAndVerify(comfy: ComfyClient, settings: ImageJobSettings): Promise<FreeResult> {
  const deadline = Date.now() + settings.freeTimeoutMs;
  let vramBefore: number | undefined;
  let vramAfter: number | undefined;
  let released = false;
  let error: string | undefined;
  try {
    // Every call gets only what is left of the one FREE_TIMEOUT: a ComfyUI that stops answering
    // would otherwise hold the card for a whole FREE_TIMEOUT per call.
    const remaining = () => Math.max(1, deadline - Date.now());
    const before = await comfy.systemStats(remaining()).catch(() => undefined);
    await comfy.free(remaining());
    // The system's memory never drops after /free (api-facts R1): the release is done once /free
    // is answered and ComfyUI has no job left, as waiting for a drop would only wait out FREE_TIMEOUT.
    if (before?.shared !== undefined) return sharedRelease(comfy, before.shared);
    vramBefore = before?.torchReserved;
    if (vramBefore === undefined) {
      error = "could not read /system_stats; VRAM release not verified";
    } else {
      for (;;) {
        vramAfter = await comfy.torchReserved(remaining());
        if (vramReleased(vramBefore, vramAfter)) {
          released = true;
          break;
        }
        const left = deadline - Date.now();
        if (left <= 0) {
          error = `VRAM not released within FREE_TIMEOUT (${settings.freeTimeoutMs} ms)`;
          break;
        }
        await sleep(Math.min(freePollDelay(settings.freePollIntervalMs, settings.freeTimeoutMs - left), left));
      }
    }
  } catch (err) {
    // The last /system_stats read gets only what is left of FREE_TIMEOUT (often a millisecond),
    // so a deadline hit there surfaced as a bare "The operation timed out."; name the timeout.
    error =
      Date.now() >= deadline
        ? `VRAM not released within FREE_TIMEOUT (${settings.freeTimeoutMs} ms): ${describeFetchError(err)}`
        : describeFetchError(err);
  }
  return { vramBefore, vramAfter, released, error };
}

/**
 * ComfyUI's worker unloads within a second of /free when idle: the check looks every
 * FAST_FREE_POLL_MS (at most FREE_POLL_INTERVAL) for that first second, so the card is handed on
 * within tens of ms of the memory being back (issue 27's goal: 50 ms), then every FREE_POLL_INTERVAL.
 */
const FAST_FREE_POLL_MS = 20;
const FAST_FREE_WINDOW_MS = 1000;
function freePollDelay(pollMs: number, sinceStartMs: number): number {
  return sinceStartMs < FAST_FREE_WINDOW_MS ? Math.min(pollMs, FAST_FREE_POLL_MS) : pollMs;
}

async function sharedRelease(comfy: ComfyClient, shared: string): Promise<FreeResult> {
  const busy = await queuedJobs(comfy);
  if (busy.length === 0) return { shared, released: true };
  return { shared, released: false, error: `ComfyUI's queue still holds ${busy.length} job(s)` };
}

/** WARM_MODEL: reload the chat model once the GPU is idle. It loads a model, so it holds an LLM slot. */
export async function warm(deps: ImageJobDeps): Promise<void> {
  const { ollama, settings, lock, emit } = deps;
  const model = settings.warmModel;
  if (!ollama || !model) return;
  if (lock.state !== "idle") return emit({ phase: "warm_skipped", model, reason: `GPU is ${lock.state}` });
  const slot = lock.tryAcquireLLM();
  if (!slot) return emit({ phase: "warm_skipped", model, reason: "an image job is waiting" });
  const t0 = performance.now();
  try {
    await ollama.warm(model, settings.warmTimeoutMs);
    emit({ phase: "warmed", model, durationMs: performance.now() - t0 });
  } catch (err) {
    emit({ phase: "warmed", model, durationMs: performance.now() - t0, error: describeFetchError(err) });
  } finally {
    slot.release();
  }
}
