/**
 * Following /turnstile/events from the command line the way the status page does: when the
 * stream is lost (the turnstile restarts, the network blips) it is opened again, and the caller
 * hears once that it was lost and once that it is back — `status --watch` and `lease -- cmd`.
 */
import { redactUrl } from "../config/redact.ts";
import { sleep } from "../http/backoff.ts";
import { readSse, type SseEvent } from "../status/sse-read.ts";

export interface FollowEventsOptions {
  url: string;
  headers: Record<string, string>;
  signal: AbortSignal;
  onEvent(e: SseEvent, fresh: boolean): void;
  /** The stream ended or could not be opened after it had been open; `reason` says how. */
  onLost?(reason: string): void;
  /** Between tries while the stream is lost. */
  retryMs?: number;
}

/**
 * A failed or cut connection in a person's words. Bun's own messages point at a fetch option
 * ("pass `verbose: true` in the second argument to fetch()") that nobody running the CLI can use.
 */
export function connectionFailure(err: unknown): string {
  const code = err && typeof err === "object" && "code" in err ? String(err.code) : "";
  if (code === "ECONNRESET" || code === "ConnectionClosed") return "the connection was cut";
  if (code === "ECONNREFUSED" || code === "ConnectionRefused") return "connection refused";
  if (code === "ETIMEDOUT" || code === "ConnectionTimeout") return "the connection timed out";
  const msg = err instanceof Error ? err.message : String(err);
  return msg.replace(/\s*For more information, pass `verbose: true`.*$/s, "").replace(/\s*Is the computer able to access the url\?$/, "") || "the connection failed";
}

export type FollowEnd = { ok: true } | { ok: false; reason: string };

/**
 * Resolves when `signal` aborts (ok), or with the reason the stream could not be opened at all
 * the first time (a wrong URL should fail at once, not retry for ever). `fresh` is true on the
 * first event of every connection (the `status` snapshot).
 */
export async function followEvents(opts: FollowEventsOptions): Promise<FollowEnd> {
  const retryMs = opts.retryMs ?? 1000;
  let opened = false;
  let lost = false;
  while (!opts.signal.aborted) {
    let reason: string;
    try {
      const res = await fetch(opts.url, { headers: opts.headers, signal: opts.signal });
      if (!res.ok || !res.body) {
        await res.body?.cancel().catch(() => {});
        reason = `${redactUrl(opts.url)} answered ${res.status}`;
      } else {
        opened = true;
        lost = false;
        let fresh = true;
        for await (const e of readSse(res.body)) {
          opts.onEvent(e, fresh);
          fresh = false;
        }
        reason = "the event stream ended (the turnstile stopped?)";
      }
    } catch (err) {
      if (opts.signal.aborted) break;
      reason = connectionFailure(err);
    }
    if (!opened) return { ok: false, reason };
    if (!lost) opts.onLost?.(reason);
    lost = true;
    await sleep(retryMs, opts.signal).catch(() => {});
  }
  return { ok: true };
}
