/**
 * CLIENT_IDLE_TIMEOUT (issue 26): client connections kept alive with no request in flight are
 * closed, so a few thousand idle sockets cannot use up the process's descriptors.
 *
 * Bun 1.4.4 offers no per-connection idle timer that leaves a request alone: `idleTimeout` cuts a
 * request that waits for the GPU without a byte on the wire, and does not close a connection idle
 * between two requests at all (measured with raw sockets: open after 25 s with idleTimeout 5). Its
 * `closeIdleConnections()` closes exactly the connections with no request in flight, and leaves
 * requests, streams and websockets alone — but all of them at once, also one a client is about to
 * send its next request on (the client then sees the connection reset, as with any keep-alive
 * timeout). So the sweep waits for a quiet moment: at least CLIENT_IDLE_TIMEOUT since the last
 * sweep, nothing in flight on the listener and no request begun for QUIET_MS. A listener that is
 * never quiet is swept anyway after FORCE_AFTER sweep periods, so idle sockets stay bounded under
 * any traffic.
 *
 * Bun itself closes a connection that has not completed its first request head within ~10 s
 * (measured; not configurable). A documented limit: one that sent a whole request and then stops
 * half-way through the next head is not idle to Bun, and stays until the client goes.
 */
export interface Sweepable {
  closeIdleConnections(): number;
  readonly pendingRequests: number;
}

/** No request begun on the listener for this long: a client is not in the middle of reusing a connection. */
export const QUIET_MS = 1000;
/** A listener never quiet is swept anyway after this many CLIENT_IDLE_TIMEOUT periods. */
export const FORCE_AFTER = 5;

/** The time the listener's last request began (performance.now()), set by the listener per request. */
export interface Activity {
  lastRequestAt: number;
}

/** Starts the sweep; the function it returns stops it. `closed` hears each sweep that closed any. */
export function sweepIdleConnections(server: Sweepable, activity: Activity, everyMs: number, closed: (n: number) => void, now = () => performance.now()): () => void {
  if (everyMs <= 0) return () => {};
  let lastSweep = now();
  const timer = setInterval(
    () => {
      const t = now();
      if (t - lastSweep < everyMs) return;
      const quiet = server.pendingRequests === 0 && t - activity.lastRequestAt >= Math.min(QUIET_MS, everyMs);
      if (!quiet && t - lastSweep < FORCE_AFTER * everyMs) return;
      lastSweep = t;
      const n = server.closeIdleConnections();
      if (n > 0) closed(n);
    },
    Math.max(10, Math.min(everyMs, QUIET_MS) / 4),
  );
  timer.unref();
  return () => clearInterval(timer);
}
