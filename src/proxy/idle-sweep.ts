/**
 * CLIENT_IDLE_TIMEOUT (issue 26): client connections kept alive with no request in flight are
 * closed every so often, so a few thousand idle sockets cannot use up the process's descriptors.
 *
 * Bun 1.4.4 offers no per-connection idle timer that leaves a request alone: `idleTimeout` cuts a
 * request that waits for the GPU without a byte on the wire, and does not close a connection idle
 * between two requests at all (measured with raw sockets: open after 25 s with idleTimeout 5). Its
 * `closeIdleConnections()` closes exactly the connections with no request in flight, and leaves
 * requests, streams and websockets alone. So a sweep runs every CLIENT_IDLE_TIMEOUT: a connection
 * idle for that long is closed by the next one. Clients reconnect as after any keep-alive timeout
 * (Node's server closes idle connections after 5 s by default).
 *
 * Bun itself closes a connection that has not completed its first request head within ~10 s
 * (measured; not configurable). A documented limit: one that sent a whole request and then stops
 * half-way through the next head is not idle to Bun, and stays until the client goes.
 */
export interface Sweepable {
  closeIdleConnections(): number;
}

/** Starts the sweep; the function it returns stops it. `closed` hears each sweep that closed any. */
export function sweepIdleConnections(server: Sweepable, everyMs: number, closed: (n: number) => void): () => void {
  if (everyMs <= 0) return () => {};
  const timer = setInterval(() => {
    const n = server.closeIdleConnections();
    if (n > 0) closed(n);
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
