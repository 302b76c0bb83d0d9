/**
 * The start's read of ComfyUI's work (SPEC "Restarts"), and the hold that fails closed when that
 * read gets no answer. A ComfyUI that is not running (refused, reset, no such host, something else
 * answering) holds nothing; one that gives no answer within PROBE_TIMEOUT may be running a job (a
 * busy ComfyUI answers late), so the GPU is taken as image at once — Ollama emptied, chats wait as
 * during any job — and the work is read again every HISTORY_POLL_INTERVAL until it answers. What
 * is found then goes on in the same image session (adopt.ts). The hold is bounded by JOB_TIMEOUT,
 * like a job of our own never seen finished: past it, /free is asked and the GPU handed on, with
 * an error line.
 */
import type { ComfyClient } from "../comfy/client.ts";
import { formatDuration } from "../config/duration.ts";
import { sleep } from "../http/backoff.ts";
import { isNoAnswer } from "../upstream/upstream-errors.ts";
import type { JobListener } from "./events.ts";
import { freeComfy, takeJobId, unloadOllama, type ImageJobDeps } from "./image-job.ts";
import { decideAtStart, type CardAtStart } from "./reconcile.ts";
import type { SessionTicket } from "./session.ts";

export interface StartLog {
  /** Said at the default level: what the start found and took on. */
  notice(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

/** What a read found once ComfyUI answered. */
export type ReadCard = Exclude<CardAtStart, { kind: "unread" | "down" }>;

/**
 * Reads ComfyUI's work and memory together, the whole read bounded by `timeoutMs` (PROBE_TIMEOUT,
 * or what is left of a longer bound, named by `bound` in the reason): the jobs API and the /queue
 * it falls back on share one deadline.
 */
export async function readCardAtStart(comfy: ComfyClient, timeoutMs: number, bound = `PROBE_TIMEOUT (${formatDuration(timeoutMs)})`): Promise<CardAtStart> {
  const deadline = AbortSignal.timeout(timeoutMs);
  const [queue, vram] = await Promise.all([
    comfy.work(deadline).catch((err: unknown) =>
      deadline.aborted || isNoAnswer(err)
        ? new DOMException(`no answer within ${bound}`, "TimeoutError")
        : err instanceof Error
          ? err
          : new Error(String(err)),
    ),
    comfy.torchReserved(timeoutMs).catch(() => undefined),
  ]);
  return decideAtStart(queue, vram);
}

/** Never aborts: no client waits on the hold. */
const NOBODY = new AbortController().signal;

/**
 * Takes the GPU as image now (the lock's state is set before this returns) and reads ComfyUI's
 * work until it answers; then `found` goes on with what it found, in the session held.
 */
export function holdUntilRead(reason: string, deps: ImageJobDeps, log: StartLog, found: (card: ReadCard, held: Promise<SessionTicket>) => void): void {
  const { settings, sessions, tracker } = deps;
  const jobId = takeJobId();
  // Not an image job of its own: its unload and free are said here, not by the job log.
  const freed: JobListener = (e) => {
    if (e.phase === "freed" && !e.released) log.warn("ComfyUI memory release not confirmed after the start's hold", { reason: e.error });
  };
  const quiet = { ...deps, emit: freed };
  const held = sessions.enter(NOBODY, () => unloadOllama(jobId, quiet));
  const bound = formatDuration(settings.jobTimeoutMs);
  log.warn(`ComfyUI accepts connections but its work could not be read at start: the GPU is held as image until it is read, at most JOB_TIMEOUT (${bound})`, { reason });
  const t0 = performance.now();
  void tracker.run({ jobId, since: Date.now() }, async () => {
    const ticket = await held;
    await ticket.ready();
    const deadline = t0 + settings.jobTimeoutMs;
    for (let left = deadline - performance.now(); left > 0; left = deadline - performance.now()) {
      await sleep(Math.min(settings.historyPollIntervalMs, left));
      const rest = deadline - performance.now();
      // The last read may get only what is left of JOB_TIMEOUT: its reason then names that bound.
      const card = await readCardAtStart(deps.comfy, Math.max(1, Math.min(settings.probeTimeoutMs, rest)), rest < settings.probeTimeoutMs ? `JOB_TIMEOUT (${bound})` : undefined);
      const after = formatDuration(Math.round(performance.now() - t0));
      if (card.kind === "unread") reason = card.reason;
      else if (card.kind === "down") {
        // Restarted or killed meanwhile: a process that is gone holds no memory.
        log.notice(`ComfyUI stopped running ${after} after start: releasing the GPU`, { reason: card.reason });
        return void (await ticket.leave(async () => {}));
      } else {
        // A client's job that joined the held session (IMAGE_SESSION_MAX) is followed by its own
        // request already: only what ComfyUI ran before the start is picked up.
        const ids = card.kind === "adopt" ? card.promptIds.filter((id) => !deps.promptIds.has(id)) : [];
        const theirs: ReadCard = card.kind !== "adopt" ? card : ids.length > 0 ? { kind: "adopt", promptIds: ids } : { kind: "idle" };
        log.notice(`ComfyUI's work read ${after} after start: ${theirs.kind === "adopt" ? "picking up its jobs" : "nothing to pick up"}`);
        return found(theirs, held);
      }
    }
    log.error(`ComfyUI's work still unread JOB_TIMEOUT (${bound}) after start: asking it to free its memory, then handing the GPU on`, { reason });
    ticket.accepted();
    await ticket.leave(() => freeComfy(jobId, undefined, quiet));
  });
}
