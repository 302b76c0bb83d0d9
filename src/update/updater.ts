/**
 * The background updater: one attempt at startup and one every UPDATE_INTERVAL, never two at
 * once. Once a release is staged it stops looking; as a service it then waits for the GPU to be
 * idle and asks for exit code 3 (systemd Restart=on-failure / the SCM recovery action brings up
 * the new binary); interactively it says "restart to apply".
 */
import type { Config } from "../config/types.ts";
import { checkOnce, updateBlocker } from "./check.ts";
import type { CheckContext, CheckOutcome } from "./check.ts";

/** Exit code that means "restart me on the staged binary". */
export const UPDATE_EXIT_CODE = 3;

/** One attempt may not hang forever: a stalled download would stop all later checks. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 15 * 60_000;

export interface UpdaterOptions extends Omit<CheckContext, "signal" | "config"> {
  config: Pick<Config, "autoUpdate" | "updateIntervalMs" | "appVer" | "updateRepo" | "updateAsset">;
  /** running as a systemd / Windows service (restarted by its manager on exit 3) */
  isService: boolean;
  /** resolves when the GPU lock is idle: no image job, no LLM request (streaming chats included) */
  waitIdle: () => Promise<void>;
  /** stop accepting, drain, exit with `code` */
  beginShutdown: (code: number) => void;
  attemptTimeoutMs?: number;
}

export interface Updater {
  /** Cancels a running attempt and all later ones (call on shutdown). */
  stop(): void;
  /** Settles when the updater has nothing more to do: disabled, stopped, or an update applied. */
  readonly done: Promise<void>;
}

export function startUpdater(o: UpdaterOptions): Updater {
  const stopper = new AbortController();
  const stop = (): void => stopper.abort();

  const blocker = updateBlocker(o);
  if (blocker) {
    // A missing key is worth a warning even when updates are off anyway: it is a build defect.
    if (blocker.defect) o.log.warn(blocker.reason);
    else o.log.info(blocker.reason);
    return { stop, done: Promise.resolve() };
  }
  if (!o.config.autoUpdate) {
    o.log.info("auto-update off (AUTO_UPDATE=false)");
    return { stop, done: Promise.resolve() };
  }
  return { stop, done: run(o, stopper.signal) };
}

async function run(o: UpdaterOptions, stopped: AbortSignal): Promise<void> {
  while (!stopped.aborted) {
    const signal = AbortSignal.any([stopped, AbortSignal.timeout(o.attemptTimeoutMs ?? DEFAULT_ATTEMPT_TIMEOUT_MS)]);
    const outcome = await checkOnce({ ...o, signal });
    if (stopped.aborted) return;
    report(o, outcome);
    if (outcome.status === "disabled") return;
    if (outcome.status === "staged") return apply(o, outcome.tag, stopped);
    await sleep(o.config.updateIntervalMs, stopped);
  }
}

function report(o: UpdaterOptions, outcome: CheckOutcome): void {
  switch (outcome.status) {
    case "current":
      return o.log.debug("update check: nothing to do", { reason: outcome.reason });
    case "failed":
      // A full or failing disk needs the operator; a refused release is the publisher's problem.
      if (outcome.staging) return o.log.error(`update not applied: ${outcome.reason}`, { next_check_ms: o.config.updateIntervalMs });
      return o.log.warn(`update refused: ${outcome.reason}`, { next_check_ms: o.config.updateIntervalMs });
    case "disabled":
      return o.log.info(outcome.reason);
    case "staged":
      return;
  }
}

async function apply(o: UpdaterOptions, tag: string, stopped: AbortSignal): Promise<void> {
  if (!o.isService) {
    o.log.warn(`update ${tag} staged; restart to apply`, { exe: o.execPath });
    return;
  }
  o.log.warn(`update ${tag} staged; restarting once the GPU is idle`, { exe: o.execPath });
  await o.waitIdle();
  if (stopped.aborted) return; // shutting down anyway: the next start runs the new binary
  o.log.warn(`restarting to apply update ${tag} (exit ${UPDATE_EXIT_CODE})`);
  o.beginShutdown(UPDATE_EXIT_CODE);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    // The updater alone must not keep the process alive.
    timer.unref?.();
    signal.addEventListener("abort", done, { once: true });
  });
}
