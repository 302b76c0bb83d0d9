/**
 * What `lease -- cmd` does when its lease ends under it: it hears of the end at once from
 * /turnstile/events (not at its next renewal, a third of the TTL away), then stops its command the
 * way service managers do — SIGTERM, and SIGKILL if it is still there after a grace period.
 */
import { followEvents } from "./follow-events.ts";

/** How long a command gets between SIGTERM and SIGKILL when its lease was revoked. */
export const KILL_GRACE_MS = 10_000;

/**
 * Follows the event stream until `signal` aborts; calls `onEnd` once, with the reason, when the
 * lease `id` ends. A stream lost meanwhile is reopened (the renewals still notice a lease gone).
 */
export function watchLeaseEnd(opts: { base: string; headers: Record<string, string>; id: string; signal: AbortSignal; onEnd: (reason: string, by?: string) => void }): Promise<unknown> {
  let told = false;
  return followEvents({
    url: `${opts.base}/turnstile/events`,
    headers: opts.headers,
    signal: opts.signal,
    onEvent({ event, data }) {
      const d = data as { event?: string; lease?: { id?: string }; reason?: string; by?: string };
      if (told || event !== "lease" || d.event !== "end" || d.lease?.id !== opts.id) return;
      told = true;
      opts.onEnd(d.reason ?? "ended", d.by);
    },
  });
}

/** SIGTERM now, SIGKILL after `graceMs` if the process has not exited by then. */
export function stopCommand(child: { kill(sig: NodeJS.Signals): void; exited: Promise<unknown> }, graceMs: number): void {
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  void child.exited.finally(() => clearTimeout(timer));
}

/** The command to run, as the shell would find it (on this process's PATH); undefined when there is none. */
export function findCommand(name: string): string | undefined {
  return Bun.which(name) ?? undefined;
}
