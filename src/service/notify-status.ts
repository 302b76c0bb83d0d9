/**
 * The line `systemctl status` shows (sd_notify STATUS=): the GPU state with its holders and
 * waiters. A waiter joining the queue changes no state and emits no lock event, so the snapshot is
 * read on a fixed beat instead, and sent only when its text changed: busy chat traffic that flips
 * idle <-> llm thousands of times a second costs at most one datagram per beat (4 a second), and
 * what systemd shows is never older than one beat.
 */
import type { LockSnapshot } from "../lock/index.ts";

/** Shortest interval between two status reports: at most 4 a second. */
export const STATUS_EVERY_MS = 250;

export function statusText(s: LockSnapshot): string {
  return `GPU ${s.state}: ${s.llmInflight} LLM request(s) running, ${s.llmWaiting} waiting; ${s.imageWaiting} image job(s) waiting`;
}

export interface StatusReportOptions {
  snapshot(): LockSnapshot;
  send(text: string): void;
  /** Calls `tick` every STATUS_EVERY_MS until the returned stop() (tests drive it by hand). */
  every?: (tick: () => void) => () => void;
}

/** Sends the status at once, then whenever it changed, one beat at most; returns stop(). */
export function reportStatus(opts: StatusReportOptions): () => void {
  let last = "";
  const tick = () => {
    const text = statusText(opts.snapshot());
    if (text === last) return;
    last = text;
    opts.send(text);
  };
  tick();
  const every =
    opts.every ??
    ((fn) => {
      const t = setInterval(fn, STATUS_EVERY_MS);
      t.unref();
      return () => clearInterval(t);
    });
  return every(tick);
}
