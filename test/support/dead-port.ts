/**
 * A localhost port nobody listens on right now, different for each call (it was free a moment
 * ago): a dead upstream, or an address to start (and restart) a server on.
 */
export function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** A dead upstream's port. */
export const deadPort = freePort;
