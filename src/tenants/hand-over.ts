/**
 * One tenant gives the card back, proven from its own report (SPEC "Tenants"):
 *
 *   [drain: wait until its own busy count is 0] → release → verify, polled; the release is sent
 *   again on each poll while the tenant still holds something (a model that began loading
 *   meanwhile is unloaded too) → a verdict within the bound.
 *
 * The verdict is never taken from the release call's 200. A tenant that accepted every release
 * and still reports the memory held at the bound has lied (Forge's unload-checkpoint): the
 * verdict says so, so the log can warn and the status can show it. The drain and the release have
 * a bound each (UNLOAD_TIMEOUT twice, at most, on the LLM side). Never throws: a misbehaving
 * neighbour must not fail the user's request; the bound ends the hold either way.
 */
import { formatDuration } from "../config/duration.ts";
import { sleep } from "../http/backoff.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import type { HandOverBound, Holding, Released, Tenant } from "./types.ts";

export async function handOver(t: Tenant, b: HandOverBound): Promise<Released> {
  if (t.handOver) return t.handOver(b);
  const t0 = performance.now();
  // The drain has a bound of its own: one that ran out must still leave the release its whole bound.
  const drainError = t.busy ? await drain(t, b) : undefined;
  const deadline = performance.now() + b.timeoutMs;
  const whole = AbortSignal.timeout(b.timeoutMs);
  const call = () => ({ signal: AbortSignal.any([whole, AbortSignal.timeout(b.callTimeoutMs)]) });
  const left = () => deadline - performance.now();
  const tried: string[] = [];
  let allAccepted = true;
  let releaseError: string | undefined;
  let last: Holding | undefined;
  /** The last report that could be read: a reading the bound itself cut short does not undo what it said. */
  let lastRead: Holding | undefined;
  const verdict = (extra: Partial<Released>): Released => ({
    released: false,
    tried,
    durationMs: performance.now() - t0,
    vramAfter: lastRead?.vramBytes,
    ...extra,
  });
  try {
    for (;;) {
      const r = await t.release(call()).catch((err: unknown) => {
        if (whole.aborted) throw err;
        return { tried: [], accepted: false, error: describeFetchError(err) };
      });
      for (const x of r.tried) if (!tried.includes(x)) tried.push(x);
      allAccepted &&= r.accepted;
      releaseError = r.error ?? releaseError;
      // A reading that failed proves nothing either way: held, and read again (the contract's `unreadable`).
      last = await t.verify(call()).catch((err: unknown): Holding => {
        if (whole.aborted) throw err;
        return { held: true, unreadable: describeFetchError(err) };
      });
      if (!last.unreadable) lastRead = last;
      if (last.notRunning) return verdict({ released: true, notRunning: last.notRunning });
      if (!last.held) return verdict({ released: true, error: drainError });
      if (left() <= 0) break;
      await sleep(Math.min(b.pollMs, left()), whole);
    }
  } catch (err) {
    if (!whole.aborted) return verdict({ error: describeFetchError(err) });
  }
  const bound = `within its bound (${formatDuration(b.timeoutMs)})`;
  const why = [drainError, releaseError, last?.unreadable].filter(Boolean).join("; ");
  // Lied: every release was answered as done, and the tenant's own report, read last, still held.
  const lied = allAccepted && lastRead !== undefined && lastRead.held;
  const error = lied
    ? `${t.label} answered the release as done but still reports memory held ${bound}`
    : `${t.label} did not release ${bound}${why ? `: ${why}` : ""}`;
  return verdict({ error, lied: lied || undefined });
}

/**
 * Work the tenant runs that did not come through the turnstile must end before the release (vLLM's
 * /sleep aborts it). Waits within the bound; past it the release goes ahead, and the verdict says why.
 */
async function drain(t: Tenant, b: HandOverBound): Promise<string | undefined> {
  const bound = b.drainTimeoutMs ?? b.timeoutMs;
  const deadline = performance.now() + bound;
  const left = () => deadline - performance.now();
  let n = 0;
  for (;;) {
    try {
      n = await t.busy!({ signal: AbortSignal.timeout(Math.max(1, Math.min(b.callTimeoutMs, left()))) });
    } catch (err) {
      return `${t.label}'s busy count unreadable, released without draining: ${describeFetchError(err)}`;
    }
    if (n === 0) return undefined;
    if (left() <= 0) return `${t.label} still ran ${n} request(s) of its own at the bound (${formatDuration(bound)}); released anyway`;
    await sleep(Math.min(b.pollMs, left()));
  }
}
