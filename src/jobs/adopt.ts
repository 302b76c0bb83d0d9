/**
 * Picking up what the card is doing at start (SPEC "Restarts"). Jobs ComfyUI runs or has queued
 * are taken as the turnstile's own: the GPU goes to `image` at once, Ollama is emptied, each job
 * is followed to its end (watchdog and lost-job detection included), then /free and its check,
 * then the release — the same functions an own job goes through, in the same image session.
 */
import type { JobListener, JobOutcome } from "./events.ts";
import { followToEnd, freeComfy, takeJobId, unloadOllama, warm, type ImageJobDeps } from "./image-job.ts";
import type { CardAtStart } from "./reconcile.ts";
import type { SessionTicket } from "./session.ts";
import { holdUntilRead, readCardAtStart, type StartLog } from "./start-read.ts";

/**
 * The start-up read (SPEC "Restarts"), which the listeners' first answers wait for: a lease the
 * last run kept is taken again, then ComfyUI's work is read and acted on; beside them, `probed`
 * (each upstream's first probe: whether it is up, and what Ollama does without a GPU). Every read
 * is bounded by PROBE_TIMEOUT; a ComfyUI too slow for it is held for, not waited on (start-read.ts).
 */
export async function readAtStart(o: {
  probed: Promise<void>;
  restoreLease: () => Promise<void>;
  image: ImageJobDeps | undefined;
  /** Another image kind's start read (tenants/sync-job.ts), when the image side is not ComfyUI. */
  other?: () => Promise<void>;
  log: StartLog;
  probeTimeoutMs: number;
}): Promise<void> {
  const card = (async () => {
    await o.restoreLease();
    if (o.image) pickUpAtStart(await readCardAtStart(o.image.comfy, o.probeTimeoutMs), o.image, o.log);
    else await o.other?.();
  })();
  await Promise.all([o.probed, card]);
}

/** Never aborts: no client waits on a job picked up at start. */
const NOBODY = new AbortController().signal;

/**
 * Acts on what the start found. Returns once the GPU is taken (or known to be free to use): the
 * lock's state is set before this returns, the work itself goes on tracked by `deps.tracker`.
 * `held`: the image session start-read.ts took while ComfyUI's work was unread; what is found
 * goes on in it (never through the lock again, where waiting chats could slip in between).
 */
export function pickUpAtStart(card: CardAtStart, deps: ImageJobDeps, log: StartLog, held?: Promise<SessionTicket>): void {
  switch (card.kind) {
    case "down":
      return log.warn("ComfyUI is not running at start: starting idle", { reason: card.reason });
    case "unread":
      return holdUntilRead(card.reason, deps, log, (found, ticket) => pickUpAtStart(found, deps, log, ticket));
    case "idle":
      deps.starts?.forgetAllBut([]);
      log.debug("ComfyUI idle at start");
      return void held?.then((t) => t.leave(async () => {}));
    case "free":
      deps.starts?.forgetAllBut([]);
      return freeAtStart(card.vramBytes, deps, log, held);
    case "adopt":
      deps.starts?.forgetAllBut(card.promptIds);
      return adopt(card, deps, log, held);
  }
}

/** The checkpoint is still loaded with nothing queued: /free and its check before any LLM request. */
function freeAtStart(vramBytes: number, deps: ImageJobDeps, log: StartLog, held: Promise<SessionTicket> | undefined): void {
  const jobId = takeJobId();
  // Its unload and free are said here, not as an image job's that never was.
  const emit: JobListener = (e) => {
    if (e.phase !== "freed") return;
    if (e.released) log.notice("ComfyUI memory held at start is released", { vram_before_bytes: e.vramBefore, vram_after_bytes: e.vramAfter });
    else log.warn("ComfyUI memory held at start: release not confirmed", { reason: e.error });
  };
  const quiet = { ...deps, emit };
  const entered = held ?? deps.sessions.enter(NOBODY, () => unloadOllama(jobId, quiet));
  log.notice("ComfyUI holds memory with an empty queue at start: freeing it before the first LLM request", { vram_bytes: vramBytes });
  void deps.tracker.run({ jobId, since: Date.now() }, async () => {
    const ticket = await entered;
    await ticket.ready();
    ticket.accepted();
    await ticket.leave(() => freeComfy(jobId, undefined, quiet));
  });
}

function adopt({ promptIds, detail }: Extract<CardAtStart, { kind: "adopt" }>, deps: ImageJobDeps, log: StartLog, held: Promise<SessionTicket> | undefined): void {
  const { sessions, emit, tracker } = deps;
  const jobs = promptIds.map((promptId) => ({ jobId: takeJobId(), promptId }));
  const first = jobs[0]!;
  const entered = held ?? sessions.enter(NOBODY, () => unloadOllama(first.jobId, deps));
  log.notice(`picked up ${jobs.length} ComfyUI job(s) running or queued at start: the GPU stays image until they end`, {
    prompt_ids: promptIds.join(","),
  });
  const since = Date.now();
  // Every job is followed at once (they are all in ComfyUI's queue already); the last to end
  // leaves the session, which frees ComfyUI before the GPU is handed on.
  let left = jobs.length;
  for (const [i, job] of jobs.entries()) {
    void tracker.run({ ...job, since }, async () => {
      const ticket = await entered;
      const acquiredAt = performance.now();
      emit({ phase: "acquired", jobId: job.jobId, waitedMs: ticket.waitedMs, joined: i > 0 });
      await ticket.ready();
      ticket.accepted();
      // Its history goes on: ComfyUI's number for it, and its run's start as ComfyUI's jobs API
      // says, else as the last run of the turnstile kept it (issue 27).
      const d = detail?.get(job.promptId);
      if (d?.number !== undefined) deps.held?.sawNumber(d.number);
      const startedAt = d?.startedAt ?? deps.starts?.startedAt(job.promptId);
      emit({ phase: "adopted", jobId: job.jobId, promptId: job.promptId, number: d?.number, startedAt });
      const followed = sessions.follow(job.promptId);
      // Whatever happens in the follow, the session is left: the GPU must not stay taken.
      let outcome = await followToEnd(job.jobId, job.promptId, deps).catch((): JobOutcome => "failed");
      // A force-release's interrupt, told apart from a client's as for the turnstile's own jobs.
      if (tracker.interrupted.delete(job.promptId)) outcome = "interrupted";
      followed.done();
      const last = --left === 0;
      const gpuReleased = last && (await ticket.leave(() => freeComfy(job.jobId, job.promptId, deps)));
      emit({ phase: "released", ...job, outcome, heldMs: performance.now() - acquiredAt, gpuReleased });
      if (gpuReleased) await warm(deps);
    });
  }
}
